"""Facts from ``lspci`` output: is the GPU's config space all ``ff`` (a device that no longer
answers config cycles reads all ones: ``(rev ff)``, ``!!! Unknown header type 7f``, a dump of
``ff``), the port's AER status (``UESta:`` on one line or three, by pciutils version), the links."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import takewhile

from guard.evidence.kernel_log import pci_or_none
from guard.pci import normalize_pci

_DUMP = re.compile(r"^([0-9a-f]{2,3}):((?: [0-9a-f]{2})+)\s*\Z")
_LABEL = re.compile(r"^(?P<label>[A-Za-z][A-Za-z0-9]*):\s*(?P<rest>.*)$")
_FLAG = re.compile(r"^(?P<name>[A-Za-z][\w/]*)(?P<sign>[+-])\Z")
_DEAD_HEADER = ("(rev ff)", "Unknown header type 7f")
_CAPABILITY = "Capabilities: ["
_HEADER = re.compile(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) \S")  # a device line
_SPEED = re.compile(r"Speed (?P<speed>[0-9.]+GT/s|unknown)", re.IGNORECASE)
_WIDTH = re.compile(r"Width x(?P<width>\d+)")


@dataclass(frozen=True, slots=True)
class ConfigSpace:
    all_ff: bool | None  # None: lspci printed nothing to judge by
    bytes_read: int
    vendor_device: str | None  # "10de:2330" from the dump's first four bytes
    header: str  # the device line lspci printed, or "" when it printed none


def config_space(text: str, pci: str | None = None) -> ConfigSpace:
    """Judge the device block of `pci` (sysfs form) in ``lspci -xxx`` output, or the first
    block when `pci` is None; a listing without that device proves nothing.

    Only that block counts: in ``lspci -xxx -d 10de:`` of a node, a dead neighbour's
    ``(rev ff)`` and ``ff`` dump say nothing about the GPU asked for."""
    block = _device_block(text, pci)
    header = block[0].strip() if block else ""
    data: list[int] = []
    for line in block[1:]:
        dump = _DUMP.match(line.strip())
        if dump:
            data.extend(int(b, 16) for b in dump.group(2).split())
    all_ff: bool | None = None  # a header with no dump and no dead marks proves nothing
    if data:
        all_ff = all(b == 0xFF for b in data)
    elif any(mark in line for line in block for mark in _DEAD_HEADER):
        all_ff = True
    elif any(_CAPABILITY in line for line in block):
        # `lspci -vv` decodes capabilities from config reads: the GPU answered them.
        all_ff = False
    vendor = None
    if len(data) >= 4 and not all(b == 0xFF for b in data[:4]):
        vendor = f"{data[1]:02x}{data[0]:02x}:{data[3]:02x}{data[2]:02x}"
    return ConfigSpace(all_ff, len(data), vendor, header)


def _blocks(text: str) -> list[list[str]]:
    """Device blocks: a device line (not indented, not a dump line) and the lines under it."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line and not line[0].isspace() and not _DUMP.match(line.strip()):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def lspci_blocks(text: str) -> dict[str, str]:
    """Device address → its ``lspci -vvv`` block (device line plus the indented lines under it);
    other lines (kernel or ``grep -H`` lines in the same file) are no block."""
    return {
        normalize_pci(b[0].split()[0]): "\n".join([b[0], *takewhile(_indented, b[1:])])
        for b in _blocks(text)
        if _HEADER.match(b[0])
    }


def _indented(line: str) -> bool:
    return line[:1].isspace()


def _device_block(text: str, pci: str | None) -> list[str]:
    """`pci`'s block, or the first one; text without a device line (a bare dump) can only be
    about the device asked for."""
    blocks = _blocks(text)
    if not blocks:
        lines = text.splitlines()
        return ["", *lines] if lines else []
    if pci is None:
        return blocks[0]
    return next((b for b in blocks if _address(b[0]) == pci), [])


def _address(header: str) -> str | None:
    return pci_or_none(header.split(maxsplit=1)[0])


@dataclass(frozen=True, slots=True)
class PortStatus:
    """Status registers of a PCIe port (``lspci -vvv``); the flags listed are the set (+) ones."""

    has_aer: bool
    uncorrectable: tuple[str, ...]  # UESta+
    correctable: tuple[str, ...]  # CESta+
    device_status: tuple[str, ...]  # DevSta+
    link_active: bool | None  # LnkSta DLActive; None when not reported

    @property
    def surprise_down(self) -> bool:
        return "SDES" in self.uncorrectable


def _labelled_flags(text: str) -> dict[str, dict[str, bool]]:
    """Flags per register label, continuation lines folded into the label above them."""
    out: dict[str, dict[str, bool]] = {}
    label = ""
    for raw in text.splitlines():
        line = raw.strip()
        found = _LABEL.match(line)
        tokens = line.split()
        if found and not _FLAG.match(tokens[0]):
            label = found["label"]
            tokens = found["rest"].split()
        for token in tokens:
            flag = _FLAG.match(token.rstrip(","))
            if flag and label:
                out.setdefault(label, {})[flag["name"]] = flag["sign"] == "+"
    return out


def port_status(text: str) -> PortStatus:
    """Parse ``lspci -vvv -s <port>``."""
    flags = _labelled_flags(text)

    def set_in(label: str) -> tuple[str, ...]:
        return tuple(sorted(k for k, on in flags.get(label, {}).items() if on))

    link = flags.get("LnkSta", {}).get("DLActive")
    return PortStatus(
        has_aer="Advanced Error Reporting" in text,
        uncorrectable=set_in("UESta"),
        correctable=set_in("CESta"),
        device_status=set_in("DevSta"),
        link_active=link,
    )


@dataclass(frozen=True, slots=True)
class PcieLink:
    """A device's PCIe link from ``lspci -vv``: what it can train to (LnkCap) and what it runs
    at now (LnkSta). Speed in GT/s (None: ``unknown``), width in lanes."""

    pci: str
    cap_speed: float | None
    cap_width: int | None
    speed: float | None
    width: int | None

    @property
    def width_downgraded(self) -> bool:
        return None not in (self.cap_width, self.width) and self.width < self.cap_width  # type: ignore[operator]

    @property
    def speed_downgraded(self) -> bool:
        if self.cap_speed is None:
            return False
        return self.speed is None or self.speed < self.cap_speed


def _speed(text: str) -> float | None:
    found = _SPEED.search(text)
    if found is None or found["speed"].lower() == "unknown":
        return None
    return float(found["speed"].removesuffix("GT/s"))


def _width(text: str) -> int | None:
    found = _WIDTH.search(text)
    return int(found["width"]) if found else None


def pcie_links(text: str) -> tuple[PcieLink, ...]:
    """Every device block of ``lspci -vv`` output with both LnkCap and LnkSta, in order."""
    out: list[PcieLink] = []
    for block in _blocks(text):
        cap = next((ln for ln in block if "LnkCap:" in ln), None)
        sta = next((ln for ln in block if "LnkSta:" in ln), None)
        if cap is not None and sta is not None and (address := _address(block[0])):
            out.append(PcieLink(address, _speed(cap), _width(cap), _speed(sta), _width(sta)))
    return tuple(out)
