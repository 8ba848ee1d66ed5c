"""The return rule of every isolation unit: one ordered table of conditions, one evaluator; the
first failing row of the isolation's unit is the decision. Each row and each unit's difference:
docs/isolation.md, "One return rule, two units".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from guard import ledger
from guard.actions import Action, EmitEvent, SetHold, Skip, hold_next
from guard.codec.records import DeviceRecord
from guard.model import CordonRecord, NodeInfo, Snapshot, Unit, rebooted
from guard.plan import mismatch, service_network, triggers
from guard.plan.check_jobs import is_conformance_cordon
from guard.plan.common import WAIT, keys
from guard.plan.return_jobs import conformance_same_boot
from guard.settings import Settings
from guard.states import Decision, Reason


@dataclass(frozen=True, slots=True)
class Case:
    """One isolation the return rule decides about: its node and its unit's record."""

    snap: Snapshot
    s: Settings
    node: NodeInfo
    record: CordonRecord | DeviceRecord

    @property
    def unit(self) -> Unit:
        return "cordon" if isinstance(self.record, CordonRecord) else "device-taint"

    @property
    def cordon(self) -> CordonRecord:
        assert isinstance(self.record, CordonRecord)
        return self.record

    @property
    def device(self) -> DeviceRecord:
        assert isinstance(self.record, DeviceRecord)
        return self.record


Check = Callable[[Case], tuple[Action, ...]]  # () when the condition holds


@dataclass(frozen=True, slots=True)
class Condition:
    word: str
    units: frozenset[Unit]
    reads: tuple[str, ...]  # its Prometheus inputs (guard.codec.queries names); () the API's
    check: Check


# ---- the checks -------------------------------------------------------------------------------

# How the `hold` the guard sets itself begins; a person's hold is any other text.
REPEAT_FAULT_HOLD = "repeat fault: "


def is_repeat_fault_hold(text: str) -> bool:
    return text.startswith(REPEAT_FAULT_HOLD)


def _hold(c: Case) -> tuple[Action, ...]:
    node, hold = c.node, keys(c.s).hold
    if node.hold is None:
        return ()
    cordon = c.unit == "cordon"  # a device taint's hold is a person's: no kubectl step for it
    repeat = cordon and is_repeat_fault_hold(node.hold)
    reason = Decision.REPEAT_FAULT_HOLD if repeat else Decision.HOLD
    person = f"a person decides, then removes {hold}"
    step = hold_next(hold, node.name, repeat) if cordon else person
    return (Skip(node.name, reason, f"hold={node.hold!r}", step),)


def _reboot(c: Case) -> tuple[Action, ...]:
    """A missing bootID never proves a reboot; then a person's reset-done does."""
    s, node, rec = c.s, c.node, c.cordon
    if rec.xid in s.reset_class_xids:
        return _reset_gate(c, Decision.WAITING_RESET, f"xid-{rec.xid} is reset-class")
    if rebooted(rec.boot_id, node.boot_id):
        return ()
    if not rec.boot_id or not node.boot_id:
        k = keys(s)
        missing = "node reports no bootID" if rec.boot_id else f"no recorded bootID in {k.boot_id}"
        return _reset_gate(c, Decision.BOOT_UNKNOWN, f"{missing}: a reboot cannot be proven")
    if is_conformance_cordon(rec):
        return (conformance_same_boot(node, rec),)
    detail = f"bootID {node.boot_id} unchanged since cordon"
    gpu = f" on GPU {rec.gpu}" if rec.gpu else ""
    message = f"gpu-node-guard waits for a power cycle ({rec.reason}{gpu}): {detail}"
    return (
        Skip(node.name, Decision.SAME_BOOT, detail, "waiting for the power cycle"),
        EmitEvent(node.name, Decision.SAME_BOOT, "Normal", "GuardWaitingPowerCycle", message),
    )


def _reset_gate(c: Case, reason: Reason, why: str) -> tuple[Action, ...]:
    """Passes with a reset-done note written after the cordon (a leading time says when)."""
    k, node = keys(c.s), c.node
    level: Literal["INFO", "WARN"] = "WARN" if reason == "boot-unknown" else "INFO"
    fix = f'after the GPU reset or power cycle, annotate {k.reset_done}="$(date -u +%FT%TZ) …"'
    if node.reset_done is None:
        return (Skip(node.name, reason, f"{why}; no {k.reset_done}", fix, level),)
    done_at, cordon_at = node.reset_done_at, c.cordon.at
    if done_at is not None and cordon_at is not None and done_at <= cordon_at:
        stale = (
            f"{why}; {k.reset_done}={node.reset_done!r} is from before the cordon at "
            f"{ledger.format_time(cordon_at)}"
        )
        return (Skip(node.name, reason, stale, fix, level),)
    return ()


def _device_reboot(c: Case) -> tuple[Action, ...]:
    """Any Xid: a reboot, or a person's reset-done after the taint (the GPU alone was reset)."""
    k, node, rec = keys(c.s), c.node, c.device
    reset = node.reset_done_at is not None and node.reset_done_at > rec.at
    if rebooted(rec.boot_id, node.boot_id) or reset:
        return ()
    fix = (
        f"reset the GPU ({rec.pci}) or reboot the node, then annotate "
        f'{k.reset_done}="$(date -u +%FT%TZ) …"'
    )
    detail = (
        f"{rec.device}: no reboot and no {k.reset_done} since the taint at "
        f"{ledger.format_time(rec.at)}"
    )
    return (Skip(node.name, Decision.DEVICE_WAITING_RESET, detail, fix),)


def _ready(c: Case) -> tuple[Action, ...]:
    if c.node.ready:
        return ()
    return (Skip(c.node.name, Decision.NOT_READY, "node Ready condition is not True", WAIT),)


def _gpu_count(c: Case) -> tuple[Action, ...]:
    node, rec = c.node, c.cordon
    if rec.gpu_capacity == node.gpu_capacity == node.gpu_allocatable:
        return ()
    recorded = "?" if rec.gpu_capacity is None else str(rec.gpu_capacity)
    observed = (
        f"capacity={node.gpu_capacity} recorded={recorded} allocatable={node.gpu_allocatable}"
    )
    return (Skip(node.name, Decision.GPU_COUNT, observed, WAIT),)


def _xids(c: Case) -> tuple[Action, ...]:
    """A cordon: any hardware Xid of the node; a device taint: one of its GPU."""
    gpu = c.device.uuid if c.unit == "device-taint" else ""
    on = (g for g in c.snap.prom.hardware_xids if g.node == c.node.name)
    xids = [g for g in on if gpu.lower() in ("", g.uuid.lower())]
    if not xids:
        return ()
    found = ", ".join(f"{gpu or f'gpu{g.gpu}'}=xid-{g.value}" for g in xids)
    return (Skip(c.node.name, Decision.XID_PRESENT, found, WAIT),)


def _row_remap(c: Case) -> tuple[Action, ...]:
    remap = [g for g in c.snap.prom.row_remap if g.node == c.node.name]
    if not remap:
        return ()
    found = ", ".join(f"gpu{g.gpu}={g.value}" for g in remap)
    fix = "row remap pending/failed: reset or replace"
    return (Skip(c.node.name, Decision.ROW_REMAP, found, fix),)


def _gpu_pods(c: Case) -> tuple[Action, ...]:
    pods = [p for p in c.snap.gpu_pods if p.node == c.node.name]
    if not pods:
        return ()
    names = ", ".join(f"{p.namespace}/{p.name}" for p in pods[:3])
    detail = f"{len(pods)} pods hold GPUs: {names}"
    return (Skip(c.node.name, Decision.GPU_PODS_RUNNING, detail, WAIT),)


def _published(c: Case) -> tuple[Action, ...]:
    """The load test claims the whole GPU by its UUID: the driver must publish it so."""
    from guard.plan.device_taint import targets, whole  # the unit's own lookup of its devices

    node, rec = c.node, c.device
    now = targets(c.snap, node.name, rec.uuid, rec.pci)
    if not now:
        detail = f"the DRA driver does not publish {rec.uuid} here"
        return (Skip(node.name, Decision.DEVICE_NOT_PUBLISHED, detail, WAIT),)
    if whole(now, rec.uuid):
        return ()
    detail = (
        f"the DRA driver publishes {rec.uuid} only as {','.join(d.ref for d in now)} "
        "(MIG devices or no uuid): the load test claims the whole GPU by its UUID"
    )
    fix = (
        f"{WAIT}; to return it without the load test, delete the guard's rules "
        f"(a cancel): kubectl delete devicetaintrule {' '.join(rec.rules)}"
    )
    return (Skip(node.name, Decision.DEVICE_NOT_PUBLISHED, detail, fix),)


def _repeat_fault(c: Case) -> tuple[Action, ...]:
    s = c.s
    node = c.node
    rec = c.cordon
    k = keys(c.s)
    uuid, pci = (rec.gpu.uuid, rec.gpu.pci) if rec.gpu else (None, None)
    counts = ledger.count(c.snap.ledger, uuid, node.name, pci)
    if counts.same_card < s.repeat_fault_limit:
        return ()
    last = ledger.format_time(counts.last_card_incident) if counts.last_card_incident else "?"
    text = f"{REPEAT_FAULT_HOLD}{uuid} {counts.same_card} incidents, last {last}"
    then = hold_next(k.hold, node.name, repeat_fault=True)
    word = Decision.REPEAT_FAULT
    message = f"gpu-node-guard will not return this node: {text}; {then}"
    return (
        SetHold(node.name, word, node.resource_version, k.hold, text),
        EmitEvent(node.name, word, "Warning", "GuardHold", message),
    )


def _device_repeat_fault(c: Case) -> tuple[Action, ...]:
    node, rec = c.node, c.device
    counts = ledger.count(c.snap.ledger, rec.uuid, node.name, rec.pci)
    if counts.same_card < c.s.repeat_fault_limit:
        return ()
    detail = f"{rec.uuid}: {counts.same_card} incidents in the ledger"
    fix = f"replace the card; then kubectl delete devicetaintrule {' '.join(rec.rules)}"
    return (Skip(node.name, Decision.DEVICE_REPEAT_FAULT, detail, fix, "WARN"),)


def _mismatch(c: Case) -> tuple[Action, ...]:
    return mismatch.return_gate(c.snap, c.s, c.node, c.cordon)


def _rejecting(c: Case) -> tuple[Action, ...]:
    return triggers.return_gate(c.snap, c.s, c.node, c.cordon)


def _fabric(c: Case) -> tuple[Action, ...]:
    return triggers.fabric_gate(c.snap, c.node, c.cordon)


def _service_network(c: Case) -> tuple[Action, ...]:
    return service_network.gate(c.snap, c.s, c.node)


# ---- the table --------------------------------------------------------------------------------

CORDON: frozenset[Unit] = frozenset({"cordon"})
DEVICE: frozenset[Unit] = frozenset({"device-taint"})
SERVICE_NETWORK = ("service-network-pods", "service-network-seen")

TABLE: tuple[Condition, ...] = (
    Condition("hold", CORDON | DEVICE, (), _hold),
    Condition("reboot", CORDON, (), _reboot),
    Condition("reboot", DEVICE, (), _device_reboot),
    Condition("not-ready", CORDON, (), _ready),
    Condition("gpu-count", CORDON, (), _gpu_count),
    Condition("xid-present", CORDON | DEVICE, ("hardware-xid", "hardware-xid-counted"), _xids),
    Condition("row-remap", CORDON, ("row-remap",), _row_remap),
    Condition("gpu-pods-running", CORDON, ("gpu-pods",), _gpu_pods),
    Condition("nvml-mismatch", CORDON, ("nvml-status",), _mismatch),
    Condition("admission-rejected", CORDON, ("admission-history",), _rejecting),
    Condition("fabric", CORDON, ("fabric-not-success",), _fabric),
    Condition("service-network", CORDON, SERVICE_NETWORK, _service_network),
    Condition("device-not-published", DEVICE, (), _published),
    Condition("repeat-fault", CORDON, (), _repeat_fault),
    Condition("repeat-fault", DEVICE, (), _device_repeat_fault),
)


def rows(unit: Unit) -> tuple[Condition, ...]:
    return tuple(row for row in TABLE if unit in row.units)


def blocked(case: Case) -> tuple[Action, ...]:
    """The actions of the first row of the case's unit that fails; () when every row holds."""
    return next((out for row in rows(case.unit) if (out := row.check(case))), ())


def holding(case: Case) -> Condition | None:
    """The first row of the case's unit that fails (what holds its return), or None."""
    return next((row for row in rows(case.unit) if row.check(case)), None)


def reaches_prometheus(case: Case) -> bool:
    """Every condition the API alone decides before the first Prometheus one holds: what a
    Prometheus the guard cannot read would decide next (`gpu-node-guard status`)."""
    return next((bool(row.reads) for row in rows(case.unit) if row.reads or row.check(case)), False)
