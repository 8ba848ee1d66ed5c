"""Return check: bring a node the guard cordoned back only after it proved itself.

Conditions, in order, for each node with the guard's reason annotation (first failure wins):
  1. still cordoned, else a person uncordoned it → clear the guard's annotations (no load test);
     a `hold` annotation stops here
  2. new bootID — or, for reset-class Xids, the `reset-done` annotation a person adds
  3. Ready, GPU capacity == recorded capacity == allocatable
  4. no hardware Xid on the node now; row remapping neither pending nor failed
  5. no Running pod holds a GPU on the node
  6. the card has fewer ledger incidents than the repeat-fault limit, else set `hold`
  (7. optional: the conformance Job passed)
Then one load-test Job per node per boot: running → wait; succeeded → uncordon; failed → stay
cordoned and record it once.
"""

from __future__ import annotations

from guard import ledger
from guard.actions import (
    Action,
    Annotate,
    ClearGuardAnnotations,
    CreateJob,
    EmitEvent,
    SetHold,
    Skip,
    Uncordon,
)
from guard.jobs import JobSpec, JobTemplates
from guard.model import JobInfo, NodeInfo, Snapshot
from guard.plan.common import (
    Incident,
    conformance_args,
    evidence_job,
    has_ledger_line,
    job_spec,
    keys,
    ledger_append,
    loadtest_args,
    xid_of,
)
from guard.settings import Settings

WAIT = "checked again next cycle"


def plan_return(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    k = keys(s)
    actions: list[Action] = []
    for node in snap.nodes:
        if node.annotation(k.reason) is not None:
            actions.extend(_node(snap, s, t, node))
    return tuple(actions)


def _node(snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo) -> tuple[Action, ...]:
    k = keys(s)
    if not node.unschedulable:
        return (
            ClearGuardAnnotations(
                node.name, "human-uncordon", node.resource_version, _present(node, k.guard_keys)
            ),
            EmitEvent(
                node.name,
                "human-uncordon",
                "Normal",
                "GuardCancelled",
                "node was uncordoned by a person; gpu-node-guard cleared its annotations "
                "without a load test",
            ),
        )
    return _repairs(snap, s, t, node) + _progress(snap, s, t, node)


def _progress(snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo) -> tuple[Action, ...]:
    blocked = _blocked(snap, s, node)
    if blocked is not None:
        return (blocked,)
    repeat = _repeat_fault(snap, s, node)
    if repeat:
        return repeat
    boot_key = _boot_key(s, node)
    if s.return_conformance:
        gate = _job_gate(snap, s, t, node, "conformance", boot_key)
        if gate is not None:
            return gate
    return _job_gate(snap, s, t, node, "loadtest", boot_key) or ()


def _repairs(snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo) -> tuple[Action, ...]:
    """Finish a cordon whose later writes failed: the ledger line, then a fresh evidence Job.

    The evidence Job is recreated only within two cycles of the cordon, so a Job that a person
    deleted later, or that expired, is not resurrected.
    """
    incident = _incident(s, node)
    if incident is None:
        return ()
    out: list[Action] = []
    if not has_ledger_line(snap, incident):
        out.append(ledger_append(s, incident, "repair-ledger"))
    job = evidence_job(snap, s, t, incident, "repair-evidence")
    fresh = (snap.now - incident.at).total_seconds() <= 2 * s.cadence_s
    if fresh and all(j.name != job.name for j in snap.jobs):
        out.append(job)
    return tuple(out)


def _incident(s: Settings, node: NodeInfo) -> Incident | None:
    k = keys(s)
    xid = xid_of(node.annotation(k.reason))
    pci, _, uuid = (node.annotation(k.gpu) or "").partition(" ")
    try:
        at = ledger.parse_time(node.annotation(k.at) or "")
    except ValueError:
        return None
    if xid is None or not pci or not uuid:
        return None
    return Incident(node.name, at, xid, pci, uuid)


def _blocked(snap: Snapshot, s: Settings, node: NodeInfo) -> Skip | None:
    """Conditions 1–5 as (reason, observed) checks; the first failing one becomes a Skip."""
    k = keys(s)
    hold = node.annotation(k.hold)
    if hold is not None:
        return Skip(node.name, "hold", f"hold={hold!r}", f"a person removes {k.hold}")
    xid = xid_of(node.annotation(k.reason))
    if xid in s.reset_class_xids:
        if node.annotation(k.reset_done) is None:
            return Skip(
                node.name,
                "waiting-reset",
                f"xid-{xid} is reset-class; no {k.reset_done}",
                f"after the GPU reset, annotate {k.reset_done}",
            )
    elif node.boot_id == node.annotation(k.boot_id):
        return Skip(
            node.name,
            "same-boot",
            f"bootID {node.boot_id} unchanged since cordon",
            "waiting for the power cycle",
        )
    recorded = node.annotation(k.gpu_capacity) or "?"
    if not node.ready:
        return Skip(node.name, "not-ready", "node Ready condition is not True", WAIT)
    if not (str(node.gpu_capacity) == recorded and node.gpu_capacity == node.gpu_allocatable):
        return Skip(
            node.name,
            "gpu-count",
            f"capacity={node.gpu_capacity} recorded={recorded} allocatable={node.gpu_allocatable}",
            WAIT,
        )
    xids = [g for g in snap.prom.hardware_xids if g.node == node.name]
    if xids:
        return Skip(
            node.name, "xid-present", ", ".join(f"gpu{g.gpu}=xid-{g.value}" for g in xids), WAIT
        )
    remap = [g for g in snap.prom.row_remap if g.node == node.name]
    if remap:
        return Skip(
            node.name,
            "row-remap",
            ", ".join(f"gpu{g.gpu}={g.value}" for g in remap),
            "row remap pending/failed: reset or replace the GPU",
        )
    pods = [p for p in snap.gpu_pods if p.node == node.name]
    if pods:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in pods[:3])
        return Skip(node.name, "gpu-pods-running", f"{len(pods)} pods hold GPUs: {names}", WAIT)
    return None


def _repeat_fault(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Action, ...]:
    k = keys(s)
    pci, _, uuid = (node.annotation(k.gpu) or "").partition(" ")
    counts = ledger.count(snap.ledger, uuid or None, node.name, pci or None)
    if counts.same_card < s.repeat_fault_limit:
        return ()
    last = ledger.format_time(counts.last_card_incident) if counts.last_card_incident else "?"
    text = f"repeat fault: {uuid} {counts.same_card} incidents, last {last}"
    return (
        SetHold(node.name, "repeat-fault", node.resource_version, k.hold, text),
        EmitEvent(
            node.name,
            "repeat-fault",
            "Warning",
            "GuardHold",
            f"gpu-node-guard will not return this node: {text}; a person decides",
        ),
    )


def _boot_key(s: Settings, node: NodeInfo) -> str:
    """One Job per boot; a GPU reset keeps the bootID, so its reset-done note joins the key."""
    k = keys(s)
    return f"{node.boot_id}\0{node.annotation(k.reset_done) or ''}"


def _job_gate(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, kind: str, boot_key: str
) -> tuple[Action, ...] | None:
    """None when this gate passed; otherwise the actions for this cycle."""
    spec = _spec(s, node, kind, boot_key)
    job = next((j for j in snap.jobs if j.name == spec.name), None)
    result_key = keys(s).loadtest_result if kind == "loadtest" else keys(s).conformance_result
    recorded = node.annotation(result_key) or ""
    if job is None and spec.name in recorded:
        job = JobInfo(spec.name, kind, node.name, "failed")  # the Job expired; the node did not
    if job is None:
        return (CreateJob(node.name, "conditions-met", kind, spec.name, t.render(spec)),)
    if job.status == "running":
        return (Skip(node.name, f"{kind}-running", f"job/{job.name}", WAIT),)
    if job.status == "failed":
        if spec.name in recorded:
            return (
                Skip(
                    node.name,
                    f"{kind}-failed",
                    f"job/{job.name} failed on this boot",
                    "stays cordoned; read the job log, fix, reboot or reset",
                ),
            )
        value = f"failed job/{job.name} at {ledger.format_time(snap.now)}"
        return (
            Annotate(
                node.name,
                f"{kind}-failed",
                node.resource_version,
                ((result_key, value),),
                f"stays cordoned; kubectl -n {s.jobs_namespace} logs job/{job.name}",
            ),
            EmitEvent(
                node.name,
                f"{kind}-failed",
                "Warning",
                "GuardCheckFailed",
                f"{kind} job/{job.name} failed; node stays cordoned",
            ),
        )
    if kind == "conformance":
        return None
    return (
        Uncordon(
            node.name,
            "loadtest-passed",
            node.resource_version,
            _present(node, keys(s).guard_keys),
            f"job/{job.name} succeeded",
        ),
        EmitEvent(
            node.name,
            "returned",
            "Normal",
            "GuardReturned",
            f"gpu-node-guard returned the node: job/{job.name} passed",
        ),
    )


def _spec(s: Settings, node: NodeInfo, kind: str, boot_key: str) -> JobSpec:
    reason = node.annotation(keys(s).reason) or ""
    if kind == "conformance":
        return job_spec(s, "conformance", node.name, boot_key, reason, conformance_args(s))
    return job_spec(
        s,
        "loadtest",
        node.name,
        boot_key,
        reason,
        loadtest_args(s, node.gpu_capacity, xid_of(reason), _faulted_pci(s, node)),
        gpus=node.gpu_capacity,
    )


def _faulted_pci(s: Settings, node: NodeInfo) -> str:
    return (node.annotation(keys(s).gpu) or "").partition(" ")[0]


def _present(node: NodeInfo, candidates: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(key for key in candidates if node.annotation(key) is not None)
