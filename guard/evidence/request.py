"""The request draft on-call pastes to the infrastructure team, rendered from a Jinja template.

The template is ``guard/templates/request.md.j2`` inside the package, and only that file: no
option or environment variable of a guard Job can name another one, so nothing that reaches the
Job's argv can become template source. It is rendered in Jinja's immutable sandbox from plain data
(strings, numbers, lists): the kernel-log text it quotes is a value, never evaluated. Undefined
names are errors (StrictUndefined), so a typo fails loudly instead of printing a blank.
"""

from __future__ import annotations

from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from guard.evidence.assess import Assessment
from guard.evidence.report import (
    Tables,
    aer_sentences,
    config_sentence,
    dead_sentences,
    link_sentence,
    recovery_sentence,
    smi_sentences,
    xid_dict,
)

TEMPLATE_NAME = "request.md.j2"


class TemplateError(ValueError):
    """The request template is missing or broken; one line with the file name."""


def load_template(loader: jinja2.BaseLoader | None = None) -> jinja2.Template:
    """Compile the packaged template now, so a broken install fails before any evidence is read.

    `loader` is for tests; the command line never passes one.
    """
    env = ImmutableSandboxedEnvironment(
        loader=loader or jinja2.PackageLoader("guard", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # plain text for a ticket, not HTML
    )
    try:
        return env.get_template(TEMPLATE_NAME)
    except jinja2.TemplateNotFound:
        raise TemplateError(f"request template {TEMPLATE_NAME} not found") from None
    except jinja2.TemplateSyntaxError as err:
        where = f"request template {TEMPLATE_NAME}:{err.lineno}"
        raise TemplateError(f"{where}: {err.message}") from err


def context(a: Assessment, tables: Tables, node: str, history: str | None) -> dict[str, Any]:
    """Everything a template may use; docs/evidence.md lists the names."""
    return {
        "node": node,
        "pci": a.pci,
        "uuid": a.uuid,
        "verdict": a.verdict.value,
        "reasons": list(a.reasons),
        "xids": [xid_dict(x, tables) for x in a.xids],
        "reported_xid": a.reported_xid,
        "fallen_off": [{"time": f.time, "form": f.form} for f in a.fallen_off],
        "config_space_all_ff": a.config_space_all_ff,
        "config_sentence": config_sentence(a),
        "recovery_sentence": recovery_sentence(a),
        "dead_sentences": list(dead_sentences(a)),
        "link_sentences": [link_sentence(link) for link in a.links],
        "smi_sentences": list(smi_sentences(a)),
        "aer_sentences": list(aer_sentences(a)),
        "surprise_down": a.surprise_down,
        "root_port": a.root_port,
        "history": history,
        "unknown": [f"{u.what}: {u.why}" for u in a.unknowns],
    }


def render(template: jinja2.Template, values: dict[str, Any]) -> str:
    try:
        return template.render(**values)
    except jinja2.TemplateError as err:  # SecurityError (sandbox) is one of them
        raise TemplateError(f"request template: {err}") from err
