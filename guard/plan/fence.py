"""The host fence of a cordon's GPU (`fence_gpu`): compute mode PROHIBITED, set and read back by
the guard's fence Job beside the node cordon, kept per boot (a reboot resets it), lifted only for
the return's load test. Each case and its word: docs/isolation.md, "The host fence".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from guard import ledger
from guard.actions import Action, Annotate, CreateJob, EmitEvent, Skip, Uncordon
from guard.codec.check_records import fence_value
from guard.codec.records import UNKNOWN_BOOT
from guard.jobs import JobSpec, JobTemplates
from guard.model import GpuRef, GpuSample, JobInfo, NodeInfo, Snapshot
from guard.plan import fence_audit
from guard.plan.check_jobs import (
    find_job,
    foreign,
    foreign_job,
    passed,
    rejected,
    rejected_job,
    unreadable_job,
)
from guard.plan.common import WAIT, create_job, fence_args, job_spec, keys
from guard.settings import Settings
from guard.states import Decision, Reason

_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z", re.ASCII)
_FENCE_WORDS = frozenset(d for d in Decision if d.value.startswith("fence"))


def fenced_gpu(s: Settings, node: NodeInfo) -> GpuRef | None:
    """The cordon's GPU when the fence applies to it: the setting on, a PCI address and a UUID."""
    c = node.cordon
    if not s.fence_gpu or c is None or c.gpu is None or c.at is None:
        return None
    return None if c.gpu.pci == ledger.UNKNOWN_PCI or not _UUID.match(c.gpu.uuid) else c.gpu


def boot(node: NodeInfo) -> str:
    """The boot a fence record names; a node without a bootID proves no reboot."""
    return node.boot_id or UNKNOWN_BOOT


def holds(node: NodeInfo) -> bool:
    """The fence is in force now: fenced in this boot."""
    f = node.fence
    return f is not None and f.state == "fenced" and f.boot_id == boot(node)


def _key(node: NodeInfo, mode: str) -> str:
    """One set Job per boot and cordon (and per lift before it); one lift Job per fence."""
    assert node.cordon is not None and node.cordon.at is not None
    f = node.fence
    after = ledger.format_time(f.at) if f is not None and f.boot_id == boot(node) else ""
    return _job_key(mode, boot(node), ledger.format_time(node.cordon.at), after)


def _job_key(mode: str, boot_id: str, cordon_at: str, after: str) -> str:
    return "\0".join((mode, boot_id, cordon_at, after))


def at_cordon(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, g: GpuSample, reason: Reason
) -> tuple[Action, ...]:
    """The fence Job in the cordon's own cycle, beside its evidence Job: the Job `keep` finds by
    name the next cycle (same boot, the cordon's time, no record yet)."""
    if not s.fence_gpu or g.pci == ledger.UNKNOWN_PCI or not _UUID.match(g.uuid):
        return ()
    key = _job_key("set", boot(node), ledger.format_time(snap.now), "")
    spec = job_spec(s, "fence", node.name, key, reason, fence_args(s, "set", g.pci, g.uuid))
    return (create_job(s, node.name, Decision.FENCE_SET, "fence", spec.name, t.render(spec)),)


def _spec(s: Settings, node: NodeInfo, gpu: GpuRef, mode: str) -> JobSpec:
    assert node.cordon is not None
    args = fence_args(s, mode, gpu.pci, gpu.uuid)
    return job_spec(s, "fence", node.name, _key(node, mode), node.cordon.reason, args)


def returning(decisions: Iterable[Action]) -> bool:
    """The return check's decisions for a node reach its load test, the lift or the uncordon,
    or already speak of the fence (the lift gate waiting for this boot's set Job)."""
    return any(
        isinstance(a, Uncordon)
        or (isinstance(a, CreateJob) and a.job_kind == "loadtest")
        or a.reason == Decision.LOADTEST_RUNNING
        or a.reason in _FENCE_WORDS  # the lift's steps among them
        for a in decisions
    )


def keep(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, decisions: tuple[Action, ...]
) -> tuple[Action, ...]:
    """The fence while the node waits (docs/isolation.md); `decisions`: the return check's."""
    gpu = fenced_gpu(s, node)
    if gpu is None or returning(decisions):
        return ()
    lifted = lifted_behind(snap, node)
    if holds(node) and lifted is None:
        return ()
    said = _lifted_said(snap, s, node, lifted) if lifted is not None else ()
    waits = lifted is not None and lifted.status == "running"  # a set Job beside it may end first
    return said if waits else said + _fence_again(snap, s, t, node, gpu)


def lifted_behind(snap: Snapshot, node: NodeInfo) -> JobInfo | None:
    """The newest foreign `fence lift` (guard.plan.fence_audit) running, or ended (not made: one
    made first may run last) since the Job the `fenced` record read back was made (gone: since
    the record), while that record holds: the host's compute mode may be Default again."""
    f = node.fence
    if f is None or not holds(node):
        return None
    made = next((j.created for j in snap.jobs if f"job/{j.name}" == f.job), None) or f.at
    found = [
        j
        for j in snap.jobs
        if j.kind == "fence"
        and j.node == node.name
        and j.fence_mode == "lift"
        and j.created is not None
        and (j.status == "running" or max(j.created, j.ended or j.created) >= made)
        and fence_audit.why_foreign(node, j)
    ]
    return max(found, key=lambda j: (j.created or made, j.name), default=None)


def _lifted_said(snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo) -> tuple[Action, ...]:
    """One WARN each cycle; the Warning Event once per Job (the audit's Event of that Job)."""
    r = job.result
    read = (
        "its read-back says lifted (compute mode Default)"
        if r is not None and r.state == "read" and r.passed
        else f"its outcome: {_why(job) if job.status != 'running' else 'still running'}"
    )
    why = f"{fence_audit.why_foreign(node, job)}; {read}"
    nxt = "the node stays cordoned; the guard fences the GPU again " + (
        "once that Job ended" if job.status == "running" else "now"
    )
    warn, event = foreign_job(s, node, job, Decision.FENCE_LIFTED_FOREIGN, why, nxt)
    said = f"gpu-fence says fenced, but lift job/{job.name} is not the guard's: {why}"
    warn = replace(warn, detail=said)
    posted = event.name in {e.name for e in snap.events}
    return (warn,) if posted else (warn, event)


def _fence_again(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, gpu: GpuRef
) -> tuple[Action, ...]:
    f = node.fence
    if f is not None and f.state == "gpu-absent" and f.boot_id == boot(node):
        return ()
    if off_the_bus(node, gpu) and find_job(snap, _spec(s, node, gpu, "set").name) is None:
        detail = f"the cordon's evidence Job read no PCIe link of GPU {gpu}: off the bus"
        nxt = "no fence Job in this boot; the node cordon stays the isolation"
        return (Skip(node.name, Decision.FENCE_GPU_ABSENT, detail, nxt),)
    again = f is not None and f.state == "fenced"
    return _job(snap, s, t, node, gpu, Decision.FENCE_REAPPLY if again else Decision.FENCE_SET)


def _job(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, gpu: GpuRef, made: Reason
) -> tuple[Action, ...]:
    """This boot's set or lift Job (`made`: the word its create says): not the guard's → WARN;
    none → create it; else its step."""
    mode = "lift" if made == Decision.FENCE_LIFT else "set"
    spec = _spec(s, node, gpu, mode)
    job = find_job(snap, spec.name)
    if job is not None and (why := foreign(node, job)):
        return foreign_job(s, node, job, Decision.FENCE_FOREIGN, why, _MODES[mode].stays)
    if job is None:
        return (create_job(s, node.name, made, "fence", spec.name, t.render(spec)),)
    return _step(snap, s, node, gpu, job, mode)


def off_the_bus(node: NodeInfo, gpu: GpuRef) -> bool:
    """In the cordon's boot, the evidence Job recorded the links of the GPUs it could read and
    this one is not among them (a GPU that fell off the bus has no link to read)."""
    c = node.cordon
    same_boot = c is not None and c.boot_id != "" and c.boot_id == node.boot_id
    return same_boot and bool(node.pcie_links) and all(x.pci != gpu.pci for x in node.pcie_links)


@dataclass(frozen=True, slots=True)
class _Mode:
    """What a set or a lift Job's steps say (`_step`)."""

    stays: str
    running: Decision
    state: str  # the record its read-back writes
    recorded: Decision
    event: str
    done: str  # the Event: what was read back
    failed: Decision
    fix: str  # {gpu} {uuid} {ns} {job}
    level: Literal["Normal", "Warning"] = "Normal"  # the Event of what was read back


_MODES = {
    "set": _Mode(
        "the node stays cordoned; its GPU is not fenced",
        Decision.FENCE_RUNNING,
        "fenced",
        Decision.FENCED,
        "GuardFenced",
        "fenced GPU {gpu} on the host (compute mode Prohibited, read back); the node stays "
        "cordoned",
        Decision.FENCE_FAILED,
        "the node stays cordoned; its GPU is not fenced; kubectl -n {ns} logs job/{job}; to try "
        "again: kubectl -n {ns} delete job {job}",
    ),
    "lift": _Mode(
        "the node stays cordoned and its GPU fenced",
        Decision.FENCE_LIFT_RUNNING,
        "lifted",
        Decision.FENCE_LIFTED,
        "GuardFenceLifted",
        "lifted the fence of GPU {gpu} (compute mode Default, read back) for the return's load "
        "test; the node stays cordoned until it passes",
        Decision.FENCE_LIFT_FAILED,
        "stays cordoned and fenced; on the host: nvidia-smi -i {uuid} -c DEFAULT, then "
        "kubectl -n {ns} delete job {job}",
    ),
}
# A set Job that found the GPU off the bus: recorded, the node cordon stays the isolation.
_ABSENT = replace(
    _MODES["set"],
    state="gpu-absent",
    recorded=Decision.FENCE_GPU_ABSENT,
    event="GuardFenceGpuAbsent",
    done="could not fence GPU {gpu}: it is off the bus; the node cordon stays the isolation",
    level="Warning",
)


def _step(
    snap: Snapshot, s: Settings, node: NodeInfo, gpu: GpuRef, job: JobInfo, mode: str
) -> tuple[Action, ...]:
    """Where a set or lift Job of this boot is: waited for, recorded, or said to have failed."""
    m = _MODES[mode]
    if why := rejected(job):
        return rejected_job(s, node, job, why, m.stays)
    if job.status == "running":
        return (Skip(node.name, m.running, f"job/{job.name} on GPU {gpu}", WAIT),)
    if job.status == "unreadable":
        return (unreadable_job(s, node, job),)
    words = {"gpu": gpu, "uuid": gpu.uuid, "ns": s.jobs_namespace, "job": job.name}
    if passed(job) or (mode == "set" and _outcome(job) == "gpu-absent"):
        read = m if passed(job) else _ABSENT
        return _record(snap, s, node, job, read, f"gpu-node-guard {read.done.format(**words)}")
    return (
        Skip(node.name, m.failed, f"job/{job.name}: {_why(job)}", m.fix.format(**words), "WARN"),
    )


def lift_gate(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, loadtest: str
) -> tuple[Action, ...] | None:
    """None when nothing is to lift before the load test `loadtest` (its Job name); otherwise
    this cycle's actions (docs/isolation.md, "The host fence")."""
    gpu = fenced_gpu(s, node)
    if gpu is None:
        return None
    if not holds(node):
        return _set_pending(snap, s, node, gpu)
    if find_job(snap, loadtest) is not None or loadtest in node.loadtest_result:
        return None  # that load test's result decides; the fence stays while the node waits
    return _job(snap, s, t, node, gpu, Decision.FENCE_LIFT)


def _set_pending(
    snap: Snapshot, s: Settings, node: NodeInfo, gpu: GpuRef
) -> tuple[Action, ...] | None:
    """This boot's set Job, made while the node waited, may have fenced the GPU but is not
    recorded yet: running → wait; read back → record it (the lift comes next); off the bus →
    record that. Anything else fenced nothing that is known: the load test goes on (a GPU
    fenced after all fails it, and the node stays cordoned)."""
    job = find_job(snap, _spec(s, node, gpu, "set").name)
    if job is None or foreign(node, job):
        return None
    known = job.status == "running" or passed(job) or _outcome(job) == "gpu-absent"
    return _step(snap, s, node, gpu, job, "set") if known else None


def _record(
    snap: Snapshot, s: Settings, node: NodeInfo, job: JobInfo, m: _Mode, message: str
) -> tuple[Action, ...]:
    value = fence_value(m.state, boot(node), ledger.format_time(snap.now), job.name)
    nxt = "the load test next cycle" if m.state == "lifted" else "the node stays cordoned"
    return (
        Annotate(node.name, m.recorded, node.resource_version, ((keys(s).fence, value),), nxt),
        EmitEvent(
            node.name, m.recorded, m.level, m.event, message, incident=f"{job.name} {job.uid}"
        ),
    )


def _outcome(job: JobInfo) -> str:
    r = job.result
    return r.failed[0].item if r is not None and r.state == "read" and r.failed else ""


def _why(job: JobInfo) -> str:
    r = job.result
    if r is None:
        return f"{job.status}, no finished Pod of it left a summary"
    if r.state != "read":
        return r.problem
    found = r.failed[0] if r.failed else None
    return f"{found.item}: {found.why}" if found else f"{job.status} but its summary says pass"
