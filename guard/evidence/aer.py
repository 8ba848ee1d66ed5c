"""PCIe AER evidence: kernel ``AER:`` lines and the sysfs ``aer_dev_*`` counters. Old and new
kernel spellings (drivers/pci/pcie/aer.c) are both matched everywhere."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from guard.evidence.kernel_log import line_time, lines_of
from guard.pci import PciAddressError, normalize_pci

_DEVICE = r"(?P<dev>[0-9a-fA-F]{4,5}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+"
_SEV = r"(?P<sev>Uncorrect(?:ed|able) \((?:Non-)?Fatal\)|Correct(?:ed|able))"
# (message pattern after the device, kind), first match wins
_CHECKS = tuple(
    (re.compile(_DEVICE + pattern), kind)
    for pattern, kind in (
        (
            r"AER: (?P<multi>Multiple )?" + _SEV + r" error (?:message )?received(?::| from)"
            r"\s*(?P<src>\S+)?",
            "received",
        ),
        (r"(?:AER: )?PCIe Bus Error: severity=" + _SEV, "severity"),
        (r"(?:AER: )?\s*device \[[0-9a-f:]+\] error status/mask=(?P<st>\w{1,16})/", "status"),
        (r"(?:AER: )?\s*\[\s*(?P<bit>\d{1,3})\] (?P<name>.+?)\s*(?:\(First\))?\s*$", "error"),
        (r"(?:AER: can't recover|device has no AER-aware driver)", "no-handler"),
        (r"AER: device recovery failed", "recovery-failed"),
    )
)
_SURPRISE_DOWN_BIT = 5  # Uncorrectable Error Status bit 5, SDES
_SURPRISE_NAMES = ("SDES", "Surprise Down Error")


def _address(text: str) -> str:
    """Sysfs form when the guard can normalise it (not Intel VMD's 5-digit domains)."""
    try:
        return normalize_pci(text)
    except PciAddressError:
        return text.lower()


def severity_word(text: str) -> str:
    """One spelling for old and new kernels."""
    if text.startswith("Correct"):
        return "correctable"
    return "uncorrectable-nonfatal" if "Non-Fatal" in text else "uncorrectable-fatal"


@dataclass(frozen=True, slots=True)
class AerEvent:
    """One AER line the kernel printed about `device` (a port or an endpoint)."""

    device: str
    kind: str  # received | severity | status | error | no-handler | recovery-failed
    time: str | None
    detail: str  # severity word, status word or error name
    line: int
    source: str | None = None  # "received … from <source>"
    surprise_down: bool = False


def parse_aer_line(line: str, number: int) -> AerEvent | None:
    """One line's AER event, or None."""
    for pattern, kind in _CHECKS:
        found = pattern.search(line)
        if found is None:
            continue
        values = found.groupdict()
        detail, surprise = "", False
        source = values.get("src")
        if kind in ("received", "severity"):
            detail = severity_word(values["sev"])
        elif kind == "status":
            detail = values["st"].lower()
            surprise = bool(int(detail, 16) & (1 << _SURPRISE_DOWN_BIT))
        elif kind == "error":
            detail = values["name"]
            surprise = detail in _SURPRISE_NAMES and int(values["bit"]) == _SURPRISE_DOWN_BIT
        when = line_time(line[: found.start()])
        src = _address(source) if source and ":" in source else source
        return AerEvent(_address(values["dev"]), kind, when, detail, number, src, surprise)
    return None


def parse_aer_lines(text: str) -> tuple[AerEvent, ...]:
    """Every AER line in a kernel log (any prefix); other lines are ignored."""
    events = (parse_aer_line(line, n) for n, line in enumerate(lines_of(text), start=1))
    return tuple(e for e in events if e is not None)


def related(events: Iterable[AerEvent], devices: Iterable[str]) -> tuple[AerEvent, ...]:
    """Events printed by, or naming as source, one of `devices` (the GPU and its ports)."""
    wanted = set(devices)
    return tuple(e for e in events if e.device in wanted or e.source in wanted)


_COUNTER = re.compile(r"^(?P<name>[A-Za-z_][\w]*)\s+(?P<n>\d{1,20})\Z")
_GREP = re.compile(
    r"/(?P<dev>[0-9a-fA-F]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/(?P<file>aer_\w+):(?P<rest>.*)$"
)


def parse_counters(text: str) -> dict[str, int]:
    """One ``aer_dev_*`` file: ``NAME count`` lines; the rootport totals are a bare number."""
    if text.strip().isdigit() and len(text.strip()) <= 20:  # no counter has 20 digits
        return {"TOTAL": int(text.strip())}
    out = {}
    for line in text.splitlines():
        found = _COUNTER.match(line.strip())
        if found:
            out[found["name"]] = int(found["n"])
    return out


def parse_grep_counters(text: str) -> dict[str, dict[str, dict[str, int]]]:
    """``grep -H . /sys/bus/pci/devices/<dev>/aer_*`` output: device → file → counters."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for line in text.splitlines():
        found = _GREP.search(line.strip())
        if found is None:
            continue
        counters = parse_counters(found["rest"])
        out.setdefault(_address(found["dev"]), {}).setdefault(found["file"], {}).update(counters)
    return out


def nonzero(files: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Only the counters that are not zero, per file; files with none are left out."""
    kept = {f: {k: v for k, v in c.items() if v} for f, c in files.items()}
    return {f: c for f, c in sorted(kept.items()) if c}


def counters_surprise_down(files: Mapping[str, Mapping[str, int]]) -> bool:
    return any(c.get("SDES", 0) > 0 for c in files.values())
