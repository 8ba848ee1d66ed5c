"""The return's Job gates, one for every unit (`gate`; where the units' words differ: `WORDS`),
the cordon's uncordon, and the PCIe links its load test expects (docs/isolation.md, "Where the
device-taint unit differs"; docs/lifecycle.md, "Job results", "PCIe links").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from guard import ledger
from guard.actions import Action, Annotate, EmitEvent, Skip, Uncordon
from guard.codec.check_records import checked_boot_value, failed_value, links_value
from guard.jobs import JobSpec, JobTemplates, job_name
from guard.model import CordonRecord, JobInfo, NodeInfo, RecordedLink, Snapshot, Unit
from guard.plan.check_jobs import (
    again,
    find_job,
    foreign,
    foreign_job,
    is_conformance_cordon,
    passed,
    rejected,
    rejected_job,
    unreadable_job,
)
from guard.plan.common import (
    WAIT,
    conformance_args,
    create_job,
    job_spec,
    keys,
    loadtest_args,
    present,
)
from guard.settings import Settings
from guard.states import Decision, job_stage


def job_key(node: NodeInfo) -> str:
    """One Job of each kind per boot and cordon. A GPU reset keeps the bootID, so its reset-done
    note joins the key; the cordon time keeps a later cordon in the same boot from finding the
    Jobs of an earlier one (reset-done stays: only a person removes it)."""
    at = node.cordon.at if node.cordon else None
    return "\0".join((node.boot_id, node.reset_done or "", ledger.format_time(at) if at else ""))


@dataclass(frozen=True, slots=True)
class Words:
    """What a unit's gate says where its words differ (docs/isolation.md, "Where the
    device-taint unit differs")."""

    stays: str  # a foreign or rejected Job's next step
    short: str  # a failure's next step begins with it
    event: str  # a failure's Event ends with it
    gone: str  # a recorded failure's detail ends with it
    retry: str  # a recorded failure's next step ends with it


WORDS: dict[Unit, Words] = {
    "cordon": Words(
        "the node stays cordoned",
        "stays cordoned",
        "node stays cordoned",
        " on this boot",
        "read the job log, fix, reboot or reset",
    ),
    "device-taint": Words(
        "the device stays tainted",
        "the device stays tainted",
        "it stays tainted",
        "",
        "read the job log, reset or replace",
    ),
}


def gate(
    snap: Snapshot,
    s: Settings,
    node: NodeInfo,
    spec: JobSpec,
    unit: Unit,
    create: Callable[[], tuple[Action, ...]],
    device: str = "",
) -> tuple[Action, ...] | JobInfo:
    """One Job gate of every unit: its actions for this cycle, or the Job once it passed."""
    w, kind = WORDS[unit], spec.kind
    on = f" on {device}" if device else ""  # the device unit's: while it runs, in its failure
    job = find_job(snap, spec.name)
    recorded = node.loadtest_result if kind == "loadtest" else node.conformance_result
    if job is not None and (why := foreign(node, job)):
        return foreign_job(s, node, job, job_stage(kind, "foreign"), why, w.stays)
    if job is None and spec.name in recorded:
        job = JobInfo(spec.name, kind, node.name, "failed")  # the Job expired; the node did not
    if job is None:
        return create()
    if why := rejected(job):  # could not run: no failure recorded, never a pass
        return rejected_job(s, node, job, why, w.stays)
    if job.status == "running":
        return (Skip(node.name, job_stage(kind, "running"), f"job/{job.name}{on}", WAIT),)
    if job.status == "unreadable":
        return (unreadable_job(s, node, job),)
    if job.status == "failed":
        return _failed(snap, s, node, job, spec, w, on)
    if not passed(job):  # succeeded, but its Pod's own summary does not say pass
        return (_untrusted(s, node, job, w),)
    return job


def job_gate(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, kind: str
) -> tuple[Action, ...] | None:
    """None when this gate passed; otherwise the actions for this cycle."""
    spec = _spec(s, node, kind, recorded_links(snap, node) if kind == "loadtest" else ())

    def create() -> tuple[Action, ...]:
        return (create_job(s, node.name, Decision.CONDITIONS_MET, kind, spec.name, t.render(spec)),)

    out = gate(snap, s, node, spec, "cordon", create)
    if isinstance(out, tuple):
        return out
    return None if kind == "conformance" else _uncordon(snap, s, node, out)


def loadtest_name(snap: Snapshot, s: Settings, node: NodeInfo) -> str:
    """The name of this boot's and cordon's load-test Job of the return."""
    return _spec(s, node, "loadtest", recorded_links(snap, node)).name


def _untrusted(s: Settings, node: NodeInfo, job: JobInfo, w: Words) -> Skip:
    detail = f"job/{job.name} succeeded but is not a pass"
    why = job.result.problem if job.result else "no finished Pod of it left a summary"
    fix = f"{w.short}; {again(s, job.name)}"
    return Skip(node.name, job_stage(job.kind, "unreadable"), f"{detail}: {why}", fix, "WARN")


def conformance_same_boot(node: NodeInfo, c: CordonRecord) -> Skip:
    """A conformance cordon waits for a new boot: its items are fixed on the host, then the
    reboot proves they hold (ip_vs persistent across it)."""
    items = ",".join(node.conformance_failed.items) if node.conformance_failed else c.reason
    detail = f"bootID {node.boot_id} unchanged since the {c.reason} cordon"
    fix = f"fix {items} on the host, then reboot (or uncordon by hand to accept this boot)"
    return Skip(node.name, Decision.CONFORMANCE_SAME_BOOT, detail, fix)


def conformance_return(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Action, ...]:
    """A conformance cordon whose conformance Job passed on a new boot returns (no load test);
    only after `job_gate` passed it (the guard's own Job, its Pod's summary PASS)."""
    job = find_job(snap, _spec(s, node, "conformance").name)
    assert job is not None
    return _uncordon(snap, s, node, job)


def _failed(
    snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo, spec: JobSpec, w: Words, on: str
) -> tuple[Action, ...]:
    """Record the failure on the node once (and a conformance Job's failed items, when its
    summary was read); later cycles only say so."""
    kind = job.kind
    k = keys(s)
    failed = job_stage(job.kind, "failed")
    result_key = k.loadtest_result if kind == "loadtest" else k.conformance_result
    recorded = node.loadtest_result if kind == "loadtest" else node.conformance_result
    if spec.name in recorded:
        detail = f"job/{spec.name} failed{w.gone}"
        return (Skip(node.name, failed, detail, f"{w.short}; {w.retry}"),)
    at = ledger.format_time(snap.now)
    notes: tuple[tuple[str, str], ...] = ((result_key, f"failed job/{spec.name} at {at}"),)
    items = tuple(f.item for f in job.result.failed) if job.result else ()
    if kind == "conformance" and items:
        notes += ((k.conformance_failed, failed_value(at, spec.name, items)),)
    on = on or (f" on {','.join(items)}" if items else "")
    then = f"{w.short}; kubectl -n {spec.namespace} logs job/{spec.name}"
    message = f"{kind} job/{spec.name} failed{on}; {w.event}"
    return (
        Annotate(node.name, failed, node.resource_version, notes, then),
        EmitEvent(node.name, failed, "Warning", "GuardCheckFailed", message),
    )


def _uncordon(snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo) -> tuple[Action, ...]:
    k, at = keys(s), ledger.format_time(snap.now)
    notes: tuple[tuple[str, str], ...] = ((k.returned, f"{at} job/{job.name}"),)
    if s.return_conformance or is_conformance_cordon(node.cordon):  # this boot passed it
        checked = f"job/{_spec(s, node, 'conformance').name}"
        notes += ((k.checked_boot, checked_boot_value(node.boot_id, at, checked)),)
    clear = present(node, (*k.guard_keys, k.cancelled))
    word = job_stage(job.kind, "passed")
    message = f"gpu-node-guard returned the node: job/{job.name} passed"
    return (
        Uncordon(node.name, word, node.resource_version, clear, f"job/{job.name} succeeded", notes),
        EmitEvent(node.name, Decision.RETURNED, "Normal", "GuardReturned", message),
    )


def _spec(s: Settings, node: NodeInfo, kind: str, links: tuple[RecordedLink, ...] = ()) -> JobSpec:
    c = node.cordon
    assert c is not None  # only cordoned nodes reach the Job gates
    key = job_key(node)
    if kind == "conformance":
        return job_spec(s, "conformance", node.name, key, c.reason, conformance_args(s))
    args = loadtest_args(s, node.gpu_capacity, c.xid, c.gpu.pci if c.gpu else "", links)
    return job_spec(s, "loadtest", node.name, key, c.reason, args, gpus=node.gpu_capacity)


# ---- The PCIe links the load test expects (docs/lifecycle.md, "PCIe links") ----------------


def evidence_job_name(node: NodeInfo) -> str | None:
    """The cordon's evidence Job (guard.plan.common `node_evidence_job`: keyed by the cordon
    time), an Xid cordon's or a node trigger's."""
    c = node.cordon
    if c is None or c.at is None or (c.xid is None and c.reason not in ledger.NODE_REASONS):
        return None
    return job_name("evidence", node.name, ledger.format_time(c.at))


def _evidence(snap: Snapshot, node: NodeInfo) -> JobInfo | None:
    name = evidence_job_name(node)
    return None if name is None else find_job(snap, name)


def _evidence_links(snap: Snapshot, node: NodeInfo) -> tuple[RecordedLink, ...]:
    job = _evidence(snap, node)
    if job is None or job.result is None or job.result.state != "read" or foreign(node, job):
        return ()
    return job.result.links


def recorded_links(snap: Snapshot, node: NodeInfo) -> tuple[RecordedLink, ...]:
    return node.pcie_links or _evidence_links(snap, node)


def record_links(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Annotate, ...]:
    if node.pcie_links or not (links := _evidence_links(snap, node)):
        return ()
    then = "the load test checks each GPU's link against it (--expect-link)"
    note = ((keys(s).pcie_links, links_value(links)),)
    return (Annotate(node.name, Decision.PCIE_LINKS, node.resource_version, note, then),)


def evidence_by_hand(node: NodeInfo) -> str:
    """The cordon's evidence by hand: a node trigger's node-wide argv (docs/evidence.md)."""
    c = node.cordon
    if c is not None and c.gpu is None and c.reason in ledger.NODE_REASONS:
        return (
            f"gpu-node-guard evidence collect --node {node.name} --trigger {c.reason} on the node"
        )
    return f"gpu-node-guard render evidence --node {node.name}"


def evidence_rejected(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Action, ...]:
    """The cordon's evidence Job could not run (its Pod refused by the node): said every cycle
    while the Job is there; the cordon stands on its Xid or its node trigger alone."""
    job = _evidence(snap, node)
    if job is None or foreign(node, job) or not (why := rejected(job)):
        return ()
    by_hand = evidence_by_hand(node)
    stays = f"the node stays cordoned; no evidence was read: collect it by hand ({by_hand})"
    return rejected_job(s, node, job, why, stays)


def evidence_running(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Skip, ...]:
    """The load test waits while the evidence Job runs, at most until its deadline has passed
    (a Job still shown running after that has lost its controller: go on without its links)."""
    job = _evidence(snap, node)
    if job is None or job.status != "running" or node.cordon is None or node.cordon.at is None:
        return ()
    if (snap.now - node.cordon.at).total_seconds() > s.evidence_deadline_s + s.cadence_s:
        return ()
    detail = f"job/{job.name} still reads the node; its PCIe links go to the load test"
    return (Skip(node.name, Decision.EVIDENCE_RUNNING, detail, WAIT),)
