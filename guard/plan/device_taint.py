"""DRA nodes: isolate the faulted GPU with a DeviceTaintRule (NoSchedule, one per device of that
GPU, labelled as the guard's) instead of cordoning the node; its other GPUs stay in service. The
return is the return table's device-taint rows and one load-test Job on a ResourceClaim of
exactly that GPU. A DeviceTaintRule without the guard's label is never read, changed or deleted.
Each case: docs/lifecycle.md, "DRA nodes"; each difference from the cordon: docs/isolation.md.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Literal

from guard import ledger
from guard.actions import (
    Action,
    Annotate,
    ClearGuardAnnotations,
    CreateClaim,
    EmitEvent,
    Skip,
    TaintDevice,
    UntaintDevice,
)
from guard.codec.check_records import claim_record_value
from guard.codec.records import DeviceRecord, cancel_value, parse_record
from guard.jobs import ClaimSpec, JobSpec, JobTemplates, node_label
from guard.model import DraDevice, GpuSample, JobInfo, NodeInfo, Snapshot, TaintRule
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    DEVICE_TAINT_COMPONENT,
    DRA_DEVICE_CLASS,
    Annotations,
)
from guard.plan import return_jobs, return_rule
from guard.plan.check_jobs import foreign, foreign_job, passed
from guard.plan.common import (
    UID,
    WAIT,
    Incident,
    cancel,
    create_job,
    evidence_job,
    job_spec,
    keys,
    ledger_append,
    loadtest_args,
    present,
)
from guard.settings import Settings
from guard.states import Decision, Reason, xid_reason

Screened = Reason | Literal[""]  # the isolation screen's word; "" for an eligible node


def record_of(node: NodeInfo, s: Settings) -> DeviceRecord | None:
    text = node.annotation(keys(s).device_taint)
    return None if text is None else parse_record(text)


def rule_name(device: DraDevice) -> str:
    """One rule per device: its name depends only on driver, pool and device.

    >>> rule_name(DraDevice("n1", "gpu.nvidia.com", "n1", "gpu-3", "GPU-x", ""))
    'gng-dt-n1-gpu-3-96f87a60a403'
    """
    digest = hashlib.sha256(f"{device.driver}\0{device.pool}\0{device.name}".encode()).hexdigest()
    stem = re.sub(r"[^a-z0-9-]", "-", f"{device.pool}-{device.name}".lower())[:200].strip("-")
    return f"gng-dt-{stem}-{digest[:12]}"


# ---- the read side's questions --------------------------------------------------------------


def published(snap: Snapshot, node: str) -> tuple[DraDevice, ...]:
    return tuple(d for d in snap.devices if d.node == node)


def targets(snap: Snapshot, node: str, uuid: str, pci: str) -> tuple[DraDevice, ...]:
    """Every device the DRA driver publishes for the node that is the faulted GPU or a part of
    it: by UUID (what both dcgm-exporter and the driver read from NVML), the GPU's own or a MIG
    device's parent, with any device of its PCI address that names no UUID; else, no device
    naming that UUID, by PCI address. Two names for one GPU are both its devices."""
    mine = published(snap, node)
    known = pci not in ("", ledger.UNKNOWN_PCI)
    by_pci = [d for d in mine if known and d.pci == pci]
    by_uuid = [d for d in mine if uuid.lower() in (d.uuid.lower(), d.parent_uuid.lower())]
    if by_uuid:
        return (*by_uuid, *(d for d in by_pci if not d.uuid and not d.parent_uuid))
    return tuple(by_pci)


def whole(devices: tuple[DraDevice, ...], uuid: str) -> bool:
    """One of the devices is the whole GPU by its UUID: what the load test's claim selects."""
    return any(d.uuid.lower() == uuid.lower() for d in devices)


def guard_rules(snap: Snapshot) -> tuple[TaintRule, ...]:
    return tuple(r for r in snap.taint_rules if r.guard)


def eligibility(
    snap: Snapshot, s: Settings, node: NodeInfo, reason: Screened, samples: tuple[GpuSample, ...]
) -> Screened:
    """The isolation screen's word, given the cordon screen's (`reason`) and the node's faulted
    GPUs (`samples`, the first its primary): one device isolated per node."""
    if node.has(keys(s).device_taint):
        return Decision.DEVICE_ISOLATED if others(node, s, samples) else Decision.ALREADY_GUARDED
    g = samples[0]
    if reason == Decision.NO_GPU_RESOURCE and targets(snap, node.name, g.uuid, g.pci):
        return ""
    return reason


def others(node: NodeInfo, s: Settings, samples: tuple[GpuSample, ...]) -> tuple[GpuSample, ...]:
    """The faulted GPUs that are not the node's tainted one (all, its record unreadable)."""
    rec = record_of(node, s)
    return tuple(g for g in samples if rec is None or rec.uuid.lower() != g.uuid.lower())


def dra_node(snap: Snapshot, node: NodeInfo) -> bool:
    """A node without an nvidia.com/gpu resource whose GPUs the DRA driver publishes (some of
    them: the faulted one may be the one it stopped publishing)."""
    return node.gpu_capacity <= 0 and bool(published(snap, node.name))


def loss_start(snap: Snapshot, node: str) -> datetime:
    """When the node's GPU loss began (the hold's start): one time per incident, cycle after
    cycle, so its ledger line is written once."""
    return dict(snap.prom.loss_since).get(node, snap.now)


def recorded(snap: Snapshot, node: str, g: GpuSample) -> bool:
    """The ledger holds this incident already: a line of this GPU, node and Xid since the GPU
    loss began (written while no device of the GPU was published)."""
    since = loss_start(snap, node)
    return any(
        e.node == node and e.uuid.lower() == g.uuid.lower() and e.xid == g.value and e.at >= since
        for e in ledger.entries(snap.ledger)
    )


def unpublished(snap: Snapshot, s: Settings, node: NodeInfo, g: GpuSample) -> tuple[Action, ...]:
    """A DRA node's faulted GPU that no published device names: not isolated, its incident
    recorded once (docs/isolation.md)."""
    reason = xid_reason(g.value)
    why = (
        f"{reason} gpu={g.pci} uuid={g.uuid}: the DRA driver publishes no device of this GPU "
        f"on {node.name}, so no DeviceTaintRule can select it (nor can the scheduler allocate "
        "it); the guard does not cordon a DRA node"
    )
    fix = (
        f"the guard taints it once the driver publishes it again; check the DRA driver "
        f"(kubectl get resourceslices --field-selector spec.nodeName={node.name}); "
        f"kubectl cordon {node.name} to stop its other GPUs too"
    )
    incident = Incident(node.name, loss_start(snap, node.name), g.value, g.pci, g.uuid)
    ledger_line = () if recorded(snap, node.name, g) else (ledger_append(s, incident, reason),)
    told = "; the incident is in the fault ledger"
    return (*_not_isolated(node.name, Decision.DEVICE_UNPUBLISHED, why, fix, told), *ledger_line)


def whole_node(node: str, what: str) -> tuple[Skip, EmitEvent]:
    """A node-wide finding (a mismatch, a node trigger) on a DRA node: it names no one device to
    taint, and the guard does not cordon a DRA node (docs/triggers.md)."""
    why = f"{what}: a whole node's fault names no one device to taint on a DRA node"
    fix = f"taint its GPUs or cordon it by hand if the fault is real: kubectl cordon {node}"
    return _not_isolated(node, Decision.NO_GPU_RESOURCE, why, fix)


def isolated_skip(node: str, detail: str) -> tuple[Skip, EmitEvent]:
    """Another GPU faulted on a node whose GPU the guard already isolates with a device taint."""
    why = f"{detail}: the guard isolates one device per node"
    fix = f"cordon by hand if the fault is real: kubectl cordon {node}"
    return _not_isolated(node, Decision.DEVICE_ISOLATED, why, fix)


def _not_isolated(
    node: str, word: Reason, why: str, fix: str, told: str = ""
) -> tuple[Skip, EmitEvent]:
    message = f"gpu-node-guard did not isolate: {why}{told}"
    return (
        Skip(node, word, why, fix, "WARN"),
        EmitEvent(node, word, "Warning", "GuardNotIsolated", message),
    )


# ---- isolation ------------------------------------------------------------------------------


def rule_manifest(
    s: Settings, node: str, device: DraDevice, rec: DeviceRecord
) -> dict[str, object]:
    """The guard's DeviceTaintRule for one device: its label, the node, the incident."""
    k = keys(s)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(device),
            "labels": {
                APP_LABEL: APP_NAME,
                COMPONENT_LABEL: DEVICE_TAINT_COMPONENT,
                k.node_label: node_label(node),
            },
            "annotations": {k.node_label: node, k.device_taint: rec.value()},
        },
        "spec": {
            "deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.name},
            "taint": {"key": k.fault_taint, "value": rec.reason, "effect": "NoSchedule"},
        },
    }


def isolate(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, g: GpuSample, held_s: int
) -> tuple[Action, ...]:
    """The rules first, one per device (a rule without its record is recorded again next
    cycle), then the record, the Event, the ledger line, the evidence Job."""
    devices = targets(snap, node.name, g.uuid, g.pci)
    assert devices
    k, reason = keys(s), xid_reason(g.value)
    refs, names = ",".join(d.ref for d in devices), ",".join(rule_name(d) for d in devices)
    rec = DeviceRecord(reason, snap.now, node.boot_id, g.pci, g.uuid, refs, names)
    incident = Incident(node.name, snap.now, g.value, g.pci, g.uuid)
    job = evidence_job(snap, s, t, incident, reason)
    evidence: tuple[Action, ...] = (job,) if g.pci != ledger.UNKNOWN_PCI else ()
    message = (
        f"gpu-node-guard tainted DRA device {refs} (GPU {g.gpu}, {g.pci} {g.uuid}): "
        f"Xid {g.value}, GPU loss held {held_s}s; the node's other GPUs stay in service "
        f"(DeviceTaintRule {rec.rule}, NoSchedule)"
    )
    manifests = ((d, rule_manifest(s, node.name, d, rec)) for d in devices)
    note = ((k.device_taint, rec.value()),)
    then = f"the load test of {refs} decides its return"
    at = ledger.format_time(snap.now)
    return (
        *(TaintDevice(node.name, reason, rule_name(d), d.ref, g.uuid, m) for d, m in manifests),
        Annotate(node.name, reason, node.resource_version, note, then),
        EmitEvent(node.name, reason, "Warning", "GuardDeviceTainted", message, incident=at),
        *(() if recorded(snap, node.name, g) else (ledger_append(s, incident, reason),)),
        *evidence,
    )


# ---- return ---------------------------------------------------------------------------------


def plan_return(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    """The return of every device the guard isolates, and the repair of a lost record."""
    out: list[Action] = []
    recorded = set()
    for node in snap.nodes:
        if node.unreadable or not node.has(keys(s).device_taint):
            continue
        recorded.add(node.name)
        out.extend(decision(snap, s, t, node))
    for rule in guard_rules(snap):
        owner = snap.node(rule.node)
        if rule.node not in recorded and owner is not None and not owner.unreadable:
            out.extend(_rerecord(s, owner, rule))
    return tuple(out)


def _rerecord(s: Settings, node: NodeInfo, rule: TaintRule) -> tuple[Action, ...]:
    rec = parse_record(rule.record)
    if rec is None or rule.name not in rec.rules:
        detail = f"DeviceTaintRule {rule.name} carries no readable record"
        fix = f"kubectl get devicetaintrule {rule.name} -o yaml"
        return (Skip(node.name, Decision.DEVICE_RULE_UNREADABLE, detail, fix, "WARN"),)
    note = ((keys(s).device_taint, rec.value()),)
    then = f"device {rec.device} stays tainted"
    return (Annotate(node.name, Decision.DEVICE_RECORD_REPAIR, node.resource_version, note, then),)


def decision(snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo) -> tuple[Action, ...]:
    """The return of one readable node with a device record (its first action is the node's
    state for `gpu-node-guard status` and the pushed node counts)."""
    k = keys(s)
    rec = record_of(node, s)
    if rec is None:
        detail = f"{k.device_taint}={node.annotation(k.device_taint)!r} is not a record"
        fix = f"kubectl annotate node {node.name} {k.device_taint}-"
        return (Skip(node.name, Decision.UNREADABLE, detail, fix, "WARN"),)
    rules = tuple(r for r in guard_rules(snap) if r.name in rec.rules)
    _, spec = _loadtest(s, node, rec)
    job = next((j for j in snap.jobs if j.name == spec.name), None)
    if not rules:
        trusted = job is not None and not foreign(node, job)
        if job is not None and trusted and passed(job) and not claim_problem(snap, node, rec, job):
            return _returned(snap, s, node, rec, job)
        return _cancelled(snap, s, node, rec)
    blocked = return_rule.blocked(return_rule.Case(snap, s, node, rec))
    if blocked:
        return blocked
    start = partial(_start, snap, s, t, node, rec)
    out = return_jobs.gate(snap, s, node, spec, "device-taint", start, rec.device)
    if isinstance(out, tuple):
        return out
    if why := claim_problem(snap, node, rec, out):
        stays = "the device stays tainted"
        return foreign_job(s, node, out, Decision.LOADTEST_FOREIGN, why, stays, claim=out.name)
    return _returned(snap, s, node, rec, out)


def _start(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, rec: DeviceRecord
) -> tuple[Action, ...]:
    """The device's claim and load-test Job; one Job per GPU at a time (the guard isolates one
    device per node): a newer reset-done waits while an earlier boot's or reset's Job runs."""
    k = keys(s)
    running = ("running", "unreadable")
    claim, spec = _loadtest(s, node, rec)
    mine = (j for j in snap.jobs if j.kind == "loadtest" and j.node == node.name)
    if earlier := next((j for j in mine if j.name != spec.name and j.status in running), None):
        detail = (
            f"job/{earlier.name} on {rec.device} still runs; the newer "
            f"{k.reset_done}={node.reset_done!r} waits for it"
        )
        return (Skip(node.name, Decision.LOADTEST_RUNNING, detail, WAIT),)
    record = (k.loadtest_claim, claim_record_value(claim.name, UID))
    word = Decision.CONDITIONS_MET
    manifest = t.render_claim(claim)
    return (
        CreateClaim(node.name, word, claim.name, claim.namespace, manifest, record),
        create_job(s, node.name, word, "loadtest", spec.name, t.render(spec)),
    )


def job_key(node: NodeInfo, rec: DeviceRecord) -> str:
    """One device load test per isolation, boot and reset."""
    return "\0".join((rec.device, ledger.format_time(rec.at), node.boot_id, node.reset_done or ""))


def _loadtest(s: Settings, node: NodeInfo, rec: DeviceRecord) -> tuple[ClaimSpec, JobSpec]:
    """The device's ResourceClaim and its one-GPU load-test Job (the Job's name names both)."""
    args = loadtest_args(s, 1, rec.xid, rec.pci)
    spec = job_spec(s, "loadtest", node.name, job_key(node, rec), rec.reason, args, gpus=1)
    spec = replace(spec, claim=spec.name)
    driver = rec.device.split("/", 1)[0]
    prefix = s.annotation_prefix
    taint = Annotations(prefix).fault_taint
    on = (driver, rec.uuid, rec.devices[0], taint, rec.reason)
    return ClaimSpec(spec.name, spec.namespace, node.name, prefix, DRA_DEVICE_CLASS, *on), spec


def claim_problem(snap: Snapshot, node: NodeInfo, rec: DeviceRecord, job: JobInfo) -> str:
    """Why a pass of the device's load-test Job is not a pass of the tainted GPU ("" when it
    is): its claim, allocation and tested GPUs (docs/lifecycle.md, "DRA nodes")."""
    made = node.claim_record
    if made is None or made.name != job.name:
        last = f"; the guard's last claim here is resourceclaim/{made.name}" if made else ""
        return f"the node has no record that the guard created resourceclaim/{job.name}{last}"
    claim = next((c for c in snap.claims if c.name == job.name), None)
    if claim is None:
        return f"resourceclaim/{job.name} is gone: which GPU it held cannot be read"
    if claim.uid != made.uid:
        return (
            f"resourceclaim/{job.name} has uid {claim.uid or '(none)'} but the guard created "
            f"uid {made.uid}: it was replaced"
        )
    if claim.allocated and (len(claim.allocated) != 1 or claim.allocated[0] not in rec.devices):
        return (
            f"resourceclaim/{job.name} is allocated {','.join(claim.allocated)}, not the "
            f"tainted {rec.device}"
        )
    tested = job.result.gpus if job.result is not None else ()
    if [u.lower() for u in tested] != [rec.uuid.lower()]:
        return (
            f"the load test ran on {','.join(tested) or 'GPUs it did not name'}, not the "
            f"tainted {rec.uuid}"
        )
    return ""


def _returned(
    snap: Snapshot, s: Settings, node: NodeInfo, rec: DeviceRecord, job: JobInfo
) -> tuple[Action, ...]:
    rules = tuple(r for r in guard_rules(snap) if r.name in rec.rules)
    k = keys(s)
    at = ledger.format_time(snap.now)
    ns = s.jobs_namespace
    name = job.name
    clear = present(node, (k.device_taint, k.loadtest_result))
    note = ((k.returned, f"{at} job/{name}"),)
    word = Decision.DEVICE_RETURNED
    message = f"gpu-node-guard returned DRA device {rec.device}: job/{name} passed"
    done = Decision.LOADTEST_PASSED
    return (
        *(UntaintDevice(node.name, done, r.name, r.uid, r.ref, name, ns) for r in rules),
        ClearGuardAnnotations(node.name, word, node.resource_version, clear, note),
        EmitEvent(node.name, Decision.RETURNED, "Normal", "GuardReturned", message),
    )


def _cancelled(
    snap: Snapshot, s: Settings, node: NodeInfo, rec: DeviceRecord
) -> tuple[Action, ...]:
    """The guard's rule is gone and no load test passed: a person deleted it. The incident
    (boot, GPU, Xid) is recorded as cancelled, as for a person's uncordon."""
    k, at = keys(s), ledger.format_time(snap.now)
    boot = node.boot_id or rec.boot_id
    message = (
        f"DeviceTaintRule {rec.rule} of {rec.device} was deleted by a person; "
        f"gpu-node-guard cleared its record and will not taint {rec.uuid} again for "
        f"{rec.reason} in this boot"
    )
    record = ((k.cancelled, cancel_value(boot, rec.uuid, rec.xid, at)),)
    return cancel(node, (k.device_taint, k.loadtest_result), record, message)
