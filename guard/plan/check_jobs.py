"""What the after-reboot check and the onboarding gate share: their Jobs' names, the node facts
they wait for, and the one budget of conformance Jobs both draw from.

One conformance Job per node and boot for each (the key holds the bootID, so a reboot starts a
new one and a Job is never made twice for a boot); the gate's burn-in load test the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.actions import CreateJob
from guard.jobs import JobTemplates
from guard.model import CordonRecord, JobInfo, NodeInfo, Snapshot, Taint
from guard.plan.common import conformance_args, job_spec, loadtest_args
from guard.settings import Settings

# Priority of a conformance Job within the cycle's budget (lower first): a node that rebooted
# since its last check serves with the new boot now; a gated node serves nobody yet; a node
# never checked (the first deployment's backlog) has served with this boot all along.
REBOOTED, ONBOARDING, NEVER_CHECKED = 0, 1, 2
JOB_REASONS = {REBOOTED: "new-boot", ONBOARDING: "onboarding", NEVER_CHECKED: "never-checked"}


CONFORMANCE_REASON = "conformance-"  # + the first failed item: the after-reboot check's cordon


def is_conformance_cordon(c: CordonRecord | None) -> bool:
    return c is not None and c.reason.startswith(CONFORMANCE_REASON)


def boot_key(node: NodeInfo) -> str:
    return f"boot\0{node.boot_id}"


def gate_key(node: NodeInfo) -> str:
    return f"onboard\0{node.boot_id}"


def conformance_job(
    s: Settings, t: JobTemplates, node: NodeInfo, key: str, priority: int
) -> CreateJob:
    """The check's conformance Job; the after-reboot ones expire sooner (boot_check_job_ttl_s)."""
    ttl = s.boot_check_job_ttl_s if priority != ONBOARDING else None
    reason = "onboarding" if priority == ONBOARDING else "boot-check"
    spec = job_spec(s, "conformance", node.name, key, reason, conformance_args(s), ttl_s=ttl)
    return CreateJob(node.name, JOB_REASONS[priority], "conformance", spec.name, t.render(spec))


def burnin_job(s: Settings, t: JobTemplates, node: NodeInfo) -> CreateJob:
    """The onboarding gate's load test: every GPU, the burn-in duration, no recorded links."""
    args = loadtest_args(s, node.gpu_capacity, None, "", duration_s=s.onboarding_burnin_s)
    spec = job_spec(s, "loadtest", node.name, gate_key(node), "onboarding", args,
                    gpus=node.gpu_capacity)  # fmt: skip
    return CreateJob(node.name, "onboarding", "loadtest", spec.name, t.render(spec))


def find_job(snap: Snapshot, name: str) -> JobInfo | None:
    return next((j for j in snap.jobs if j.name == name), None)


def gate_taint(node: NodeInfo, s: Settings) -> Taint | None:
    """The onboarding gate's taint on the node, exactly (key, value and effect), if any."""
    gate = s.onboarding_gate
    if gate is None:
        return None
    return next((t for t in node.taints if (t.key, t.value, t.effect) == gate), None)


def hardware_xid(snap: Snapshot, node: NodeInfo) -> str:
    """``xid-79 on gpu4`` when Prometheus shows a hardware Xid on the node now, else ""."""
    found = [g for g in snap.prom.hardware_xids if g.node == node.name]
    return ", ".join(f"xid-{g.value} on gpu{g.gpu}" for g in found)


def is_gpu_node(node: NodeInfo) -> bool:
    return node.gpu_capacity > 0


@dataclass(frozen=True, slots=True)
class Wanted:
    """A conformance Job a node waits for; created when the cycle's budget reaches it."""

    priority: int
    job: CreateJob


def passed(job: JobInfo) -> bool | None:
    """True: passed; False: failed with a summary read; None: finished but not to be trusted
    (its result unreadable, or failed without a result). Only for finished Jobs.

    A succeeded Job whose Pod is gone (no result) passed: the exit status is the contract
    (exit 0 exactly when no item FAILed, docs/conformance.md).
    """
    r = job.result
    if job.status == "succeeded":
        return True if r is None or (r.state == "read" and r.passed) else None
    return False if r is not None and r.state == "read" and not r.passed else None
