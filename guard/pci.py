"""PCI addresses in the three spellings the guard meets, normalised to sysfs form: the kernel's
Xid lines say ``0000:99:00`` (no function), sysfs says ``0000:99:00.0`` and
dcgm-exporter's ``pci_bus_id`` label says ``00000000:99:00.0`` (32-bit domain).
"""

from __future__ import annotations

import re

_PCI = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{4,8}):)?(?P<bus>[0-9a-f]{2}):(?P<dev>[0-9a-f]{2})(?:\.(?P<fn>[0-7]))?\Z"
)


class PciAddressError(ValueError):
    """Raised for text that is not a PCI address in any known spelling."""


def normalize_pci(text: str) -> str:
    """Return ``dddd:bb:dd.f`` (lower case) for any accepted spelling."""
    match = _PCI.match(text.strip().lower())
    if match is None:
        raise PciAddressError(f"not a PCI address: {text!r}")
    domain = int(match["domain"] or "0", 16)
    if domain > 0xFFFF:
        raise PciAddressError(f"PCI domain out of range: {text!r}")
    return f"{domain:04x}:{match['bus']}:{match['dev']}.{match['fn'] or '0'}"


# A PCIe link as the guard records it and the load test's --expect-link reads it
# (docs/loadtest.md, "PCIe links"): the speed as lspci prints it, the width as its number.
LINK_SPEEDS = ("2.5", "5", "8", "16", "32", "64")  # GT/s of PCIe gen 1..6
LINK_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
SYSFS_PCI = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
LINK = (
    rf"({'|'.join(s.replace('.', chr(92) + '.') for s in LINK_SPEEDS)})GT/s,"
    rf"x({'|'.join(map(str, LINK_WIDTHS))})"
)
_LINK_RECORD = re.compile(rf"^({SYSFS_PCI})=({LINK})\Z", re.ASCII)


def link_record(text: str) -> tuple[str, str] | None:
    """``0000:18:00.0=16GT/s,x16`` as (pci, link); None for anything else (sysfs form only)."""
    match = _LINK_RECORD.match(text)
    return (match[1], match[2]) if match else None
