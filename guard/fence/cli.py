"""`gpu-node-guard fence set|lift`: fence or lift one GPU on the host, then read back what the
driver says. Exit 0 only when the asked mode was read back (`fenced`, `lifted`), else 1, so the
Job's status and its summary agree; bad arguments: one line, exit 2. Case list of `apply`:
docs/isolation.md, "The fence Job's outcomes"."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import click

from guard.cli_options import pci_callback, termination_log_option, uuid_callback, write_summary
from guard.doors.hostexec import CommandResult
from guard.evidence.cli import host_root_option, timeout_option
from guard.evidence.collect import Host
from guard.evidence.lspci import config_space
from guard.pci import PciAddressError, normalize_pci
from guard.wire import FenceSummary, render_fence_summary

# nvidia-smi's words for a GPU NVML cannot find or open (its lost-GPU line, its "No devices").
# A missing nvidia-smi (exit 127) is an error, never an absent GPU.
_GONE = ("no devices were found", "unable to determine the device handle", "gpu is lost")
ASKED = {"set": ("PROHIBITED", "Prohibited"), "lift": ("DEFAULT", "Default")}
QUERY = ("--query-gpu=pci.bus_id,uuid,compute_mode", "--format=csv,noheader")


@dataclass(frozen=True, slots=True)
class Request:
    mode: str  # set | lift
    pci: str  # sysfs form
    uuid: str
    drain: bool = False


def _gone(r: CommandResult) -> bool:
    text = f"{r.stdout}\n{r.stderr}".lower()
    return not r.ok and not r.missing and any(word in text for word in _GONE)


def _why(r: CommandResult) -> str:
    """`CommandResult.why`, with nvidia-smi's own line: it prints its errors on stdout."""
    said = (r.stderr.strip() or r.stdout.strip()).splitlines()
    if r.ok or r.error or not said:
        return r.why
    return f"exit {r.returncode}: {said[-1]}"


def absent(host: Host, pci: str) -> str:
    """Why the GPU is off the bus ("" when it is on it)."""
    if not host.sysfs_device(pci).exists():
        return f"no /sys/bus/pci/devices/{pci} on the host (GPU removed or fallen off the bus)"
    found = host.run("lspci", "-xxx", "-s", pci)
    if found.ok and config_space(found.stdout, pci).all_ff:
        return f"lspci -s {pci} reads all ff (rev ff): the GPU does not answer config reads"
    return ""


def _read_back(line: str) -> tuple[str, str, str] | None:
    parts = [p.strip() for p in line.split(",")]
    try:
        return (normalize_pci(parts[0]), parts[1], parts[2]) if len(parts) == 3 else None
    except PciAddressError:
        return None


def apply(host: Host, req: Request) -> FenceSummary:
    """Set or lift the fence of one GPU and say what the driver reads back (never raises: a
    host that cannot be read, /sys refused included, is the `error` outcome, not a traceback)."""
    try:
        return _apply(host, req)
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        why = f"cannot read the host{where}: {exc.strerror or exc}"
        return FenceSummary(req.mode, req.pci, req.uuid, "error", "", "off", why)


def _apply(host: Host, req: Request) -> FenceSummary:
    def done(outcome: str, why: str = "", mode: str = "", drain: str = "off") -> FenceSummary:
        return FenceSummary(req.mode, req.pci, req.uuid, outcome, mode, drain, why)

    devices = host.root / "sys" / "bus" / "pci" / "devices"
    if not devices.is_dir():  # not the host's view (no hostPID, no CAP_SYS_PTRACE): proves nothing
        return done("error", f"cannot read {devices}: the host's /sys is not visible")
    if why := absent(host, req.pci):
        return done("gpu-absent", why)
    drain = "off"
    if req.mode == "lift" and req.drain:
        undo = host.run("nvidia-smi", "drain", "-p", req.pci, "-m", "0")
        drain = "undone" if undo.ok else "failed"
    word, expected = ASKED[req.mode]
    asked = host.run("nvidia-smi", "-i", req.uuid, "-c", word)
    if _gone(asked):
        return done("gpu-absent", f"nvidia-smi -c {word}: {_why(asked)}", drain=drain)
    back = host.run("nvidia-smi", *QUERY, "-i", req.uuid)
    if _gone(back):
        return done("gpu-absent", f"read-back: {_why(back)}", drain=drain)
    noted = f"nvidia-smi -c {word}: {_why(asked)}; " if not asked.ok else ""
    lines = [ln for ln in back.stdout.splitlines() if ln.strip()]
    if not back.ok or len(lines) != 1 or (found := _read_back(lines[0])) is None:
        shown = _why(back) or f"not one '<pci>, <uuid>, <mode>' line: {back.stdout.strip()!r}"
        return done("error", f"{noted}read-back: {shown}", drain=drain)
    pci, uuid, mode = found
    if (pci, uuid.lower()) != (req.pci, req.uuid.lower()):
        why = f"{noted}read-back names {pci} {uuid}, not {req.pci} {req.uuid}"
        return done("mismatch", why, mode, drain)
    if mode.lower() != expected.lower():
        why = f"{noted}compute mode reads {mode!r}, not {expected!r}"
        return done("mismatch", why, mode, drain)
    if req.mode == "set" and req.drain:
        put = host.run("nvidia-smi", "drain", "-p", req.pci, "-m", "1")
        drain = "done" if put.ok else "failed"
        noted += "" if put.ok else f"nvidia-smi drain -m 1: {_why(put)}; "
    outcome = "fenced" if req.mode == "set" else "lifted"
    return done(outcome, noted.removesuffix("; "), mode, drain)


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
    termination_log_option(),
)


def _run(mode: str, **opts: Any) -> None:
    if opts["uuid"] == "unknown":
        raise click.BadParameter("the fence needs the GPU's UUID", param_hint="--uuid")
    host = Host(root=opts["host_root"], timeout_s=opts["timeout_s"])
    found = apply(host, Request(mode, opts["pci"], opts["uuid"], opts["drain"]))
    write_summary(opts["termination_log"], render_fence_summary(found))
    read = f" compute_mode={found.compute_mode}" if found.compute_mode else ""
    why = f" why={found.why}" if found.why else ""
    click.echo(
        f"fence {mode} gpu={found.pci} uuid={found.uuid} outcome={found.outcome}"
        f"{read} drain={found.drain}{why}"
    )
    if not found.passed:
        raise SystemExit(1)


for _mode, _help in (
    (
        "set",
        "Compute mode PROHIBITED on the GPU (no new CUDA context, on the host too), read back.",
    ),
    ("lift", "Compute mode DEFAULT on the GPU again, read back."),
):
    fence.command(_mode, help=_help)(
        functools.reduce(lambda c, o: o(c), reversed(_OPTIONS), functools.partial(_run, _mode))
    )
