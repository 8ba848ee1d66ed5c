"""Facts from ``nvidia-smi -q``: row remapping, retired pages, the reset status, a lost GPU (one
``Unable to determine the device handle`` line instead of a block). Sources:
tests/fixtures/nvidia-smi/SOURCES.md; which fact gives which verdict is the table `FLAGS`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from guard.evidence.kernel_log import pci_or_none
from guard.evidence.verdict import Finding
from guard.xid_tables import Repair

_GPU = re.compile(r"^GPU (?P<addr>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>\S[^:]*?)\s*:\s*(?P<value>.*?)\s*$")
# Every spelling of the one line: docs/evidence.md and tests/fixtures/nvidia-smi/SOURCES.md.
_NO_HANDLE = re.compile(
    r"Unable to determine the device handle for (?i:gpu)\s*(?:\d{1,3}:\s+)?"
    r"(?P<addr>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]):\s*(?P<why>.*?)\s*$"
)
_REQUIRES_RESET = "requires reset"
# NVML's error strings NVML_ERROR_GPU_IS_LOST and NVML_ERROR_RESET_REQUIRED; anything else
# ("Unknown Error") is for a person.
_NO_HANDLE_CLASSES = (("gpu is lost", Repair.POWER_CYCLE), (_REQUIRES_RESET, Repair.RESET))

# (section, key) whose value "Yes" raises it -> (class, reason); NVIDIA's sources:
# docs/evidence.md, "Records without an Xid, Xid 154 and nvidia-smi".
_ROWS = "Remapped Rows"
_PAGES = "Retired Pages"
_RESET = "GPU Reset Status"
_PENDING = "nvidia-smi: page retirement pending (takes effect at a GPU reset)"
_REMAP_PENDING = "nvidia-smi: row remapping pending (takes effect at a GPU reset)"
FLAGS: dict[tuple[str, str], tuple[Repair, str]] = {
    (_ROWS, "Remapping Failure Occurred"): (
        Repair.RMA,
        "nvidia-smi: row remapping failure (NVIDIA's RMA criterion)",
    ),
    (_ROWS, "Pending"): (Repair.RESET, _REMAP_PENDING),
    (_PAGES, "Pending Page Blacklist"): (Repair.RESET, _PENDING),
    (_PAGES, "Pending Page Retirement"): (Repair.RESET, _PENDING),
    (_RESET, "Reset Required"): (Repair.RESET, "nvidia-smi: GPU reset required"),
    (_RESET, "Drain and Reset Recommended"): (
        Repair.RESET,
        "nvidia-smi: drain and reset recommended",
    ),
}

# The counters and flags the report lists (section, key), whatever their value.
SHOWN: tuple[tuple[str, str], ...] = (
    (_ROWS, "Correctable Error"),
    (_ROWS, "Uncorrectable Error"),
    (_ROWS, "Pending"),
    (_ROWS, "Remapping Failure Occurred"),
    (_PAGES, "Single Bit ECC"),
    (_PAGES, "Double Bit ECC"),
    (_PAGES, "Pending Page Blacklist"),
    (_PAGES, "Pending Page Retirement"),
    (_RESET, "Reset Required"),
    (_RESET, "Drain and Reset Recommended"),
)


@dataclass(frozen=True, slots=True)
class SmiGpu:
    pci: str
    uuid: str | None = None
    fields: dict[tuple[str, str], str] = field(default_factory=dict)  # (section, key) -> value
    no_handle: str | None = None  # why NVML could not open the GPU ("GPU is lost. …")

    def findings(self) -> tuple[Finding, ...]:
        """The verdict inputs of this GPU, strongest first as the table lists them."""
        out: list[Finding] = []
        if self.no_handle is not None:
            said = self.no_handle.lower()
            verdict = next((v for word, v in _NO_HANDLE_CLASSES if word in said), Repair.HUMAN)
            out.append(Finding(verdict, f"nvidia-smi: {self.no_handle}"))
        for field_key, (verdict, reason) in FLAGS.items():
            if self.fields.get(field_key, "").lower() == "yes":
                out.append(Finding(verdict, reason))
        refused = sorted(k for (_, k), v in self.fields.items() if _REQUIRES_RESET in v.lower())
        if refused:
            out.append(
                Finding(Repair.RESET, f"nvidia-smi: GPU requires reset ({', '.join(refused)})")
            )
        return tuple(dict.fromkeys(out))  # two retirement keys give one reason

    def shown(self) -> tuple[tuple[str, str], ...]:
        """(label, value) of the listed fields present in the output."""
        return tuple(
            (f"{section} / {key}", self.fields[(section, key)])
            for section, key in SHOWN
            if (section, key) in self.fields
        )


def parse_smi(text: str) -> dict[str, SmiGpu]:
    """GPU (sysfs form) -> its facts."""
    gpus: dict[str, SmiGpu] = {}
    current: SmiGpu | None = None
    sections: list[tuple[int, str]] = []  # (indent, name), innermost last
    reason_next: str | None = None  # a GPU whose no-handle reason is on the next line
    for line in text.splitlines():
        if reason_next is not None and line.strip():
            gpus[reason_next] = SmiGpu(reason_next, no_handle=line.strip())
            reason_next = None
            continue
        if (lost := _NO_HANDLE.search(line)) and (pci := pci_or_none(lost["addr"])):
            gpus[pci] = SmiGpu(pci, no_handle=lost["why"] or "(no reason printed)")
            reason_next = None if lost["why"] else pci
            current = None
            continue
        if (head := _GPU.match(line)) and (pci := pci_or_none(head["addr"])):
            current = gpus.setdefault(pci, SmiGpu(pci))
            sections = []
            continue
        if current is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while sections and sections[-1][0] >= indent:
            sections.pop()
        pair = _KEY.match(line)
        if pair is None:  # a section header: no colon
            sections.append((indent, line.strip()))
            continue
        section = sections[-1][1] if sections else ""
        current.fields[(section, pair["key"])] = pair["value"]
        if pair["key"] == "GPU UUID" and pair["value"].startswith("GPU-"):
            gpus[current.pci] = current = replace(current, uuid=pair["value"])
    return gpus


def smi_for(text: str, pci: str | None) -> SmiGpu | None:
    """The facts of `pci`, or of the only GPU in the output when `pci` is None."""
    gpus = parse_smi(text)
    if pci is None:
        return next(iter(gpus.values())) if len(gpus) == 1 else None
    return next((g for a, g in gpus.items() if a[:-2] == pci[:-2]), None)
