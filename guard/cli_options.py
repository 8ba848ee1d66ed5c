"""Click pieces shared by the guard's commands (evidence, ledger, render, the load test): the
one check of a PCI address, a node name and a GPU UUID given on a command line."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import click

from guard.names import is_dns_subdomain
from guard.pci import PciAddressError, normalize_pci

OUTPUT = click.Choice(["text", "json"])
FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def pci_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Accept 0000:99:00, 0000:99:00.0 and 00000000:99:00.0 in any case; store sysfs form."""
    if value is None:
        return None
    try:
        return normalize_pci(value)
    except PciAddressError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from err


# The shape the admission policies accept for a GPU UUID in a guard Job's argv.
_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")


Callback = Callable[[click.Context, click.Parameter, "str | None"], "str | None"]


def name_callback(is_name: Callable[[str], bool], what: str) -> Callback:
    """A click callback refusing a value `is_name` rejects: "'x' is not a <what>"."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and not is_name(value):
            raise click.BadParameter(f"{value!r} is not a {what}", ctx=ctx, param=param)
        return value

    return check


# A Kubernetes node name (DNS-1123 subdomain, at most 253 characters).
node_callback = name_callback(is_dns_subdomain, "node name (a DNS-1123 subdomain)")


def uuid_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A GPU UUID as nvidia-smi and dcgm-exporter print it, or ``unknown``."""
    if value is not None and value != "unknown" and not _UUID.match(value):
        raise click.BadParameter(f"{value!r} is not a GPU UUID (GPU-…)", ctx=ctx, param=param)
    return value
