"""`gpu-node-guard fence set|lift`: the fence Job's command (guard.fence.host does the work).

Exit 0 only when the asked compute mode was read back (`fenced`, `lifted`); 1 otherwise
(`gpu-absent`, `mismatch`, `error`), so the Job's status and its summary agree. Bad arguments:
one line, exit 2.
"""

from __future__ import annotations

from typing import Any

import click

from guard.cli_options import pci_callback, uuid_callback
from guard.evidence.cli import host_root_option, timeout_option
from guard.evidence.collect import Host
from guard.fence.host import Request, apply
from guard.wire import TERMINATION_LOG, render_fence_summary, write_termination_message


@click.group()
def fence() -> None:
    """Fence a faulted GPU on the host (compute mode PROHIBITED), or lift the fence."""


_OPTIONS = (
    click.option("--pci", required=True, callback=pci_callback, help="The GPU's PCI address."),
    click.option("--uuid", required=True, callback=uuid_callback, help="The GPU's UUID."),
    click.option(
        "--drain",
        is_flag=True,
        help="Also nvidia-smi drain (set: -m 1 after the read-back; lift: -m 0).",
    ),
    host_root_option,
    timeout_option,
    click.option(
        "--termination-log",
        default=TERMINATION_LOG,
        show_default=True,
        help="Where the summary for the guard goes, if that file exists.",
    ),
)


def _options(command: Any) -> Any:
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def _run(mode: str, opts: dict[str, Any]) -> None:
    if opts["uuid"] == "unknown":
        raise click.BadParameter("the fence needs the GPU's UUID", param_hint="--uuid")
    host = Host(root=opts["host_root"], timeout_s=opts["timeout_s"])
    found = apply(host, Request(mode, opts["pci"], opts["uuid"], opts["drain"]))
    text = render_fence_summary(found)
    note = write_termination_message(opts["termination_log"], text)
    if note:
        click.echo(note, err=True)
    read = f" compute_mode={found.compute_mode}" if found.compute_mode else ""
    why = f" why={found.why}" if found.why else ""
    click.echo(
        f"fence {mode} gpu={found.pci} uuid={found.uuid} outcome={found.outcome}"
        f"{read} drain={found.drain}{why}"
    )
    if not found.passed:
        raise SystemExit(1)


@fence.command("set")
@_options
def set_(**opts: Any) -> None:
    """Compute mode PROHIBITED on the GPU (no new CUDA context, on the host too), read back."""
    _run("set", opts)


@fence.command()
@_options
def lift(**opts: Any) -> None:
    """Compute mode DEFAULT on the GPU again, read back."""
    _run("lift", opts)
