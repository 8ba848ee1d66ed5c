"""Every data file the package ships, loaded and checked once when a command starts: the
CronJob's image is the evidence Job's, so a broken Xid table or request template stops
`gpu-node-guard run` at start, not the evidence Job of the next fault on a cordoned node.
"""

from __future__ import annotations

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from guard.jobs import JobTemplates, TemplateLoadError
from guard.xid_tables import DataFileError, load_catalog
from guard.xid_tables import load_classes as load_xid_classes

TEMPLATE_NAME = "request.md.j2"  # the request draft (guard.evidence.request renders it)


class TemplateError(ValueError):
    """The request template is missing or broken; one line with the file name."""


def load_template(loader: jinja2.BaseLoader | None = None) -> jinja2.Template:
    """Compile the packaged template now (`loader`: tests only), so a broken install fails
    before any evidence is read."""
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


class BundleError(Exception):
    """A shipped data file is missing or broken; one line naming the file."""


def load_bundle() -> JobTemplates:
    """Load every shipped file; the Job templates, as the run uses them. Raises BundleError with
    the first problem found."""
    try:
        templates = JobTemplates.load()
        load_xid_classes()
        load_catalog()
        load_template(None)
        return templates
    except (TemplateLoadError, DataFileError, TemplateError) as exc:
        raise BundleError(f"package data: {exc}") from None
