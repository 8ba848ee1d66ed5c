"""Click pieces shared by the evidence and ledger commands."""

from __future__ import annotations

from pathlib import Path

import click

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
