"""The return check's Job gates, in order: conformance (optional), then the load test, then
the uncordon that records the return.

One Job of each kind per boot and cordon; running → wait; unreadable → wait (WARN); failed →
record it on the node once and stay cordoned; succeeded → the next gate.
"""

from __future__ import annotations

from guard import ledger
from guard.actions import Action, Annotate, CreateJob, EmitEvent, Skip, Uncordon
from guard.jobs import JobSpec, JobTemplates
from guard.model import JobInfo, NodeInfo, Snapshot
from guard.plan.common import conformance_args, job_spec, keys, loadtest_args, present
from guard.settings import Settings

WAIT = "checked again next cycle"


def job_key(node: NodeInfo) -> str:
    """One Job of each kind per boot and cordon. A GPU reset keeps the bootID, so its reset-done
    note joins the key; the cordon time keeps a later cordon in the same boot from finding the
    Jobs of an earlier one (reset-done stays: only a person removes it)."""
    at = node.cordon.at if node.cordon else None
    return "\0".join((node.boot_id, node.reset_done or "", ledger.format_time(at) if at else ""))


def job_gate(
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
        return _failed(snap, node, kind, spec, result_key)
    if kind == "conformance":
        return None
    return _uncordon(snap, s, node, job)


def _failed(
    snap: Snapshot, node: NodeInfo, kind: str, spec: JobSpec, result_key: str
) -> tuple[Action, ...]:
    """Record the failure on the node once; later cycles only say so."""
    recorded = node.loadtest_result if kind == "loadtest" else node.conformance_result
    if spec.name in recorded:
        return (
            Skip(
                node.name,
                f"{kind}-failed",
                f"job/{spec.name} failed on this boot",
                "stays cordoned; read the job log, fix, reboot or reset",
            ),
        )
    value = f"failed job/{spec.name} at {ledger.format_time(snap.now)}"
    return (
        Annotate(
            node.name,
            f"{kind}-failed",
            node.resource_version,
            ((result_key, value),),
            f"stays cordoned; kubectl -n {spec.namespace} logs job/{spec.name}",
        ),
        EmitEvent(
            node.name,
            f"{kind}-failed",
            "Warning",
            "GuardCheckFailed",
            f"{kind} job/{spec.name} failed; node stays cordoned",
        ),
    )


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
    key = job_key(node)
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
