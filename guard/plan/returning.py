"""The cordon unit: cordon a node, bring it back only after it proved itself (the return table's
cordon rows, then the conformance Job, the fence's lift and the load test), and finish a cordon
whose later writes failed. A person's uncordon is a cancel of that incident for this boot.
"""

from __future__ import annotations

from datetime import datetime

from guard import ledger
from guard.actions import Action, CreateJob, Skip
from guard.codec.check_records import UNCORDON, checked_boot_value
from guard.codec.records import cancel_value, reason_cancel_value
from guard.jobs import JobTemplates
from guard.model import CordonRecord, GpuSample, NodeInfo, Snapshot
from guard.plan import cordon_event, fence, hold, mismatch, return_rule, service_network, triggers
from guard.plan.check_jobs import is_conformance_cordon
from guard.plan.common import (
    Incident,
    cancel,
    evidence_job,
    has_ledger_line,
    keys,
    ledger_append,
    node_cordon,
    node_evidence_job,
    trigger_evidence_args,
)
from guard.plan.return_jobs import (
    conformance_return,
    evidence_by_hand,
    evidence_rejected,
    evidence_running,
    job_gate,
    loadtest_name,
    record_links,
)
from guard.settings import Settings
from guard.states import Decision, Reason, xid_reason

# ---- isolation -------------------------------------------------------------------------------


def isolate(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, g: GpuSample, held_s: int
) -> tuple[Action, ...]:
    """The cordon of a node for its faulted GPU `g` (its held GPU loss read again: `held_s`
    is the pick's)."""
    k, reason = keys(s), xid_reason(g.value)
    incident = Incident(node.name, snap.now, g.value, g.pci, g.uuid)
    job = evidence_job(snap, s, t, incident, reason)
    known = g.pci != ledger.UNKNOWN_PCI  # the evidence Job reads one PCI address
    evidence = job if known else no_pci_evidence(node.name, reason)
    held = hold.loss_held_s(snap.prom, node.name, snap.now)
    where = f"job/{job.name}" if known else "none (no PCI address)"
    message = (
        f"cordoned by gpu-node-guard: Xid {g.value} on GPU {g.gpu} ({g.pci} {g.uuid}), "
        f"GPU loss held {held}s; evidence {where}"
    )
    gpu = ((k.gpu, f"{g.pci} {g.uuid}"),)
    return (
        *node_cordon(snap, s, node, reason, (g.pci, held, where, ""), message, gpu),
        ledger_append(s, incident, reason),
        evidence,
        *fence.at_cordon(snap, s, t, node, g, reason),  # GUARD_FENCE_GPU (docs/isolation.md)
    )


def no_pci_evidence(node: str, reason: Reason) -> Skip:
    """An exporter without a pci_bus_id label: the evidence Job (`--pci` is a PCI address, as
    the policies pin it) cannot be made, so the cordon goes on without it, once said."""
    detail = f"{reason}: dcgm-exporter gives no pci_bus_id for the GPU, so no evidence Job"
    fix = "collect by hand: gpu-node-guard render evidence --node <node> --pci <address>"
    return Skip(node, Decision.EVIDENCE_NO_PCI, detail, fix, "WARN")


# ---- return ----------------------------------------------------------------------------------


def plan_return(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    actions: list[Action] = []
    for node in snap.nodes:
        if node.cordon is not None and not node.unreadable:
            if node.unschedulable:
                actions.extend(_repairs(snap, s, t, node, node.cordon))
            actions.extend(decision(snap, s, t, node))
    if any(n.cordon is not None and n.unschedulable and not n.unreadable for n in snap.nodes):
        actions[:0] = service_network.not_applicable(snap, s)  # one line per cycle
    return tuple(actions)


def decision(snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo) -> tuple[Action, ...]:
    """What this check decides about one readable guard-cordoned node, its repairs aside: the
    first action is the node's state (`gpu-node-guard status`, the pushed node counts)."""
    assert node.cordon is not None and not node.unreadable
    if not node.unschedulable:
        return _cancel(snap, s, node, node.cordon)
    decided = _steps(snap, s, t, node, node.cordon)
    return decided + fence.keep(snap, s, t, node, decided)  # while it waits: the host fence


def _cancel(snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    """A person's uncordon: clear the guard's keys and record the incident it cancels."""
    k = keys(s)
    at = ledger.format_time(snap.now)
    boot = node.boot_id or c.boot_id
    record: tuple[tuple[str, str], ...] = ()
    sticks = ""
    if c.xid is not None and c.gpu is not None:
        record = ((k.cancelled, cancel_value(boot, c.gpu.uuid, c.xid, at)),)
        sticks = f"; it will not cordon it again for xid-{c.xid} on {c.gpu.uuid} in this boot"
    elif is_conformance_cordon(c) and node.boot_id:  # the person accepted this boot as it is
        record = ((k.checked_boot, checked_boot_value(node.boot_id, at, UNCORDON)),)
        sticks = "; it records this boot as checked: no conformance Job until the next reboot"
    elif c.reason in (mismatch.NVML_MISMATCH, *triggers.REASONS):  # no GPU: boot and reason
        record = ((k.cancelled, reason_cancel_value(boot, c.reason, at)),)
        sticks = f"; it will not cordon it again for {c.reason} in this boot"
    message = (
        "node was uncordoned by a person; gpu-node-guard cleared its annotations "
        f"without a load test{sticks}"
    )
    return cancel(node, (*k.guard_keys, k.returned), record, message)


def _steps(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    blocked = return_rule.blocked(return_rule.Case(snap, s, node, c))
    if blocked:
        return blocked
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
    """Finish a cordon whose later writes failed: the ledger line, the evidence Job, the cordon
    Event (docs/writes.md "Events": which, and for how long)."""
    if c.at is None:
        return ()
    out: list[Action] = [*record_links(snap, s, node), *evidence_rejected(snap, s, node)]
    if c.xid is None or c.gpu is None:  # a node trigger's evidence Job is read as an Xid's
        if c.reason in ledger.NODE_REASONS:  # its node-wide Job, keyed by the cordon's time too
            args = trigger_evidence_args(node.name, c.reason, c.gpu_capacity)
            made = node_evidence_job(s, t, node.name, c.at, Decision.REPAIR_EVIDENCE, args)
            out.extend(_evidence_again(snap, s, node, made, c.at))
        return (*out, *cordon_event.if_lost(snap, cordon_event.gpuless_event(node, c), c))
    incident = Incident(node.name, c.at, c.xid, c.gpu.pci, c.gpu.uuid)
    if not has_ledger_line(snap, incident):
        out.append(ledger_append(s, incident, Decision.REPAIR_LEDGER))
    job = evidence_job(snap, s, t, incident, Decision.REPAIR_EVIDENCE)
    if incident.pci != ledger.UNKNOWN_PCI:  # none without a PCI address (said at the cordon)
        out.extend(_evidence_again(snap, s, node, job, c.at))
    out.extend(cordon_event.if_lost(snap, cordon_event.xid_event(node.name, c, job.name), c))
    return tuple(out)


def _evidence_again(
    snap: Snapshot, s: Settings, node: NodeInfo, job: CreateJob, at: datetime
) -> tuple[Action, ...]:
    """A missing evidence Job: made again within two cycles of the cordon (not one a person
    deleted later, or that expired); later, while the cordon Event lives, a WARN."""
    if any(j.name == job.name for j in snap.jobs):
        return ()
    age_s = (snap.now - at).total_seconds()
    if age_s <= 2 * s.cadence_s:
        return (job,)
    if age_s > cordon_event.EVENT_REPAIR_S:
        return ()
    why = f"evidence Jobs are created only within {2 * s.cadence_s}s of the cordon"
    detail = (
        f"job/{job.name} does not exist and the cordon is {int(age_s)}s old; {why} (the node may"
        " have rebooted since)"
    )
    then = f"collect by hand if still useful: {evidence_by_hand(node)}"
    return (Skip(node.name, Decision.EVIDENCE_MISSING, detail, then, level="WARN"),)
