"""The PCIe link of every GPU of the node, read from sysfs at cordon time, for the load test's
``--expect-link`` (docs/loadtest.md, "PCIe links"): what the link can train to, the lower of the
GPU's and its upstream port's ``max_link_*``. A GPU whose link is down now (``Unknown`` speed,
width 0) or whose files cannot be read records nothing. GPUs: NVIDIA (0x10de) display and 3D
controllers, not NVSwitches nor audio functions.
"""

from __future__ import annotations

import re
from pathlib import Path

from guard.evidence.collect import Host, upstream_ports
from guard.pci import LINK_SPEEDS, LINK_WIDTHS

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
    vendor, cls = _read(device / "vendor"), _read(device / "class")
    return vendor == NVIDIA and cls is not None and cls.startswith(GPU_CLASSES)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def speed(text: str | None) -> str | None:
    """The GT/s of a sysfs link speed in `--expect-link` spelling; None for ``Unknown``.

    >>> speed("32.0 GT/s PCIe"), speed("2.5 GT/s PCIe"), speed("8.0 GT/s"), speed("Unknown")
    ('32', '2.5', '8', None)
    """
    found = _SPEED.match(text or "")
    if found is None:
        return None
    value = f"{float(found[1]):g}"
    return value if value in LINK_SPEEDS else None


def width(text: str | None) -> int | None:
    """
    >>> width("16"), width("0"), width("x16"), width(None)
    (16, None, None, None)
    """
    value = int(text) if text and text.isascii() and text.isdigit() else 0
    return value if value in LINK_WIDTHS else None


def gpu_link(host: Host, pci: str) -> str | None:
    """`16GT/s,x16` for a GPU whose link is up; None when it records nothing (case list above)."""
    device = host.sysfs_device(pci)
    if speed(_read(device / "current_link_speed")) is None:
        return None
    if width(_read(device / "current_link_width")) is None:
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
