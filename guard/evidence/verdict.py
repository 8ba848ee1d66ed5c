"""The verdict for one GPU: a pure function of its Xid codes, two hardware facts and the
findings of the other records, each already given a class by the tables below. The case list,
the precedence and why each record has its class: docs/evidence.md, "Verdict". Xid 154 counts by
the action it names (a finding), never by its code, so config space all ``ff`` still beats a
driver asking for a reset (the incident of 2026-09-21)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from guard.xid_tables import Repair, XidClasses

RECOVERY_ACTION_XID = 154
_ORDER = (Repair.POWER_CYCLE, Repair.RMA, Repair.RESET)

# Driver records of a dead GPU without an Xid number (kernel_log.DEAD_RECORDS); why each class:
# docs/evidence.md, "Records without an Xid, Xid 154 and nvidia-smi".
DEAD_RECORD_CLASSES: dict[str, Repair] = {
    "init-failed": Repair.POWER_CYCLE,
    "gpu-lost": Repair.POWER_CYCLE,
    "fsp-boot": Repair.POWER_CYCLE,  # Xid 143 itself stays rma: without it the evidence is weaker
    "gsp-timeout": Repair.RESET,
}
DEAD_RECORD_WORDS: dict[str, str] = {
    "init-failed": "RmInitAdapter failed (the driver could not initialise the GPU)",
    "gpu-lost": "GPU lost from the bus (NV_ERR_GPU_IS_LOST)",
    "fsp-boot": "FSP boot failure (what Xid 143 describes)",
    "gsp-timeout": "GSP heartbeat or RPC timeout",
}

# Xid 154's new action (its hex value) -> the name the 595 driver prints for it (0x6/0x7 only
# from NVML, R610+, whose log text was not found anywhere: the hex value is what counts) and our
# class; 0x0 None asks nothing.
RECOVERY_ACTIONS: dict[int, tuple[str, Repair | None]] = {
    0: ("None", None),
    1: ("GPU Reset Required", Repair.RESET),
    2: ("Node Reboot Required", Repair.POWER_CYCLE),  # a cold power cycle covers a reboot
    3: ("Drain P2P", Repair.HUMAN),
    4: ("Drain and Reset", Repair.RESET),  # the reset draft drains the GPU's pods first
    5: ("Recover IMEX Domain", Repair.HUMAN),
    6: ("Bus Reset", Repair.HUMAN),
    7: ("System Reboot", Repair.POWER_CYCLE),
}
RECOVERY_ACTION_CLASSES = {k: cls for k, (_, cls) in RECOVERY_ACTIONS.items() if cls is not None}

# What a node trigger alone asks for, and what `lspci -nn -k` shows of a slot; any kernel-log
# record still decides over them by the precedence above (docs/evidence.md, "Node-wide evidence").
TRIGGER_CLASSES: dict[str, tuple[Repair, str]] = {
    "gpu-short": (Repair.HUMAN, "gpu-short: every listed GPU has the driver bound"),
    "admission-rejected": (Repair.POWER_CYCLE, "admission-rejected: kubelet refuses GPU pods"),
    "fabric": (Repair.RESET, "fabric: NVLink fabric failed (restart Fabric Manager first)"),
}
UNBOUND_SLOT = Repair.POWER_CYCLE  # listed, no driver: RmInitAdapter failed; a reset has no device
MISSING_SLOT = Repair.HUMAN  # not listed at all: off the bus or dead, reseat or replace


@dataclass(frozen=True, slots=True)
class Finding:
    """One piece of evidence besides the Xid codes, with the class our tables give it."""

    verdict: Repair
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Repair
    reasons: tuple[str, ...]  # why, one short phrase each, strongest first


def decide(
    codes: Iterable[int],
    fallen_off: bool,
    config_all_ff: bool | None,
    classes: XidClasses,
    findings: Iterable[Finding] = (),
) -> Decision:
    """Decide; `config_all_ff` is None when config space was not read."""
    findings = tuple(findings)
    wanted = sorted({c for c in codes if c != RECOVERY_ACTION_XID})
    by_class: dict[Repair, list[str]] = {v: [] for v in _ORDER}
    for code in wanted:
        if (kind := classes.verdict_of(code)) in by_class:
            by_class[kind].append(f"Xid {code}")
    if fallen_off:
        by_class[Repair.POWER_CYCLE].append("fallen-off-the-bus record")
    for finding in findings:
        if finding.verdict in by_class:
            by_class[finding.verdict].append(finding.reason)
    if config_all_ff:
        by_class[Repair.POWER_CYCLE].append("config space reads all ff")
    for verdict in _ORDER:
        if by_class[verdict]:
            if verdict is Repair.RESET and config_all_ff is None:
                by_class[verdict].append("config space not read")
            return Decision(verdict, tuple(by_class[verdict]))
    human = [f"Xid {c}" for c in wanted]
    human += [f.reason for f in findings if f.verdict is Repair.HUMAN]
    return Decision(
        Repair.HUMAN, tuple(human) or ("no Xid, fallen-off or dead-GPU record for this GPU",)
    )
