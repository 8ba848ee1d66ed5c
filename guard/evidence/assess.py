"""From raw evidence texts to one Assessment of one GPU (pure; shared by collect and classify)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from guard.doors.hostexec import Unknown
from guard.evidence import aer
from guard.evidence.kernel_log import (
    DeadRecord,
    FallenOff,
    KernelLog,
    RecoveryChange,
    XidRecord,
    XidTotal,
    for_gpu,
    gpus,
    named_gpus,
    parse_kernel_log,
    same_gpu,
    unattributed,
)
from guard.evidence.lspci import (
    ConfigSpace,
    PcieLink,
    PortStatus,
    config_space,
    lspci_blocks,
    pcie_links,
    port_status,
)
from guard.evidence.nvidia_smi import SmiGpu, smi_for
from guard.evidence.verdict import (
    DEAD_RECORD_CLASSES,
    DEAD_RECORD_WORDS,
    RECOVERY_ACTION_CLASSES,
    Finding,
    decide,
)
from guard.xid_tables import Repair, XidClasses

Counters = Mapping[str, Mapping[str, int]]  # sysfs file name → counter name → value


@dataclass(frozen=True, slots=True)
class PortInput:
    address: str
    role: str  # "root port", "parent bridge", "root port, parent bridge", "port"
    lspci: str | None
    counters: Counters = field(default_factory=dict)

    @property
    def status(self) -> PortStatus | None:
        return port_status(self.lspci) if self.lspci else None


@dataclass(frozen=True, slots=True)
class Inputs:
    kernel_log: str | None
    kernel_log_source: str
    gpu_lspci: str | None = None
    ports: tuple[PortInput, ...] = ()
    gpu_counters: Counters = field(default_factory=dict)
    aer_text: str = ""  # extra kernel AER lines (classify --aer)
    reported_xid: int | None = None  # the Xid the guard saw on the metric (collect --xid)
    unknowns: tuple[Unknown, ...] = ()
    # The kernel log already parsed line by line (classify streams its file): then
    # `kernel_log` is not parsed again and its AER events are these.
    parsed_log: KernelLog | None = None
    log_aer: tuple[aer.AerEvent, ...] = ()
    nvidia_smi: str | None = None  # `nvidia-smi -q` output (classify --nvidia-smi-q, collect)


@dataclass(frozen=True, slots=True)
class Assessment:
    pci: str | None
    verdict: Repair
    reasons: tuple[str, ...]
    xids: tuple[XidRecord, ...]
    fallen_off: tuple[FallenOff, ...]
    uuid: str | None
    recovery: RecoveryChange | None
    config: ConfigSpace | None
    ports: tuple[PortInput, ...]
    aer_events: tuple[aer.AerEvent, ...]
    gpu_counters: Counters
    surprise_down: bool
    other_gpus: tuple[str, ...]
    reported_xid: int | None
    kernel_log_source: str
    unknowns: tuple[Unknown, ...]
    xid_totals: tuple[XidTotal, ...] = ()  # every record of the GPU counted, kept or not
    dead: tuple[DeadRecord, ...] = ()  # dead-GPU records without an Xid, judged for this GPU
    unattributed: tuple[DeadRecord, ...] = ()  # such records naming no GPU, not judged
    smi: SmiGpu | None = None
    links: tuple[PcieLink, ...] = ()  # lspci -vv LnkCap/LnkSta of the GPUs in --lspci
    smi_read: bool = False  # nvidia-smi -q output was given (smi None: it has no such GPU)

    @property
    def root_port(self) -> str | None:
        return next((p.address for p in self.ports if "root port" in p.role), None)


def _target(log: KernelLog, pci: str | None) -> tuple[str | None, KernelLog, tuple[str, ...]]:
    """The GPU to judge: the one asked for, else the only GPU with records, else all records."""
    found = gpus(log)
    if pci is None and len(found) == 1:
        pci = found[0]
    elif pci is None and not found and unattributed(log) and len(named_gpus(log)) == 1:
        # Only records that name no GPU, and one GPU named by its identity line: that one.
        (pci,) = named_gpus(log)
    if pci is None:
        return None, log, ()
    return pci, for_gpu(log, pci), tuple(g for g in found if not same_gpu(g, pci))


def _dead_records(
    log: KernelLog, mine: KernelLog, pci: str | None
) -> tuple[tuple[DeadRecord, ...], tuple[DeadRecord, ...]]:
    """(judged, not judged). A record that names no GPU (``NVRM: GPU0 …``: the driver's instance
    number) is judged only when the log names no GPU besides this one: then it can only be
    about this GPU."""
    loose = unattributed(log)
    if pci is None:
        return log.dead, ()  # judging the whole log: every record counts
    alone = all(same_gpu(g, pci) for g in named_gpus(log))
    return (mine.dead + loose, ()) if alone else (mine.dead, loose)


def _findings(
    dead: tuple[DeadRecord, ...], recovery: RecoveryChange | None, smi: SmiGpu | None
) -> tuple[Finding, ...]:
    out: list[Finding] = []
    for kind in dict.fromkeys(d.kind for d in dead):
        out.append(Finding(DEAD_RECORD_CLASSES[kind], f"driver record: {DEAD_RECORD_WORDS[kind]}"))
    if recovery is not None and recovery.new in RECOVERY_ACTION_CLASSES:
        verdict = RECOVERY_ACTION_CLASSES[recovery.new]
        out.append(Finding(verdict, f"Xid 154: {recovery.new_text}"))
    elif recovery is not None:  # 0x0 None, or a value this table does not know
        out.append(Finding(Repair.HUMAN, f"Xid 154: {recovery.new_text} (nothing to act on)"))
    if smi is not None:
        out.extend(smi.findings())
    return tuple(out)


def _surprise_down(
    events: tuple[aer.AerEvent, ...], ports: tuple[PortInput, ...], gpu_counters: Counters
) -> bool:
    counters = (gpu_counters, *(p.counters for p in ports))
    return (
        any(e.surprise_down for e in events)
        or any(p.status is not None and p.status.surprise_down for p in ports)
        or any(aer.counters_surprise_down(c) for c in counters)
    )


def assess(inputs: Inputs, pci: str | None, classes: XidClasses) -> Assessment:
    """Judge the GPU at `pci` (sysfs form), or the only GPU in the log when `pci` is None."""
    log = inputs.parsed_log or parse_kernel_log(inputs.kernel_log or "")
    pci, mine, others = _target(log, pci)
    codes = [t.code for t in mine.totals]  # every code, also of records not kept
    if inputs.reported_xid is not None:
        codes.append(inputs.reported_xid)
    config = config_space(inputs.gpu_lspci, pci) if inputs.gpu_lspci is not None else None
    dead, loose = _dead_records(log, mine, pci)
    # The driver's latest word counts.
    recovery = next((x.recovery for x in reversed(mine.xids) if x.recovery), None)
    smi = smi_for(inputs.nvidia_smi, pci) if inputs.nvidia_smi else None
    findings = _findings(dead, recovery, smi)
    all_ff = config.all_ff if config else None
    decision = decide(codes, bool(mine.fallen_off), all_ff, classes, findings)
    ports = inputs.ports
    from_log = inputs.log_aer if inputs.parsed_log else aer.parse_aer_lines(inputs.kernel_log or "")
    events = from_log + aer.parse_aer_lines(inputs.aer_text)
    if pci is not None:
        events = aer.related(events, [pci, *(p.address for p in ports)])
    uuid = mine.uuids[-1][1] if pci is not None and mine.uuids else None
    return Assessment(
        pci=pci,
        verdict=decision.verdict,
        reasons=decision.reasons,
        xids=mine.xids,
        fallen_off=mine.fallen_off,
        uuid=uuid or (smi.uuid if smi else None),
        recovery=recovery,
        config=config,
        ports=ports,
        aer_events=events,
        gpu_counters=inputs.gpu_counters,
        surprise_down=_surprise_down(events, ports, inputs.gpu_counters),
        other_gpus=others,
        reported_xid=inputs.reported_xid,
        kernel_log_source=inputs.kernel_log_source,
        unknowns=inputs.unknowns,
        xid_totals=mine.totals,
        dead=dead,
        unattributed=loose,
        smi=smi,
        smi_read=bool(inputs.nvidia_smi),
        links=pcie_links(inputs.gpu_lspci) if inputs.gpu_lspci else (),
    )


def offline_inputs(saved: Inputs, pci: str | None, root_port: str | None) -> Inputs:
    """`saved` with its ports: every device its `aer_text` (the --aer file, each part recognised
    by its shape: docs/evidence.md, "Offline") describes besides the GPU."""
    blocks = lspci_blocks(saved.aer_text)
    counters = aer.parse_grep_counters(saved.aer_text)
    named = set(blocks) | set(counters) | ({root_port} if root_port else set())
    addresses = sorted(named - ({pci} if pci else set()))
    role_of = {root_port: "root port"}.get
    ports = tuple(
        PortInput(address, role_of(address, "port"), blocks.get(address), counters.get(address, {}))
        for address in addresses
    )
    return replace(saved, ports=ports, gpu_counters=counters.get(pci, {}) if pci else {})
