"""Node-wide evidence, `evidence collect --trigger` (docs/evidence.md "Node-wide"): the kernel
log as for one GPU, `lspci -nn -k -d 10de:`, the AER of each GPU without the driver; one verdict
over all of it and the trigger (guard.evidence.verdict `TRIGGER_CLASSES`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from guard.doors.hostexec import Unknown
from guard.evidence.assess import Assessment, Inputs, PortInput, assess
from guard.evidence.collect import NO_LOG, Host, current_kernel_log, port_inputs
from guard.evidence.lspci import lspci_blocks
from guard.evidence.verdict import MISSING_SLOT, TRIGGER_CLASSES, UNBOUND_SLOT, Finding, decide
from guard.xid_tables import XidClasses

LSPCI = ("lspci", "-nn", "-k", "-d", "10de:")
_GPU_CLASS = re.compile(r" \[030[02]\]: ")  # VGA or 3D controller; not audio or NVSwitch bridges
UNBOUND = "listed without `Kernel driver in use: nvidia`"
_DRIVER = re.compile(r"^\s*Kernel driver in use:\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Slot:
    pci: str
    driver: str | None  # None: no driver bound


def unbound(slots: tuple[Slot, ...] | None) -> list[str]:
    return [s.pci for s in slots or () if s.driver != "nvidia"]


def gpu_slots(text: str) -> tuple[Slot, ...]:
    blocks = lspci_blocks(text).items()
    found = ((pci, _DRIVER.search(b)) for pci, b in blocks if _GPU_CLASS.search(b.split("\n")[0]))
    return tuple(Slot(pci, driver.group(1) if driver else None) for pci, driver in found)


def judge(
    a: Assessment, slots: tuple[Slot, ...] | None, trigger: str, want: int | None, c: XidClasses
) -> Assessment:
    """`a` (every GPU's kernel-log records) judged again with the slots and the trigger, in the
    one precedence (power-cycle > rma > reset > human); `want`: gpu-short's class count."""
    records = bool(a.xid_totals or a.fallen_off or a.dead or a.recovery)
    found = [Finding(a.verdict, r) for r in a.reasons if records and r != "config space not read"]
    found += [Finding(UNBOUND_SLOT, f"lspci: {p} {UNBOUND}") for p in unbound(slots)]
    if slots is not None and want is not None and len(slots) < want:
        gone = f"lspci lists {len(slots)} of {want} GPUs: {want - len(slots)} off the bus"
        found.append(Finding(MISSING_SLOT, gone))
    decision = decide((), False, False, c, [*found, Finding(*TRIGGER_CLASSES[trigger])])
    return replace(a, pci=None, verdict=decision.verdict, reasons=decision.reasons)


def slot_sentences(slots: tuple[Slot, ...] | None, want: int | None) -> list[str]:
    if slots is None:
        return [f"{' '.join(LSPCI)} could not be read"]
    count = [f"{len(slots)} GPUs listed, the node's class expects {want}"] if want else []
    return [*(f"{s.pci}: driver {s.driver or 'none bound'}" for s in slots), *count]


def gather(host: Host, classes: XidClasses) -> tuple[Assessment, tuple[Slot, ...] | None]:
    log, found = current_kernel_log(host)
    listed, ports = host.run(*LSPCI), list[PortInput]()
    slots = gpu_slots(listed.stdout) if listed.ok else None
    if not listed.ok:
        found.append(Unknown(" ".join(LSPCI), listed.why))
    for pci in unbound(slots):
        more, port_unknowns = port_inputs(host, pci)
        ports = [*ports, *more]
        found = [*found, *port_unknowns]
    text, source = (log.stdout, " ".join(log.argv)) if log.ok else (None, NO_LOG)
    inputs = Inputs(text, source, ports=tuple(ports), unknowns=tuple(found))
    return assess(inputs, None, classes), slots
