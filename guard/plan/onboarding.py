"""The onboarding gate (onboard → serving): a node that registered with the gate taint serves only
after conformance and a burn-in load test passed on this boot; then the guard removes exactly
that taint. Each step and word: docs/onboarding.md.
"""

from __future__ import annotations

from guard import ledger
from guard.actions import Action, Annotate, EmitEvent, RemoveTaint, Skip
from guard.codec.check_records import checked_boot_value, failed_value
from guard.jobs import JobTemplates
from guard.model import JobInfo, NodeInfo, Snapshot, Taint
from guard.plan.check_jobs import (
    ONBOARDING,
    Scan,
    Wanted,
    again,
    burnin_job,
    conformance_job,
    find_job,
    foreign,
    foreign_job,
    gate_key,
    gate_taint,
    hardware_xid,
    passed,
    rejected,
    rejected_job,
)
from guard.plan.common import WAIT, keys, present
from guard.plan.triggers import gpu_short
from guard.settings import Settings
from guard.states import Decision

STAYS = "the onboarding taint stays"


def scan(snap: Snapshot, s: Settings, t: JobTemplates, decided: frozenset[str]) -> Scan:
    """`decided`: nodes the return or isolation check acted on this cycle, left to them."""
    out = Scan()
    for node in snap.nodes:
        taint = None if node.unreadable or node.name in decided else gate_taint(node, s)
        if taint is not None and (found := _node(snap, s, t, node, taint, out)):
            out.actions[node.name] = found
    return out


def _waiting(node: NodeInfo, s: Settings, snap: Snapshot) -> list[Action]:
    k = keys(s)
    why = ""
    if node.has(k.reason):
        why = f"under the guard's cordon ({node.annotation(k.reason)}): the return check first"
    elif not node.ready:
        why = "node Ready condition is not True"
    elif node.gpu_capacity == 0 or node.gpu_allocatable != node.gpu_capacity:
        why = (
            f"GPUs not all advertised yet (capacity={node.gpu_capacity} "
            f"allocatable={node.gpu_allocatable})"
        )
    elif xid := hardware_xid(snap, node):
        why = f"{xid} on the node"
    if why:
        return [Skip(node.name, Decision.ONBOARDING_WAITING, why, WAIT)]
    want = gpu_short.expectations(snap, s).get(node.name)
    if want is not None and node.gpu_capacity < want[1]:
        cls, count = want
        detail = f"{node.gpu_capacity} GPUs, class {cls.selector} expects {count}"
        fix = f"{STAYS}; find the missing GPU on the host: lspci -nn -k -d 10de:"
        return [Skip(node.name, Decision.ONBOARDING_GPU_SHORT, detail, fix, "WARN")]
    return []


def _node(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, taint: Taint, out: Scan
) -> list[Action]:
    if not node.boot_id:
        detail = "the node reports no status.nodeInfo.bootID: the gate cannot tell its boots"
        return [Skip(node.name, Decision.ONBOARDING_NO_BOOT_ID, detail, STAYS, "WARN")]
    if waiting := _waiting(node, s, snap):
        return waiting
    check, burn = conformance_job(s, t, node, gate_key(node), ONBOARDING), burnin_job(s, t, node)
    failed = node.onboarding_failed
    if failed is not None and failed.job in (f"job/{check.name}", f"job/{burn.name}"):
        detail = f"{failed.job} failed on {','.join(failed.items)} (boot {node.boot_id})"
        job_name = failed.job.removeprefix("job/")
        fix = (
            f"fix the failed checks, then reboot the node; or, to check again in this boot: "
            f"kubectl -n {s.jobs_namespace} delete job {job_name} && kubectl annotate node "
            f"{node.name} {keys(s).onboarding_failed}-"
        )
        return [Skip(node.name, Decision.ONBOARDING_FAILED, detail, f"{STAYS}; {fix}")]
    for want in (check, burn):
        job = find_job(snap, want.name)
        if job is not None and (why := foreign(node, job)):
            return list(foreign_job(s, node, job, Decision.ONBOARDING_FOREIGN, why, STAYS))
        if job is not None and (why := rejected(job)):
            return list(rejected_job(s, node, job, why, STAYS))
        if job is None:
            if want is check:
                out.wanted[node.name] = Wanted(ONBOARDING, check)
                return []
            return [burn]
        if job.status == "running":
            out.running += want is check
            return [Skip(node.name, Decision.ONBOARDING_RUNNING, f"job/{job.name}", WAIT)]
        verdict = passed(job) if job.status != "unreadable" else None
        if job.status != "failed" and verdict is None:
            return [_unreadable(s, node, job)]
        if not verdict:
            return _fail(snap, s, node, job)
    return _admit(snap, s, node, taint, check.name)


def _unreadable(s: Settings, node: NodeInfo, job: JobInfo) -> Skip:
    why = job.problem or (job.result.problem if job.result else "")
    fix = f"{STAYS}; {again(s, job.name)}"
    return Skip(node.name, Decision.ONBOARDING_UNREADABLE, f"job/{job.name}: {why}", fix, "WARN")


def _fail(snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo) -> list[Action]:
    r = job.result
    findings = r.failed if r is not None and r.state == "read" else ()
    items = tuple(f.item for f in findings)
    unread = f" (its result: {r.problem})" if r and r.state == "unreadable" else ""
    value = failed_value(ledger.format_time(snap.now), job.name, items or ("unknown",))
    found = "; ".join(f"{f.item} ({f.why})" if f.why else f.item for f in findings)
    message = (
        f"gpu-node-guard keeps the onboarding taint: {job.kind} job/{job.name} failed"
        f"{': ' + found if found else unread} (boot {node.boot_id})"
    )
    note = ((keys(s).onboarding_failed, value),)
    word = Decision.ONBOARDING_FAILED
    then = f"{STAYS}; kubectl -n {s.jobs_namespace} logs job/{job.name}"
    return [
        Annotate(node.name, word, node.resource_version, note, then),
        EmitEvent(node.name, word, "Warning", "GuardOnboardingFailed", message, incident=job.name),
    ]


def _admit(snap: Snapshot, s: Settings, node: NodeInfo, taint: Taint, check: str) -> list[Action]:
    k = keys(s)
    record = checked_boot_value(node.boot_id, ledger.format_time(snap.now), f"job/{check}")
    keep = tuple(x for x in node.taints if x != taint)
    dns = "" if s.conformance_allowed_dns else "; DNS upstreams not checked (no allowed list set)"
    message = (
        f"gpu-node-guard removed the onboarding taint {s.onboarding_taint}: "
        f"conformance and the burn-in passed on boot {node.boot_id}{dns}"
    )
    notes = ((k.checked_boot, record),)
    clear = present(node, (k.onboarding_failed,))
    version = node.resource_version
    boot = node.boot_id
    word = Decision.ONBOARDING_PASSED
    return [
        RemoveTaint(node.name, word, version, taint, keep, boot, notes, clear),
        EmitEvent(node.name, Decision.ONBOARDED, "Normal", "GuardOnboarded", message, boot),
    ]
