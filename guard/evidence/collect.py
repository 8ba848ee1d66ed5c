"""Read the host's evidence from inside the evidence Job, never writing there: commands through
`guard.doors.hostexec` with a timeout, sysfs under a root (``/proc/1/root``). A command that hangs
or fails becomes an `Unknown` and the rest is still read (docs/evidence.md)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from guard.doors import hostexec
from guard.doors.hostexec import CommandResult, Unknown
from guard.evidence.aer import parse_counters
from guard.evidence.assess import Counters, Inputs, PortInput
from guard.evidence.kernel_log import for_gpu, lines_of, parse_kernel_log
from guard.pci import LINK_SPEEDS, LINK_WIDTHS

DEFAULT_HOST_ROOT = Path("/proc/1/root")
DEFAULT_TIMEOUT_S = 20.0
PREVIOUS_BOOT = "journalctl -k -b -1 (previous boot: the current one has no record of this GPU)"
_BDF = re.compile(r"^[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_AER_FILES = (
    *(f"aer_dev_{k}" for k in ("correctable", "fatal", "nonfatal")),
    *(f"aer_rootport_total_err_{k}" for k in ("cor", "fatal", "nonfatal")),
)


@dataclass(frozen=True, slots=True)
class Host:
    """How to reach the host: a root for its files, and for its commands a timeout and a prefix,
    or a `runner` that answers them instead (tests)."""

    root: Path = DEFAULT_HOST_ROOT
    timeout_s: float = DEFAULT_TIMEOUT_S
    prefix: tuple[str, ...] = hostexec.NSENTER_PREFIX
    runner: hostexec.Runner | None = None  # None: real commands, through guard.doors.hostexec

    def run(self, *argv: str) -> CommandResult:
        return (self.runner or hostexec.HostRunner(self.timeout_s, self.prefix)).run(argv)

    def sysfs_device(self, pci: str) -> Path:
        return self.root / "sys" / "bus" / "pci" / "devices" / pci


def upstream_ports(host: Host, pci: str) -> tuple[str, ...]:
    """Bridges above the GPU, root port first, from its sysfs link; OSError when unreadable.

    ``/sys/bus/pci/devices/<gpu>`` links to ``../../../devices/pci0000:97/0000:97:01.0/<gpu>``:
    every PCI address in that path before the GPU's own is a bridge on the way down.
    """
    target = os.readlink(host.sysfs_device(pci))
    chain = [part for part in Path(target).parts if _BDF.match(part)]
    return tuple(chain[:-1]) if chain and chain[-1] == pci else tuple(chain)


def read_counters(host: Host, address: str) -> Counters:
    """The AER counter files of one device; absent files (no AER) are left out."""
    found: dict[str, dict[str, int]] = {}
    for name in _AER_FILES:
        try:
            text = (host.sysfs_device(address) / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        found[name] = parse_counters(text)
    return found


# What journalctl prints, exit 0, where journald keeps no journal (Storage=none, or volatile
# storage on a host whose /run/log/journal is empty): on stderr or stdout, by version.
NO_JOURNAL = "No journal files were found."


def _journal(host: Host, boot: str) -> CommandResult:
    """The kernel log of one boot from the journal; an empty journal is a failure to read it,
    never a kernel log without records (then dmesg or the other boot are read)."""
    result = host.run("journalctl", "-k", "-b", boot, "--no-pager", "-o", "short-iso-precise")
    why = empty_journal(result.stdout, result.stderr) if result.ok else ""
    return replace(result, error=why) if why else result


def empty_journal(stdout: str, stderr: str) -> str:
    """Why a journalctl answer of exit 0 holds no kernel log ("" when it holds one): its own
    `-- … --` lines (`-- No entries --`, `-- Boot … --`) and blank lines are not kernel lines."""
    said = NO_JOURNAL in stderr
    for line in lines_of(stdout):
        text = line.strip()
        if text == NO_JOURNAL:
            said = True
        elif text and not (text.startswith("-- ") and text.endswith(" --")):
            return ""  # a kernel line
    return f"no journal ({NO_JOURNAL})" if said else "no kernel lines in the journal"


def _has_record(text: str, pci: str) -> bool:
    mine = for_gpu(parse_kernel_log(text), pci)
    return bool(mine.xids or mine.fallen_off or mine.dead)


NO_LOG = "unknown (no kernel log could be read)"


def current_kernel_log(host: Host) -> tuple[CommandResult, list[Unknown]]:
    """The current boot's kernel log: the journal, else dmesg (node-wide evidence reads this)."""
    current, unknowns = _journal(host, "0"), []
    if not current.ok:
        unknowns.append(Unknown("journalctl -k -b 0", current.why))
        current = host.run("dmesg", "--time-format", "iso")
        if not current.ok:
            unknowns.append(Unknown("dmesg --time-format iso", current.why))
    return current, unknowns


def kernel_log(host: Host, pci: str) -> tuple[str | None, str, tuple[Unknown, ...]]:
    """The current boot's kernel log, or the previous boot's when only that one has a record of
    this GPU (a reboot since the fault); with its source, and what could not be read."""
    current, unknowns = current_kernel_log(host)
    label = " ".join(current.argv)
    if current.ok and _has_record(current.stdout, pci):
        return current.stdout, label, tuple(unknowns)
    previous = _journal(host, "-1")
    if not previous.ok:
        unknowns.append(Unknown("journalctl -k -b -1", previous.why))
    elif _has_record(previous.stdout, pci) or not current.ok:
        return previous.stdout, PREVIOUS_BOOT, tuple(unknowns)
    if current.ok:
        return current.stdout, label, tuple(unknowns)
    return None, NO_LOG, tuple(unknowns)


def port_inputs(host: Host, pci: str) -> tuple[tuple[PortInput, ...], list[Unknown]]:
    """The GPU's root port and parent bridge: each one's lspci -vvv and AER counters."""
    try:
        chain = upstream_ports(host, pci)
    except FileNotFoundError:
        return (), [Unknown(f"sysfs {pci}", "no /sys/bus/pci/devices entry (GPU removed?)")]
    except OSError as err:
        why = f"cannot read {host.sysfs_device(pci)}: {err.strerror}"
        return (), [Unknown(f"sysfs {pci}", why)]
    if not chain:
        return (), []
    roles = {chain[0]: "root port"}
    roles[chain[-1]] = "root port, parent bridge" if len(chain) == 1 else "parent bridge"
    ports, unknowns = [], []
    for address, role in roles.items():
        shown = host.run("lspci", "-vvv", "-s", address)
        if not shown.ok:
            unknowns.append(Unknown(f"lspci -vvv -s {address}", shown.why))
        text = shown.stdout if shown.ok else None
        ports.append(PortInput(address, role, text, read_counters(host, address)))
    return tuple(ports), unknowns


_NO_HANDLE = "Unable to determine the device handle"


def nvidia_smi(host: Host, pci: str) -> tuple[str | None, Unknown | None]:
    """``nvidia-smi -q`` of the GPU, run last: NVML may block on a lost GPU until the timeout.
    When it cannot open the GPU its one line ("GPU is lost") is the evidence, not a failure."""
    argv = ("nvidia-smi", "-q", "-i", pci)
    result = host.run(*argv)
    said = f"{result.stdout}\n{result.stderr}"
    if result.ok or _NO_HANDLE in said:
        return result.stdout if result.ok else said, None
    return None, Unknown(" ".join(argv), result.why)


def gather(host: Host, pci: str, reported_xid: int | None) -> Inputs:
    """Everything the verdict and the report need, read once from the host."""
    log, source, unknowns = kernel_log(host, pci)
    found = list(unknowns)
    # One config read of the GPU gives both the dump (all ff?) and, when it answers, its
    # decoded capabilities (LnkCap/LnkSta: a link trained down).
    dump = host.run("lspci", "-vvv", "-xxx", "-s", pci)
    if not dump.ok:
        found.append(Unknown(f"lspci -vvv -xxx -s {pci}", dump.why))
    ports, port_unknowns = port_inputs(host, pci)
    smi, smi_unknown = nvidia_smi(host, pci)
    if smi_unknown is not None:
        port_unknowns.append(smi_unknown)
    return Inputs(
        kernel_log=log,
        kernel_log_source=source,
        gpu_lspci=dump.stdout if dump.ok else None,
        ports=ports,
        gpu_counters=read_counters(host, pci),
        reported_xid=reported_xid,
        unknowns=(*found, *port_unknowns),
        nvidia_smi=smi,
    )


# The PCIe link of every GPU of the node (NVIDIA display and 3D controllers, not NVSwitches nor
# audio functions) at cordon time, for the load test's `--expect-link`: docs/loadtest.md.
NVIDIA = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")
_SPEED = re.compile(r"^([0-9]+(?:\.[0-9]+)?) GT/s")


def node_gpus(host: Host) -> tuple[str, ...]:
    """PCI addresses of the node's NVIDIA GPUs, sorted; () when sysfs cannot be listed."""
    devices = host.root / "sys" / "bus" / "pci" / "devices"
    try:
        entries = sorted(p.name for p in devices.iterdir())
    except OSError:
        return ()
    return tuple(e for e in entries if _is_gpu(devices / e))


def _is_gpu(device: Path) -> bool:
    vendor = _read(device / "vendor")
    cls = _read(device / "class")
    return vendor == NVIDIA and cls is not None and cls.startswith(GPU_CLASSES)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def speed(text: str | None) -> str | None:
    """The GT/s of a sysfs link speed in `--expect-link` spelling; None for ``Unknown``."""
    found = _SPEED.match(text or "")
    if found is None:
        return None
    value = f"{float(found[1]):g}"
    return value if value in LINK_SPEEDS else None


def width(text: str | None) -> int | None:
    """A sysfs link width in lanes; None for 0 (link down) or anything else."""
    value = int(text) if text and text.isascii() and text.isdigit() else 0
    return value if value in LINK_WIDTHS else None


def gpu_link(host: Host, pci: str) -> str | None:
    """`16GT/s,x16` for a GPU whose link is up; None when it records nothing (case list above)."""
    device = host.sysfs_device(pci)
    now = _read(device / "current_link_speed"), _read(device / "current_link_width")
    if speed(now[0]) is None or width(now[1]) is None:
        return None
    try:
        chain = upstream_ports(host, pci)
    except OSError:
        return None
    ends = [device, *([host.sysfs_device(chain[-1])] if chain else [])]
    speeds = [speed(_read(d / "max_link_speed")) for d in ends]
    widths = [width(_read(d / "max_link_width")) for d in ends]
    if any(s is None for s in speeds) or any(w is None for w in widths):
        return None
    low = min((s for s in speeds if s is not None), key=float)
    return f"{low}GT/s,x{min(w for w in widths if w is not None)}"


def node_links(host: Host) -> tuple[tuple[str, str], ...]:
    """(pci, link) of every GPU of the node whose link is up, by PCI address."""
    links = ((pci, gpu_link(host, pci)) for pci in node_gpus(host))
    return tuple((pci, link) for pci, link in links if link is not None)
