"""Return check: bring a node the guard cordoned back only after it proved itself.

Conditions, in order, for each readable node with the guard's cordon record (first failure wins):
  1. still cordoned, else a person uncordoned it → clear the guard's annotations (no load test)
     and record the cancel (`cancelled`: boot, GPU, Xid) so that incident is not cordoned again;
     a `hold` annotation stops here
  2. a proven reboot: both the recorded and the current bootID known, and different — or, for
     reset-class Xids and where a bootID is missing, a `reset-done` note from after the cordon
  3. Ready, GPU capacity == recorded capacity == allocatable
  4. no hardware Xid on the node now; row remapping neither pending nor failed
  5. no Running pod holds a GPU on the node
  6. the card has fewer ledger incidents than the repeat-fault limit, else set `hold`
  (7. optional: the conformance Job passed)
Then one load-test Job per node per boot and cordon: running → wait; succeeded → uncordon and
record `returned`; failed → stay cordoned and record it once.
"""

from __future__ import annotations

from typing import Literal

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
from guard.model import CordonRecord, JobInfo, NodeInfo, Snapshot, rebooted
from guard.objects import cancel_value
from guard.plan.common import (
    Incident,
    conformance_args,
    evidence_job,
    has_ledger_line,
    job_spec,
    keys,
    ledger_append,
    loadtest_args,
    present,
)
from guard.settings import Settings

WAIT = "checked again next cycle"


def plan_return(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    actions: list[Action] = []
    for node in snap.nodes:
        if node.cordon is not None and not node.unreadable:
            actions.extend(_node(snap, s, t, node, node.cordon))
    return tuple(actions)


def _node(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    if not node.unschedulable:
        return _cancel(snap, s, node, c)
    return _repairs(snap, s, t, node, c) + _progress(snap, s, t, node, c)


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
    blocked = _blocked(snap, s, node, c)
    if blocked:
        return blocked
    repeat = _repeat_fault(snap, s, node, c)
    if repeat:
        return repeat
    if s.return_conformance:
        gate = _job_gate(snap, s, t, node, "conformance")
        if gate is not None:
            return gate
    return _job_gate(snap, s, t, node, "loadtest") or ()


def _repairs(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    """Finish a cordon whose later writes failed: the ledger line, then a fresh evidence Job.

    The evidence Job is recreated only within two cycles of the cordon, so a Job that a person
    deleted later, or that expired, is not resurrected.
    """
    if c.xid is None or c.gpu is None or c.at is None:
        return ()
    incident = Incident(node.name, c.at, c.xid, c.gpu.pci, c.gpu.uuid)
    out: list[Action] = []
    if not has_ledger_line(snap, incident):
        out.append(ledger_append(s, incident, "repair-ledger"))
    job = evidence_job(snap, s, t, incident, "repair-evidence")
    fresh = (snap.now - incident.at).total_seconds() <= 2 * s.cadence_s
    if fresh and all(j.name != job.name for j in snap.jobs):
        out.append(job)
    return tuple(out)


def _blocked(snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    """Conditions 1–5 as (reason, observed) checks; the first failing one is returned."""
    k = keys(s)
    if node.hold is not None:
        return (Skip(node.name, "hold", f"hold={node.hold!r}", f"a person removes {k.hold}"),)
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
    return _health(snap, node)


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


def _repeat_fault(
    snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord
) -> tuple[Action, ...]:
    k = keys(s)
    uuid, pci = (c.gpu.uuid, c.gpu.pci) if c.gpu else (None, None)
    counts = ledger.count(snap.ledger, uuid, node.name, pci)
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


def _job_key(node: NodeInfo) -> str:
    """One Job of each kind per boot and cordon. A GPU reset keeps the bootID, so its reset-done
    note joins the key; the cordon time keeps a later cordon in the same boot from finding the
    Jobs of an earlier one (reset-done stays: only a person removes it)."""
    at = node.cordon.at if node.cordon else None
    return "\0".join((node.boot_id, node.reset_done or "", ledger.format_time(at) if at else ""))


def _job_gate(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, kind: str
) -> tuple[Action, ...] | None:
    """None when this gate passed; otherwise the actions for this cycle."""
    spec = _spec(s, node, kind)
    job = next((j for j in snap.jobs if j.name == spec.name), None)
    result_key = keys(s).loadtest_result if kind == "loadtest" else keys(s).conformance_result
    recorded = node.loadtest_result if kind == "loadtest" else node.conformance_result
    if job is None and spec.name in recorded:
        job = JobInfo(spec.name, kind, node.name, "failed")  # the Job expired; the node did not
    if job is None:
        return (CreateJob(node.name, "conditions-met", kind, spec.name, t.render(spec)),)
    if job.status == "running":
        return (Skip(node.name, f"{kind}-running", f"job/{job.name}", WAIT),)
    if job.status == "unreadable":
        fix = f"kubectl -n {spec.namespace} get job {job.name} -o yaml; delete it to run again"
        return (Skip(node.name, f"{kind}-unreadable", f"job/{job.name}: {job.problem}", fix,
                     "WARN"),)  # fmt: skip
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
                f"stays cordoned; kubectl -n {spec.namespace} logs job/{job.name}",
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
    return _uncordon(snap, s, node, job)


def _uncordon(snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo) -> tuple[Action, ...]:
    k = keys(s)
    returned = f"{ledger.format_time(snap.now)} job/{job.name}"
    return (
        Uncordon(
            node.name,
            "loadtest-passed",
            node.resource_version,
            present(node, (*k.guard_keys, k.cancelled)),
            f"job/{job.name} succeeded",
            ((k.returned, returned),),
        ),
        EmitEvent(
            node.name,
            "returned",
            "Normal",
            "GuardReturned",
            f"gpu-node-guard returned the node: job/{job.name} passed",
        ),
    )


def _spec(s: Settings, node: NodeInfo, kind: str) -> JobSpec:
    c = node.cordon
    assert c is not None  # only cordoned nodes reach the Job gates
    key = _job_key(node)
    if kind == "conformance":
        return job_spec(s, "conformance", node.name, key, c.reason, conformance_args(s))
    pci = c.gpu.pci if c.gpu else ""
    return job_spec(
        s,
        "loadtest",
        node.name,
        key,
        c.reason,
        loadtest_args(s, node.gpu_capacity, c.xid, pci),
        gpus=node.gpu_capacity,
    )
