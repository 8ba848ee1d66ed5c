"""Return check: bring a node the guard cordoned back only after it proved itself.

Conditions, in order, for each readable node with the guard's cordon record (first failure wins):
  1. still cordoned, else a person uncordoned it → clear the guard's annotations (no load test)
     and record the cancel (`cancelled`: boot, GPU, Xid) so that incident is not cordoned again;
     a `hold` annotation stops here
  2. a proven reboot: both the recorded and the current bootID known, and different — or, for
     reset-class Xids and where a bootID is missing, a `reset-done` note from after the cordon
  3. Ready, GPU capacity == recorded capacity == allocatable
  4. no hardware Xid on the node now; row remapping neither pending nor failed
  5. no Running pod holds a GPU on the node; the node agent does not report a driver/NVML
     mismatch (an nvml-mismatch cordon needs it to report a match); the node's kube-proxy and
     CNI pods are Ready (guard.plan.mismatch, guard.plan.service_network)
  6. the card has fewer ledger incidents than the repeat-fault limit, else set `hold`
  (7. optional: the conformance Job passed; always for a `conformance-<item>` cordon)
Then one load-test Job per node per boot and cordon: running → wait; succeeded → uncordon and
record `returned`; failed → stay cordoned and record it once. The load test waits for the
cordon's evidence Job and checks the PCIe links it recorded (guard.plan.links). A conformance
cordon needs a new boot (no power-cycle Event) and returns after its conformance Job passes,
with the load test only when `boot_check_return_loadtest` is set; a person's uncordon of it
records the boot as checked (`checked-boot … uncordon`).
"""

from __future__ import annotations

from typing import Literal

from guard import ledger
from guard.actions import (
    Action,
    ClearGuardAnnotations,
    EmitEvent,
    SetHold,
    Skip,
    hold_next,
)
from guard.jobs import JobTemplates
from guard.model import CordonRecord, NodeInfo, Snapshot, rebooted
from guard.plan import cordon_event, fence, mismatch, service_network, triggers
from guard.plan.check_jobs import is_conformance_cordon
from guard.plan.common import (
    Incident,
    evidence_job,
    has_ledger_line,
    keys,
    ledger_append,
    present,
)
from guard.plan.return_jobs import (
    WAIT,
    conformance_return,
    conformance_same_boot,
    evidence_rejected,
    evidence_running,
    job_gate,
    loadtest_name,
    record_links,
)
from guard.read.check_records import UNCORDON, checked_boot_value
from guard.read.records import cancel_value, reason_cancel_value
from guard.settings import Settings


def plan_return(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    actions: list[Action] = []
    for node in snap.nodes:
        if node.cordon is not None and not node.unreadable:
            actions.extend(_node(snap, s, t, node, node.cordon))
    if any(n.cordon is not None and n.unschedulable and not n.unreadable for n in snap.nodes):
        actions[:0] = service_network.not_applicable(snap, s)  # one line per cycle
    return tuple(actions)


def _node(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    if not node.unschedulable:
        return _cancel(snap, s, node, c)
    return _repairs(snap, s, t, node, c) + _progress(snap, s, t, node, c)


def decision(snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo) -> tuple[Action, ...]:
    """What this check decides about one readable guard-cordoned node, its repairs aside: the
    first action is the node's state (`gpu-node-guard status`, the pushed node counts)."""
    assert node.cordon is not None and not node.unreadable
    if not node.unschedulable:
        return _cancel(snap, s, node, node.cordon)
    return _progress(snap, s, t, node, node.cordon)


def _cancel(snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    """A person's uncordon: clear the guard's keys and record the incident it cancels."""
    k = keys(s)
    record: tuple[tuple[str, str], ...] = ()
    sticks = ""
    if c.xid is not None and c.gpu is not None:
        boot = node.boot_id or c.boot_id
        at = ledger.format_time(snap.now)
        record = ((k.cancelled, cancel_value(boot, c.gpu.uuid, c.xid, at)),)
        sticks = f"; it will not cordon it again for xid-{c.xid} on {c.gpu.uuid} in this boot"
    elif is_conformance_cordon(c) and node.boot_id:  # the person accepted this boot as it is
        at = ledger.format_time(snap.now)
        record = ((k.checked_boot, checked_boot_value(node.boot_id, at, UNCORDON)),)
        sticks = "; it records this boot as checked: no conformance Job until the next reboot"
    elif c.reason in (mismatch.NVML_MISMATCH, *triggers.REASONS):  # no GPU: boot and reason
        boot = node.boot_id or c.boot_id
        record = ((k.cancelled, reason_cancel_value(boot, c.reason, ledger.format_time(snap.now))),)
        sticks = f"; it will not cordon it again for {c.reason} in this boot"
    return (
        ClearGuardAnnotations(
            node.name,
            "human-uncordon",
            node.resource_version,
            present(node, (*k.guard_keys, k.returned)),
            record,
        ),
        EmitEvent(
            node.name,
            "human-uncordon",
            "Normal",
            "GuardCancelled",
            "node was uncordoned by a person; gpu-node-guard cleared its annotations "
            f"without a load test{sticks}",
        ),
    )


def _progress(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    """The node's decision; while it waits, the host fence of its GPU after it (fence_gpu)."""
    decided = _steps(snap, s, t, node, c)
    return decided + fence.keep(snap, s, t, node, decided)


def _steps(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    blocked = _blocked(snap, s, node, c)
    if blocked:
        return blocked
    repeat = _repeat_fault(snap, s, node, c)
    if repeat:
        return repeat
    if s.return_conformance or is_conformance_cordon(c):
        gate = job_gate(snap, s, t, node, "conformance")
        if gate is not None:
            return gate
    if is_conformance_cordon(c) and not s.boot_check_return_loadtest:
        return conformance_return(snap, s, node)
    return (
        evidence_running(snap, s, node)
        or fence.lift_gate(snap, s, t, node, loadtest_name(snap, s, node))  # the fence: lifted
        or job_gate(snap, s, t, node, "loadtest")  # only now, for the load test of that GPU
        or ()
    )


def _repairs(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    """Finish a cordon whose later writes failed: the ledger line, a fresh evidence Job, the
    cordon Event.

    The evidence Job is recreated only within two cycles of the cordon, so a Job that a person
    deleted later, or that expired, is not resurrected; after that, while the cordon Event would
    still be alive, a WARN says the Job is missing. The cordon Event is re-emitted (same name as
    the lost one) while younger than `EVENT_REPAIR_S` (guard.plan.cordon_event), for a cordon
    without a GPU (nvml-mismatch, conformance-<item>) too: it has no ledger line or evidence Job.
    """
    if c.at is None:
        return ()
    if c.xid is None or c.gpu is None:
        return cordon_event.if_lost(snap, cordon_event.gpuless_event(node, c), c)
    incident = Incident(node.name, c.at, c.xid, c.gpu.pci, c.gpu.uuid)
    out: list[Action] = [*record_links(snap, s, node), *evidence_rejected(snap, s, node)]
    if not has_ledger_line(snap, incident):
        out.append(ledger_append(s, incident, "repair-ledger"))
    job = evidence_job(snap, s, t, incident, "repair-evidence")
    age_s = (snap.now - incident.at).total_seconds()
    made = incident.pci != ledger.UNKNOWN_PCI  # none without a PCI address (said at the cordon)
    if made and all(j.name != job.name for j in snap.jobs):
        if age_s <= 2 * s.cadence_s:
            out.append(job)
        elif age_s <= cordon_event.EVENT_REPAIR_S:
            out.append(_evidence_missing(node, job.name, age_s, s))
    out.extend(cordon_event.if_lost(snap, cordon_event.xid_event(node.name, c, job.name), c))
    return tuple(out)


def _evidence_missing(node: NodeInfo, job: str, age_s: float, s: Settings) -> Skip:
    return Skip(
        node.name,
        "evidence-missing",
        f"job/{job} does not exist and the cordon is {int(age_s)}s old; evidence Jobs are "
        f"created only within {2 * s.cadence_s}s of the cordon (the node may have rebooted since)",
        f"collect by hand if still useful: gpu-node-guard render evidence --node {node.name}",
        level="WARN",
    )


def _blocked(snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    """Conditions 1–5 as (reason, observed) checks; the first failing one is returned."""
    k = keys(s)
    if node.hold is not None:
        reason = "repeat-fault-hold" if is_repeat_fault_hold(node.hold) else "hold"
        step = hold_next(k.hold, node.name, is_repeat_fault_hold(node.hold))
        return (Skip(node.name, reason, f"hold={node.hold!r}", step),)
    booted = _boot_gate(s, node, c)
    if booted:
        return booted
    recorded = "?" if c.gpu_capacity is None else str(c.gpu_capacity)
    if not node.ready:
        return (Skip(node.name, "not-ready", "node Ready condition is not True", WAIT),)
    if not (c.gpu_capacity == node.gpu_capacity == node.gpu_allocatable):
        observed = (
            f"capacity={node.gpu_capacity} recorded={recorded} allocatable={node.gpu_allocatable}"
        )
        return (Skip(node.name, "gpu-count", observed, WAIT),)
    return (
        _health(snap, node)
        or mismatch.return_gate(snap, s, node, c)
        or triggers.return_gate(snap, s, node, c)
        or service_network.gate(snap, s, node)
    )


def _boot_gate(s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    """Condition 2. A missing bootID never proves a reboot; then a person's reset-done does."""
    k = keys(s)
    if c.xid in s.reset_class_xids:
        return _reset_gate(s, node, c, "waiting-reset", f"xid-{c.xid} is reset-class")
    if rebooted(c.boot_id, node.boot_id):
        return ()
    if not c.boot_id or not node.boot_id:
        missing = "node reports no bootID" if c.boot_id else f"no recorded bootID in {k.boot_id}"
        return _reset_gate(s, node, c, "boot-unknown", f"{missing}: a reboot cannot be proven")
    if is_conformance_cordon(c):
        return (conformance_same_boot(node, c),)
    detail = f"bootID {node.boot_id} unchanged since cordon"
    gpu = f" on GPU {c.gpu}" if c.gpu else ""
    return (
        Skip(node.name, "same-boot", detail, "waiting for the power cycle"),
        EmitEvent(
            node.name,
            "same-boot",
            "Normal",
            "GuardWaitingPowerCycle",
            f"gpu-node-guard waits for a power cycle ({c.reason}{gpu}): {detail}",
        ),
    )


def _reset_gate(
    s: Settings, node: NodeInfo, c: CordonRecord, reason: str, why: str
) -> tuple[Action, ...]:
    """Passes with a reset-done note written after the cordon (a leading time says when)."""
    k = keys(s)
    level: Literal["INFO", "WARN"] = "WARN" if reason == "boot-unknown" else "INFO"
    fix = f'after the GPU reset or power cycle, annotate {k.reset_done}="$(date -u +%FT%TZ) …"'
    if node.reset_done is None:
        return (Skip(node.name, reason, f"{why}; no {k.reset_done}", fix, level),)
    done_at, cordon_at = node.reset_done_at, c.at
    if done_at is not None and cordon_at is not None and done_at <= cordon_at:
        stale = (
            f"{why}; {k.reset_done}={node.reset_done!r} is from before the cordon at "
            f"{ledger.format_time(cordon_at)}"
        )
        return (Skip(node.name, reason, stale, fix, level),)
    return ()


def _health(snap: Snapshot, node: NodeInfo) -> tuple[Action, ...]:
    """Conditions 4 and 5: what Prometheus and the pods say about the node now."""
    xids = [g for g in snap.prom.hardware_xids if g.node == node.name]
    if xids:
        found = ", ".join(f"gpu{g.gpu}=xid-{g.value}" for g in xids)
        return (Skip(node.name, "xid-present", found, WAIT),)
    remap = [g for g in snap.prom.row_remap if g.node == node.name]
    if remap:
        found = ", ".join(f"gpu{g.gpu}={g.value}" for g in remap)
        return (Skip(node.name, "row-remap", found, "row remap pending/failed: reset or replace"),)
    pods = [p for p in snap.gpu_pods if p.node == node.name]
    if pods:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in pods[:3])
        return (Skip(node.name, "gpu-pods-running", f"{len(pods)} pods hold GPUs: {names}", WAIT),)
    return ()


# How the `hold` the guard sets itself begins; a person's hold is any other text.
REPEAT_FAULT_HOLD = "repeat fault: "


def is_repeat_fault_hold(text: str) -> bool:
    return text.startswith(REPEAT_FAULT_HOLD)


def _repeat_fault(
    snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    k = keys(s)
    uuid, pci = (c.gpu.uuid, c.gpu.pci) if c.gpu else (None, None)
    counts = ledger.count(snap.ledger, uuid, node.name, pci)
    if counts.same_card < s.repeat_fault_limit:
        return ()
    last = ledger.format_time(counts.last_card_incident) if counts.last_card_incident else "?"
    text = f"{REPEAT_FAULT_HOLD}{uuid} {counts.same_card} incidents, last {last}"
    return (
        SetHold(node.name, "repeat-fault", node.resource_version, k.hold, text),
        EmitEvent(
            node.name,
            "repeat-fault",
            "Warning",
            "GuardHold",
            f"gpu-node-guard will not return this node: {text}; "
            + hold_next(k.hold, node.name, repeat_fault=True),
        ),
    )
