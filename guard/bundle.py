"""Every data file the package ships, loaded and checked once when a command starts.

The CronJob's image is the image of the evidence Job: a missing or broken Xid table or request
template must stop `gpu-node-guard run` at start, not the evidence Job of the next real fault,
after the node is already cordoned. The commands that use a table (`evidence collect`,
`evidence classify`) load it themselves at their start as well, from a path they may be given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jinja2

from guard.evidence import request
from guard.evidence.catalog import CatalogEntry, DataFileError, XidClasses, load_catalog
from guard.evidence.catalog import load_classes as load_xid_classes
from guard.jobs import JobTemplates, TemplateLoadError


class BundleError(Exception):
    """A shipped data file is missing or broken; one line naming the file."""


@dataclass(frozen=True)
class Bundle:
    """The package's data as values: Job templates, Xid tables, the request draft template."""

    templates: JobTemplates
    xid_classes: XidClasses
    xid_catalog: Mapping[int, CatalogEntry]
    request_template: jinja2.Template


def load_bundle() -> Bundle:
    """Load every shipped file; raises BundleError with the first problem found."""
    try:
        return Bundle(
            templates=JobTemplates.load(),
            xid_classes=load_xid_classes(),
            xid_catalog=load_catalog(),
            request_template=request.load_template(None),
        )
    except (TemplateLoadError, DataFileError, request.TemplateError) as exc:
        raise BundleError(f"package data: {exc}") from None
