"""The request draft on-call pastes to the infrastructure team, rendered from a Jinja template.

The bundled template is ``guard/templates/request.md.j2``; a team rewords it by pointing
``--request-template`` (or ``GUARD_REQUEST_TEMPLATE``) at its own file. Undefined names are errors
(StrictUndefined), so a typo in a template fails loudly instead of printing a blank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from guard.evidence.assess import Assessment
from guard.evidence.report import (
    Tables,
    aer_sentences,
    config_sentence,
    recovery_sentence,
    xid_dict,
)

DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "request.md.j2"


class TemplateError(ValueError):
    """The request template is missing or broken; one line with the file name."""


def load_template(path: Path | None) -> jinja2.Template:
    """Read and compile the template now, so a bad path fails before any evidence is read."""
    path = path or DEFAULT_TEMPLATE
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TemplateError(f"request template {path}: cannot read: {err}") from err
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # plain text for a ticket, not HTML
    )
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as err:
        raise TemplateError(f"request template {path}:{err.lineno}: {err.message}") from err


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
        "aer_sentences": list(aer_sentences(a)),
        "surprise_down": a.surprise_down,
        "root_port": a.root_port,
        "history": history,
        "unknown": [f"{u.what}: {u.why}" for u in a.unknowns],
    }


def render(template: jinja2.Template, values: dict[str, Any]) -> str:
    try:
        return template.render(**values)
    except jinja2.TemplateError as err:
        raise TemplateError(f"request template: {err}") from err
