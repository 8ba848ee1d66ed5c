"""After every reboot (serving → check): conformance on each new boot of a GPU node; a FAIL is a
candidate of the isolation check's one pick, cordoned `conformance-<item>`. Each case:
docs/lifecycle.md, "After every reboot".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard import ledger
from guard.actions import Action, CreateJob, RecordBoot, Skip
from guard.codec.check_records import checked_boot_value, failed_value
from guard.jobs import JobTemplates
from guard.model import JobInfo, NodeInfo, Snapshot
from guard.plan.check_jobs import (
    NEVER_CHECKED,
    REBOOTED,
    Scan,
    Wanted,
    again,
    conformance_job,
    find_job,
    foreign,
    foreign_job,
    gate_taint,
    hardware_xid,
    passed,
    rejected,
    rejected_job,
)
from guard.plan.common import WAIT, keys, node_cordon
from guard.settings import Settings
from guard.states import Decision, Reason, conformance_reason


@dataclass(frozen=True, slots=True)
class Failed:
    """A node whose conformance Job failed on `job.result.failed`: a cordon candidate."""

    node: NodeInfo
    job: JobInfo

    @property
    def items(self) -> tuple[str, ...]:
        return tuple(x.item for x in self.job.result.failed) if self.job.result else ()

    @property
    def reason(self) -> Reason:
        return conformance_reason(self.items[0])

    @property
    def what(self) -> str:
        return f"conformance failed on {','.join(self.items)} (job/{self.job.name})"


@dataclass(slots=True)
class BootChecks(Scan):
    failed: list[Failed] = field(default_factory=list)


def scan(snap: Snapshot, s: Settings, t: JobTemplates, decided: frozenset[str]) -> BootChecks:
    """Every node's decision; Jobs and cordons are handed out by `guard.plan.checks`.
    `decided`: nodes the return or isolation check acted on this cycle, left to them."""
    out = BootChecks()
    if not s.boot_check:
        return out
    k = keys(s)
    for node in snap.nodes:
        if node.unreadable or node.gpu_capacity <= 0 or node.has(k.reason) or node.name in decided:
            continue
        checked = node.checked_boot is not None and node.checked_boot.boot_id == node.boot_id
        if checked or gate_taint(node, s) is not None:  # a gated node: guard.plan.onboarding
            continue
        if found := _node(snap, s, t, node, out):
            out.actions[node.name] = found
    return out


def _node(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, out: BootChecks
) -> list[Action]:
    if not node.boot_id:
        detail = "the node reports no status.nodeInfo.bootID: no boot to check"
        return [Skip(node.name, Decision.BOOT_CHECK_NO_BOOT_ID, detail, WAIT)]
    priority = REBOOTED if node.checked_boot is not None else NEVER_CHECKED
    want = conformance_job(s, t, node, f"boot\0{node.boot_id}", priority)
    job = find_job(snap, want.name)
    if job is not None and (why := foreign(node, job)):
        return list(
            foreign_job(s, node, job, Decision.BOOT_CHECK_FOREIGN, why, "no result is taken")
        )
    if job is not None and (why := rejected(job)):
        return list(rejected_job(s, node, job, why, "no cordon; this boot stays unchecked"))
    if job is None:
        return _unstarted(snap, node, want, priority, out)
    if job.status == "running":
        out.running += 1
        detail = f"job/{job.name} on {_boot(node)}"
        return [Skip(node.name, Decision.BOOT_CHECK_RUNNING, detail, WAIT)]
    verdict = passed(job) if job.status != "unreadable" else None
    if verdict is None:
        return [_unreadable(s, node, job)]
    if not verdict:
        if node.unschedulable:  # the policy would refuse the cordon (422) every cycle
            return [_person_cordon(node, job)]
        out.failed.append(Failed(node, job))
        return []
    return _record(snap, s, node, job)


def _unstarted(
    snap: Snapshot, node: NodeInfo, want: CreateJob, priority: int, out: BootChecks
) -> list[Action]:
    if node.unschedulable:  # a person's cordon: checked after the uncordon
        return []
    xid = hardware_xid(snap, node)
    if xid:
        detail = f"{_boot(node)} not checked; {xid}: the isolation check decides first"
        return [Skip(node.name, Decision.BOOT_CHECK_DEFERRED, detail, WAIT)]
    out.wanted[node.name] = Wanted(priority, want)
    return []


def _person_cordon(node: NodeInfo, job: JobInfo) -> Skip:
    items = ",".join(f.item for f in job.result.failed) if job.result else ""
    detail = (
        f"conformance failed on {items or 'its items'} (job/{job.name}, {_boot(node)}) "
        "but the node is cordoned by someone else: not the guard's to cordon"
    )
    then = "a person's cordon stays theirs; after their uncordon the guard cordons it"
    return Skip(node.name, Decision.ALREADY_CORDONED, detail, then)


def _boot(node: NodeInfo) -> str:
    before = f" (checked: {node.checked_boot.boot_id})" if node.checked_boot else " (never checked)"
    return f"boot {node.boot_id}{before}"


def _unreadable(s: Settings, node: NodeInfo, job: JobInfo) -> Skip:
    why = job.problem or (job.result.problem if job.result else "") or "no summary was read"
    fix = again(s, job.name, retry="check again")
    detail = f"job/{job.name} {job.status}; its result cannot be trusted: {why}"
    return Skip(node.name, Decision.BOOT_CHECK_UNREADABLE, detail, fix, "WARN")


def _record(snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo) -> list[Action]:
    if node.unschedulable:  # a person cordoned it since; recorded after the uncordon
        return []
    value = checked_boot_value(node.boot_id, ledger.format_time(snap.now), f"job/{job.name}")
    record = ((keys(s).checked_boot, value),)
    then = "checked again after the next reboot"
    word = Decision.BOOT_CHECK_PASSED
    version = node.resource_version
    return [RecordBoot(node.name, word, version, node.boot_id, record, then)]


def conformance_cordon(snap: Snapshot, s: Settings, f: Failed) -> tuple[Action, ...]:
    """Cordon `conformance-<first failed item>`, the failed items on the node, one Event."""
    node, at = f.node, ledger.format_time(snap.now)
    assert f.job.result is not None  # a candidate failed on items it names
    found = "; ".join(f"{x.item} ({x.why})" if x.why else x.item for x in f.job.result.failed)
    message = (
        f"cordoned by gpu-node-guard: conformance failed on boot {node.boot_id}: {found}; "
        f"job/{f.job.name}"
    )
    failed = ((keys(s).conformance_failed, failed_value(at, f.job.name, f.items)),)
    then = f"fix {','.join(f.items)}, then reboot"
    return node_cordon(snap, s, node, f.reason, ("-", 0, then, ""), message, failed)
