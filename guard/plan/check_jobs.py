"""What the Job steps of the checks and the return share: the Jobs of the after-reboot check and
the onboarding gate (one per node and boot: the key holds the bootID), their one budget, and
whether a Job is the guard's, ran, and passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.actions import Action, CreateJob, EmitEvent, Skip
from guard.jobs import JobTemplates
from guard.model import CordonRecord, JobInfo, NodeInfo, Snapshot, Taint
from guard.plan.common import UID as UID
from guard.plan.common import conformance_args, create_job, job_spec, loadtest_args
from guard.settings import Settings
from guard.states import Decision, Reason, job_stage

# Priority of a conformance Job within the cycle's budget (lower first): a node that rebooted
# since its last check serves with the new boot now; a gated node serves nobody yet; a node
# never checked (the first deployment's backlog) has served with this boot all along.
REBOOTED, ONBOARDING, NEVER_CHECKED = 0, 1, 2
JOB_REASONS = (Decision.NEW_BOOT, Decision.ONBOARDING, Decision.NEVER_CHECKED)  # by priority


CONFORMANCE_REASON = "conformance-"  # + the first failed item: the after-reboot check's cordon


def is_conformance_cordon(c: CordonRecord | None) -> bool:
    return c is not None and c.reason.startswith(CONFORMANCE_REASON)


def gate_key(node: NodeInfo) -> str:
    return f"onboard\0{node.boot_id}"


def conformance_job(
    s: Settings, t: JobTemplates, node: NodeInfo, key: str, priority: int
) -> CreateJob:
    """The check's conformance Job; the after-reboot ones expire sooner (boot_check_job_ttl_s)."""
    ttl = s.boot_check_job_ttl_s if priority != ONBOARDING else None
    reason = Decision.ONBOARDING if priority == ONBOARDING else Decision.BOOT_CHECK
    spec = job_spec(s, "conformance", node.name, key, reason, conformance_args(s), ttl_s=ttl)
    return create_job(s, node.name, JOB_REASONS[priority], "conformance", spec.name, t.render(spec))


def burnin_job(s: Settings, t: JobTemplates, node: NodeInfo) -> CreateJob:
    """The onboarding gate's load test: every GPU, the burn-in duration, no recorded links."""
    args = loadtest_args(s, node.gpu_capacity, None, "", duration_s=s.onboarding_burnin_s)
    spec = job_spec(
        s, "loadtest", node.name, gate_key(node), Decision.ONBOARDING, args, gpus=node.gpu_capacity
    )
    return create_job(s, node.name, Decision.ONBOARDING, "loadtest", spec.name, t.render(spec))


def foreign(node: NodeInfo, job: JobInfo) -> str:
    """Why `job` is not the Job the guard made for this node ("" when it is): the node's record
    names another Job, or this name with another uid (deleted and made again by someone else),
    or its template runs another spec than the guard rendered, or its result came from a Pod
    that is not its own (guard.read.job_results: adopted from elsewhere)."""
    rec = node.job_record(job.kind)
    if rec is None or rec.name != job.name:
        made = f"; the guard's last {job.kind} Job here is job/{rec.name}" if rec else ""
        return f"the node has no record that the guard created job/{job.name}{made}"
    if job.uid != rec.uid:
        return (
            f"job/{job.name} has uid {job.uid or '(none)'} but the guard created uid "
            f"{rec.uid}: it was replaced"
        )
    if job.digest != rec.digest:
        return (
            f"job/{job.name} runs another spec (digest {job.digest or '(none)'}) than the "
            f"guard rendered ({rec.digest})"
        )
    if job.result is not None and job.result.foreign:
        return f"its result is not its own: {job.result.problem}"
    return ""


def foreign_job(
    s: Settings, node: NodeInfo, job: JobInfo, word: Reason, why: str, stays: str, claim: str = ""
) -> tuple[Skip, EmitEvent]:
    """A Job found by name that the guard did not make, or (`claim`: its ResourceClaim's name)
    a device load test that ran on a claim or GPU that is not the guard's: never a result; one
    WARN line and one Warning Event (per Job uid) naming it; deleting it (and the claim) lets the
    guard create its own again."""
    fix = (
        f"{stays}; kubectl -n {s.jobs_namespace} delete job {job.name} (the guard creates its "
        "own again)"
    )
    what, said = f"{job.kind} job/{job.name}", f"which it did not create ({why})"
    if claim:
        fix = f"{stays}; delete job and resourceclaim {claim} as docs/runbook.md says"
        said = f"whose pass is not the tainted device's ({why})"
    message = f"gpu-node-guard ignores {what}, {said}; {stays}"
    detail = f"{what} is not the guard's: {why}"
    return _warned(node, job, word, detail, fix, "GuardForeignJob", message)


def rejected(job: JobInfo) -> str:
    """Why the node's kubelet refused to run the Job's Pod ("" when it did not): the Job could
    not run, which is neither a pass nor a failure of its check (guard.read.job_results)."""
    r = job.result
    return r.problem if r is not None and r.state == "rejected" else ""


def rejected_job(
    s: Settings, node: NodeInfo, job: JobInfo, why: str, stays: str
) -> tuple[Skip, EmitEvent]:
    """A Job whose Pod the node refused (OutOfcpu, NodeAffinity, …), for every kind alike: one
    WARN line and one Warning Event (per Job uid); nothing is recorded, so once the Job is
    deleted (by a person, or at its ttlSecondsAfterFinished) the guard creates it again."""
    fix = (
        f"{stays}; give the node what the kubelet names (free CPU or memory, the GPU resource, "
        f"the GPU-node label), then kubectl -n {s.jobs_namespace} delete job {job.name} (the "
        "guard creates it again)"
    )
    detail = f"{job.kind} job/{job.name}: {why}"
    message = f"gpu-node-guard's {job.kind} job/{job.name} could not run: {why}; {stays}"
    return _warned(node, job, Decision.JOB_REJECTED, detail, fix, "GuardJobRejected", message)


def _warned(
    node: NodeInfo, job: JobInfo, word: Reason, detail: str, fix: str, event: str, message: str
) -> tuple[Skip, EmitEvent]:
    """One WARN line and one Warning Event, once per Job uid (the Event's incident)."""
    incident = f"{job.name} {job.uid}"
    return (
        Skip(node.name, word, detail, fix, "WARN"),
        EmitEvent(node.name, word, "Warning", event, message, incident=incident),
    )


def unreadable_job(s: Settings, node: NodeInfo, job: JobInfo) -> Skip:
    """A Job whose status cannot be read: WARN, how to look at it and to run it again."""
    fix = again(s, job.name, f"kubectl -n {s.jobs_namespace} get job {job.name} -o yaml")
    word, detail = job_stage(job.kind, "unreadable"), f"job/{job.name}: {job.problem}"
    return Skip(node.name, word, detail, fix, "WARN")


def again(s: Settings, job: str, look: str = "", retry: str = "run it again") -> str:
    """How to look at a Job (its log by default) and have the guard run it again."""
    ns = s.jobs_namespace
    look = look or f"kubectl -n {ns} logs job/{job}"
    return f"{look}; to {retry}: kubectl -n {ns} delete job {job}"


def find_job(snap: Snapshot, name: str) -> JobInfo | None:
    return next((j for j in snap.jobs if j.name == name), None)


def gate_taint(node: NodeInfo, s: Settings) -> Taint | None:
    """The onboarding gate's taint on the node, exactly (key, value and effect), if any."""
    return next((t for t in node.taints if (t.key, t.value, t.effect) == s.onboarding_gate), None)


def hardware_xid(snap: Snapshot, node: NodeInfo) -> str:
    """``xid-79 on gpu4`` when Prometheus shows a hardware Xid on the node now, else ""."""
    found = [g for g in snap.prom.hardware_xids if g.node == node.name]
    return ", ".join(f"xid-{g.value} on gpu{g.gpu}" for g in found)


@dataclass(frozen=True, slots=True)
class Wanted:
    """A conformance Job a node waits for; created when the cycle's budget reaches it."""

    priority: int
    job: CreateJob


@dataclass(slots=True)
class Scan:
    """What one cycle's scan of a check found, node by node; the plan is built from it after."""

    actions: dict[str, list[Action]] = field(default_factory=dict)  # per node, in node order
    wanted: dict[str, Wanted] = field(default_factory=dict)
    running: int = 0  # its conformance Jobs that run now (the shared budget)


def passed(job: JobInfo) -> bool | None:
    """True: passed; False: failed with a summary read; None: finished but not to be trusted.
    Job success alone is never a pass: the Pod's own summary is (docs/lifecycle.md, "Job
    results the guard reads")."""
    r = job.result
    if job.status == "succeeded":
        return True if r is not None and r.state == "read" and r.passed else None
    return False if r is not None and r.state == "read" and not r.passed else None
