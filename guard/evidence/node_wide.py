"""Node-wide evidence, `evidence collect --trigger` (docs/evidence.md, "Node-wide"): the node
triggers without an Xid know the node, not one GPU. The host is read as for one GPU (kernel log,
AER), plus `lspci -nn -k -d 10de:` for every NVIDIA device; the verdict is `decide`'s over the
kernel log's records, the slots and the trigger (guard.evidence.verdict `TRIGGER_CLASSES`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from guard.doors.hostexec import Unknown
from guard.evidence.assess import Assessment, Inputs, PortInput, assess, lspci_blocks
from guard.evidence.collect import Host, _chain, _port_inputs, current_kernel_log
from guard.evidence.verdict import MISSING_SLOT, TRIGGER_CLASSES, UNBOUND_SLOT, Finding, decide
from guard.xid_tables import XidClasses

_GPU_CLASS = re.compile(r" \[030[02]\]: ")  # VGA or 3D controller; not audio or NVSwitch bridges
_DRIVER = re.compile(r"^\s*Kernel driver in use:\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Slot:
    pci: str
    driver: str | None  # the driver bound to it; None when none is


def gpu_slots(text: str) -> tuple[Slot, ...]:
    """The GPUs of an ``lspci -nn -k`` listing, with the driver bound to each."""
    found = []
    for pci, block in lspci_blocks(text).items():
        if _GPU_CLASS.search(block.splitlines()[0]):
            driver = _DRIVER.search(block)
            found.append(Slot(pci, driver.group(1) if driver else None))
    return tuple(found)


def slot_findings(slots: tuple[Slot, ...], expected: int | None) -> tuple[Finding, ...]:
    out = [
        Finding(UNBOUND_SLOT, f"lspci: {s.pci} listed without `Kernel driver in use: nvidia`")
        for s in slots
        if s.driver != "nvidia"
    ]
    if expected is not None and len(slots) < expected:
        missing = expected - len(slots)
        out.append(
            Finding(
                MISSING_SLOT, f"lspci lists {len(slots)} of {expected} GPUs: {missing} off the bus"
            )
        )
    return tuple(out)


def judge(
    a: Assessment,
    slots: tuple[Slot, ...] | None,
    trigger: str,
    expected: int | None,
    classes: XidClasses,
) -> Assessment:
    """`a` (the kernel log's records of every GPU) judged again with the slots and the trigger:
    one precedence for all (power-cycle > rma > reset > human)."""
    records = bool(a.xid_totals or a.fallen_off or a.dead or a.recovery)
    found = [Finding(a.verdict, r) for r in a.reasons if records and r != "config space not read"]
    found += slot_findings(slots, expected) if slots is not None else ()
    found.append(Finding(*TRIGGER_CLASSES[trigger]))
    decision = decide((), False, False, classes, found)
    return replace(a, pci=None, verdict=decision.verdict, reasons=decision.reasons)


def slot_sentences(slots: tuple[Slot, ...] | None, expected: int | None) -> list[str]:
    if slots is None:
        return ["lspci -nn -k -d 10de: could not be read"]
    lines = [f"{s.pci}: driver {s.driver or 'none bound'}" for s in slots]
    if expected is not None:
        lines.append(f"{len(slots)} GPUs listed, the node's class expects {expected}")
    return lines


def gather(host: Host, classes: XidClasses) -> tuple[Assessment, tuple[Slot, ...] | None]:
    """The kernel log (journal, else dmesg), the NVIDIA slots, and the upstream ports (their
    AER) of every GPU listed without the driver; every record of the log, of any GPU."""
    log, source, unknowns = current_kernel_log(host)
    listed = host.run("lspci", "-nn", "-k", "-d", "10de:")
    slots = gpu_slots(listed.stdout) if listed.ok else None
    found = list(unknowns)
    if not listed.ok:
        found.append(Unknown("lspci -nn -k -d 10de:", listed.why))
    ports: list[PortInput] = []
    for slot in (s for s in slots or () if s.driver != "nvidia"):
        chain, missing = _chain(host, slot.pci)
        more, port_unknowns = _port_inputs(host, chain)
        ports += more
        found += [*port_unknowns, *([missing] if missing else [])]
    inputs = Inputs(log, source, ports=tuple(ports), unknowns=tuple(found))
    return assess(inputs, None, classes), slots
