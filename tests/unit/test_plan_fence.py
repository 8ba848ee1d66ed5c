"""The host fence of a cordon's GPU from facts (guard/plan/fence.py): set while the node waits,
recorded per boot, set again after a reboot, lifted only when the return's load test is next and
never before, and the uncordon only after that load test passed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from guard.actions import Action, Annotate, CreateJob, EmitEvent, Skip, Uncordon
from guard.generate.policies import argv
from guard.ledger import format_time, parse_time
from guard.model import Finding, GuardEvent, JobInfo, JobResult, NodeInfo
from guard.plan.isolation import plan_isolation
from guard.plan.returning import plan_return
from guard.status.derive import report
from guard.status.model import Sight
from tests.argv_layouts import matches
from tests.builders import (
    KEYS,
    NOW,
    PASSED,
    PCI,
    TEMPLATES,
    UUID,
    back_node,
    gpu,
    job_uid,
    kubelet_rejected,
    node,
    settings,
    snapshot,
)

ON = settings(fence_gpu=True)
EARLIER = "2026-09-21T05:30:00Z"


def waiting(boot: str = "boot-1", fence: str | None = None, **kw: Any) -> NodeInfo:
    """A node the guard cordoned for Xid 79 in boot-1, still waiting for its power cycle (or,
    with `boot`, rebooted but not Ready yet)."""
    extra = {KEYS.fence: fence} if fence else {}
    if boot == "boot-1":
        return node("b", cordoned=True, guarded_xid=79, extra=extra, **kw)
    return back_node(boot=boot, ready=False, extra=extra, **kw)


def ready(fence: str | None = None, boot: str = "boot-2", **kw: Any) -> NodeInfo:
    """Rebooted, every return condition met: the load test is the next step."""
    return back_node(boot=boot, extra={KEYS.fence: fence} if fence else {}, **kw)


def plan(*nodes: NodeInfo, jobs: tuple[JobInfo, ...] = (), s: Any = ON) -> tuple[Action, ...]:
    return plan_return(snapshot(*nodes, jobs=jobs), s, TEMPLATES)


def fence_jobs(actions: tuple[Action, ...]) -> list[CreateJob]:
    return [a for a in actions if isinstance(a, CreateJob) and a.job_kind == "fence"]


def the_fence_job(actions: tuple[Action, ...]) -> CreateJob:
    (job,) = fence_jobs(actions)
    return job


def command(job: CreateJob) -> list[str]:
    return list(job.manifest["spec"]["template"]["spec"]["containers"][0]["command"])


def reasons(actions: tuple[Action, ...]) -> list[str]:
    return [a.reason for a in actions]


def gpu_absent(name: str) -> JobInfo:
    found = Finding("gpu-absent", "lspci -s 0000:99:00.0 reads all ff (rev ff)")
    return JobInfo(name, "fence", "b", "failed", result=JobResult("read", failed=(found,)))


def record(state: str, boot: str, at: str = EARLIER, job: str = "gng-fn-b-00000000") -> str:
    return f"{state} {boot} {at} job/{job}"


# ── set, record, re-apply ─────────────────────────────────────────────────────────────────


def test_off_by_default_no_fence_job() -> None:
    assert fence_jobs(plan(waiting(), s=settings())) == []


def test_on_the_waiting_node_gets_its_fence_job_after_its_own_decision() -> None:
    actions = plan(waiting())
    assert reasons(actions)[0] == "same-boot"  # the node's state stays the return's
    job = the_fence_job(actions)
    assert job.reason == "fence-set"
    assert command(job) == ["gpu-node-guard", "fence", "set", "--pci", PCI, "--uuid", UUID]
    assert matches(argv.fence(), command(job), "b")
    assert job.record[0] == KEYS.fence_job  # the guard takes its result only from this uid


def test_drain_only_when_the_site_allows_it() -> None:
    job = the_fence_job(plan(waiting(), s=settings(fence_gpu=True, fence_drain=True)))
    assert command(job)[-1] == "--drain"
    assert matches(argv.fence(), command(job), "b")


@pytest.mark.parametrize("gpu", [f"unknown {UUID}", f"{PCI} unknown"], ids=["no-pci", "no-uuid"])
def test_no_fence_without_the_gpus_address_and_uuid(gpu: str) -> None:
    assert fence_jobs(plan(node("b", cordoned=True, guarded_xid=79, extra={KEYS.gpu: gpu}))) == []


def test_a_running_fence_job_is_waited_for() -> None:
    name = the_fence_job(plan(waiting())).name
    actions = plan(waiting(), jobs=(JobInfo(name, "fence", "b", "running"),))
    assert reasons(actions) == ["same-boot", "same-boot", "fence-running"]
    assert fence_jobs(actions) == []


def test_a_passed_fence_is_recorded_for_this_boot_with_an_event() -> None:
    name = the_fence_job(plan(waiting())).name
    actions = plan(waiting(), jobs=(JobInfo(name, "fence", "b", "succeeded", result=PASSED),))
    (note,) = [a for a in actions if isinstance(a, Annotate)]
    assert note.reason == "fenced"
    assert dict(note.annotations) == {KEYS.fence: f"fenced boot-1 {format_time(NOW)} job/{name}"}
    (event,) = [a for a in actions if isinstance(a, EmitEvent) and a.reason == "fenced"]
    assert event.event_reason == "GuardFenced"


def test_a_fence_held_in_this_boot_needs_nothing_more() -> None:
    actions = plan(waiting(fence=record("fenced", "boot-1")))
    assert reasons(actions) == ["same-boot", "same-boot"]


@pytest.mark.parametrize(
    "result",
    [
        JobResult("read", failed=(Finding("mismatch", "compute mode reads 'Default'"),)),
        JobResult("read", failed=(Finding("error", "read-back: exit 9: no message"),)),
        None,  # no Pod left a summary
    ],
    ids=["read-back-mismatch", "error", "no-summary"],
)
def test_a_fence_not_read_back_is_no_fence_and_says_so(result: JobResult | None) -> None:
    name = the_fence_job(plan(waiting())).name
    actions = plan(waiting(), jobs=(JobInfo(name, "fence", "b", "failed", result=result),))
    (skip,) = [a for a in actions if isinstance(a, Skip) and a.reason == "fence-failed"]
    assert skip.level == "WARN" and "not fenced" in skip.next
    assert not any(isinstance(a, Annotate) for a in actions)  # never recorded as fenced


def test_a_gpu_off_the_bus_is_recorded_once_and_the_cordon_stays_the_isolation() -> None:
    name = the_fence_job(plan(waiting())).name
    actions = plan(waiting(), jobs=(gpu_absent(name),))
    (note,) = [a for a in actions if isinstance(a, Annotate)]
    assert dict(note.annotations)[KEYS.fence].startswith("gpu-absent boot-1 ")
    (event,) = [a for a in actions if isinstance(a, EmitEvent) and a.reason == "fence-gpu-absent"]
    assert event.event_type == "Warning" and "cordon stays the isolation" in event.message
    again = plan(waiting(fence=record("gpu-absent", "boot-1", job=name)), jobs=(gpu_absent(name),))
    assert reasons(again) == ["same-boot", "same-boot"]


def test_a_fence_job_whose_pod_the_node_rejected_is_no_fence_and_no_failure() -> None:
    name = the_fence_job(plan(waiting())).name
    rejected = kubelet_rejected(name, "fence")
    actions = plan(waiting(), jobs=(JobInfo(name, "fence", "b", "failed", result=rejected),))
    assert [r for r in reasons(actions) if r.startswith(("job-", "fence-"))] == [
        "job-rejected",
        "job-rejected",
    ]
    (skip,) = [a for a in actions if isinstance(a, Skip) and a.reason == "job-rejected"]
    assert "its GPU is not fenced" in skip.next
    assert not any(isinstance(a, Annotate) for a in actions)


def test_a_fence_job_the_guard_did_not_make_is_no_fence() -> None:
    name = the_fence_job(plan(waiting())).name
    theirs = JobInfo(name, "fence", "b", "succeeded", result=PASSED, uid=job_uid("other"))
    actions = plan_return(snapshot(waiting(), jobs=(theirs,), own=False), ON, TEMPLATES)
    assert "fence-foreign" in reasons(actions)
    assert not any(isinstance(a, Annotate) for a in actions)


def test_after_a_reboot_before_the_return_the_fence_is_set_again() -> None:
    first = the_fence_job(plan(waiting())).name
    actions = plan(waiting(boot="boot-2", fence=record("fenced", "boot-1", job=first)))
    assert reasons(actions)[0] == "not-ready"
    job = the_fence_job(actions)
    assert job.reason == "fence-reapply" and job.name != first


# ── lift: only when the load test is next, never before ───────────────────────────────────


def test_the_lift_comes_only_when_the_return_conditions_hold() -> None:
    fenced = record("fenced", "boot-2")
    assert fence_jobs(plan(waiting(boot="boot-2", fence=fenced))) == []  # not Ready: no lift
    actions = plan(ready(fenced))
    job = the_fence_job(actions)
    assert job.reason == "fence-lift" and actions[0] is job
    assert command(job) == ["gpu-node-guard", "fence", "lift", "--pci", PCI, "--uuid", UUID]
    assert not any(isinstance(a, CreateJob) and a.job_kind == "loadtest" for a in actions)
    assert not any(isinstance(a, Uncordon) for a in actions)


def test_a_running_lift_holds_the_load_test() -> None:
    fenced = record("fenced", "boot-2")
    name = the_fence_job(plan(ready(fenced))).name
    actions = plan(ready(fenced), jobs=(JobInfo(name, "fence", "b", "running"),))
    assert reasons(actions) == ["fence-lift-running"]


def test_a_passed_lift_is_recorded_and_the_load_test_comes_next_cycle() -> None:
    fenced = record("fenced", "boot-2")
    name = the_fence_job(plan(ready(fenced))).name
    actions = plan(ready(fenced), jobs=(JobInfo(name, "fence", "b", "succeeded", result=PASSED),))
    assert reasons(actions) == ["fence-lifted", "fence-lifted"]
    (note,) = [a for a in actions if isinstance(a, Annotate)]
    assert dict(note.annotations)[KEYS.fence].startswith("lifted boot-2 ")
    lifted = dict(note.annotations)[KEYS.fence]
    (test,) = [a for a in plan(ready(lifted)) if isinstance(a, CreateJob)]
    assert test.job_kind == "loadtest"  # and no fence set while it is the step


def test_a_failed_lift_keeps_the_node_cordoned_and_fenced_without_a_load_test() -> None:
    fenced = record("fenced", "boot-2")
    name = the_fence_job(plan(ready(fenced))).name
    failed = JobResult("read", failed=(Finding("mismatch", "compute mode reads 'Prohibited'"),))
    actions = plan(ready(fenced), jobs=(JobInfo(name, "fence", "b", "failed", result=failed),))
    assert reasons(actions) == ["fence-lift-failed"]
    assert actions[0].level == "WARN"  # type: ignore[union-attr]


def test_the_uncordon_only_after_the_load_test_passed_and_it_clears_the_record() -> None:
    lifted = record("lifted", "boot-2")
    (test,) = [a for a in plan(ready(lifted)) if isinstance(a, CreateJob)]
    running = plan(ready(lifted), jobs=(JobInfo(test.name, "loadtest", "b", "running"),))
    assert reasons(running) == ["loadtest-running"]  # no fence set under the running test
    done = plan(
        ready(lifted), jobs=(JobInfo(test.name, "loadtest", "b", "succeeded", result=PASSED),)
    )
    (back,) = [a for a in done if isinstance(a, Uncordon)]
    assert KEYS.fence in back.clear_keys


def test_a_load_test_that_fails_after_the_lift_fences_the_gpu_again() -> None:
    lifted = record("lifted", "boot-2")
    (test,) = [a for a in plan(ready(lifted)) if isinstance(a, CreateJob)]
    failed = JobResult("read", failed=(Finding("slow-gpu", "slow-gpu gpu=4 ratio=0.41"),))
    job = JobInfo(test.name, "loadtest", "b", "failed", result=failed)
    actions = plan(ready(lifted), jobs=(job,))
    again = the_fence_job(actions)
    assert again.reason == "fence-set"
    # Fenced again, the failed load test of this boot is not lifted for: it stays fenced.
    refenced = plan(ready(record("fenced", "boot-2", at="2026-09-21T05:50:00Z")), jobs=(job,))
    assert fence_jobs(refenced) == [] and "loadtest-failed" in reasons(refenced)


def test_a_reboot_since_the_fence_needs_no_lift_the_load_test_runs_at_once() -> None:
    actions = plan(ready(record("fenced", "boot-1")))
    (job,) = [a for a in actions if isinstance(a, CreateJob)]
    assert job.job_kind == "loadtest"


# ── the write-up's case ───────────────────────────────────────────────────────────────────


def incident_gpu_hours(gpus: int, faulted: int, days: int) -> dict[str, tuple[int, int]]:
    """GPU-hours out of service per unit (all, the healthy GPUs' share), docs/isolation.md: the
    cordon takes every GPU out, the host fence keeps the cordon (the same loss), the device taint
    takes only the faulted card."""
    whole, bad = gpus * days * 24, faulted * days * 24
    return {
        "node-cordon": (whole, whole - bad),
        "host-fence": (whole, whole - bad),
        "dra-device-taint": (bad, 0),
    }


def test_gpu_hours_of_the_write_ups_case() -> None:
    rows = incident_gpu_hours(4, 1, 38)
    assert rows == {
        "node-cordon": (4 * 38 * 24, 3 * 38 * 24),
        "host-fence": (3648, 2736),
        "dra-device-taint": (912, 0),
    }


def test_a_set_job_of_this_boot_not_recorded_yet_holds_the_load_test() -> None:
    """Fenced again after the reboot while the node waited; its conditions hold before the
    guard recorded that fence: no load test on a card that may be Prohibited."""
    old = record("fenced", "boot-1")
    name = the_fence_job(plan(waiting(boot="boot-2", fence=old))).name
    running = plan(ready(old), jobs=(JobInfo(name, "fence", "b", "running"),))
    assert reasons(running) == ["fence-running"]
    done = plan(ready(old), jobs=(JobInfo(name, "fence", "b", "succeeded", result=PASSED),))
    assert reasons(done) == ["fenced", "fenced"]  # recorded: the lift comes next cycle
    (note,) = [a for a in done if isinstance(a, Annotate)]
    assert dict(note.annotations)[KEYS.fence].startswith("fenced boot-2 ")
    failed = JobResult("read", failed=(Finding("mismatch", "compute mode reads 'Default'"),))
    unfenced = plan(ready(old), jobs=(JobInfo(name, "fence", "b", "failed", result=failed),))
    assert [a.job_kind for a in unfenced if isinstance(a, CreateJob)] == ["loadtest"]


def test_a_gpu_the_evidence_job_found_off_the_bus_gets_no_fence_job_in_that_boot() -> None:
    others = {KEYS.pcie_links: "0000:18:00.0=16GT/s,x16 0000:2a:00.0=16GT/s,x16"}
    actions = plan(node("b", cordoned=True, guarded_xid=79, extra=others))
    assert fence_jobs(actions) == [] and reasons(actions)[-1] == "fence-gpu-absent"
    with_it = {KEYS.pcie_links: f"0000:18:00.0=16GT/s,x16 {PCI}=16GT/s,x16"}
    assert fence_jobs(plan(node("b", cordoned=True, guarded_xid=79, extra=with_it)))
    # After a reboot the card may be back: the fence Job looks for itself.
    rebooted = plan(back_node(ready=False, extra=others))
    assert the_fence_job(rebooted).reason == "fence-set"


def test_the_cordon_cycle_creates_the_fence_job_the_next_cycle_finds_by_name() -> None:
    faulted = snapshot(node("b", allocatable=7), candidates=(gpu("b", 79),))
    actions = plan_isolation(faulted, ON, TEMPLATES)
    assert [a.reason for a in actions if isinstance(a, CreateJob)] == ["xid-79", "fence-set"]
    made = the_fence_job(actions)
    assert command(made) == ["gpu-node-guard", "fence", "set", "--pci", PCI, "--uuid", UUID]
    assert fence_jobs(plan_isolation(faulted, settings(), TEMPLATES)) == []  # off: no fence
    cordoned = node("b", cordoned=True, guarded_xid=79, extra={KEYS.at: format_time(NOW)})
    assert the_fence_job(plan(cordoned)).name == made.name  # the same Job, never a second
    running = plan(cordoned, jobs=(JobInfo(made.name, "fence", "b", "running"),))
    assert reasons(running)[-1] == "fence-running"


# ── a fence lifted behind the guard's back (issue 38) ───────────────────────────────────────


def _lift(status: str, created: str, result: JobResult | None = PASSED, ended: str = "") -> JobInfo:
    """A `fence lift` Job the guard did not make (made with its stolen token), in this cordon."""
    return JobInfo(
        "gng-fn-b-theirs",
        "fence",
        "b",
        status,  # type: ignore[arg-type]
        result=result if status != "running" else None,
        uid=job_uid("theirs"),
        created=parse_time(created),
        ended=parse_time(ended) if ended else None,
        fence_mode="lift",
    )


def _fenced_since(at: str = EARLIER) -> NodeInfo:
    return waiting(fence=record("fenced", "boot-1", at))


def test_a_lift_the_guard_did_not_make_is_seen_and_the_gpu_fenced_again() -> None:
    lift = _lift("succeeded", "2026-09-21T05:40:00Z")  # after the 05:30 `fenced` record
    actions = plan(_fenced_since(), jobs=(lift,))
    (warn,) = [a for a in actions if a.reason == "fence-lifted-foreign" and isinstance(a, Skip)]
    assert warn.level == "WARN" and "job/gng-fn-b-theirs" in warn.detail
    assert "read-back says lifted" in warn.detail and "fences the GPU again now" in warn.next
    (event,) = [a for a in actions if isinstance(a, EmitEvent) and a.reason == warn.reason]
    assert event.event_type == "Warning" and event.incident == f"gng-fn-b-theirs {lift.uid}"
    again = the_fence_job(actions)
    assert again.reason == "fence-reapply" and command(again)[2] == "set"
    # the Event said once: the next cycle only warns (and waits for its set Job)
    snap = snapshot(_fenced_since(), jobs=(lift,))
    posted = replace(snap, events=(GuardEvent(event.name, "b", "GuardForeignJob", 1),))
    later = plan_return(posted, ON, TEMPLATES)
    assert [a for a in later if isinstance(a, EmitEvent) and a.reason == warn.reason] == []
    assert "fence-lifted-foreign" in reasons(later)


def test_a_lift_still_running_is_warned_about_and_waited_for() -> None:
    actions = plan(_fenced_since(), jobs=(_lift("running", "2026-09-21T05:40:00Z"),))
    assert "fence-lifted-foreign" in reasons(actions) and fence_jobs(actions) == []


def test_a_lift_made_before_the_fence_record_that_ran_after_it_is_seen() -> None:
    """Made first, run last (its Pod started after the guard's set Pod): by its end, not by its
    creation, it may have lifted what the record read back."""
    late = _lift("succeeded", "2026-09-21T05:20:00Z", ended="2026-09-21T05:40:00Z")
    actions = plan(_fenced_since(), jobs=(late,))
    assert "fence-lifted-foreign" in reasons(actions)
    assert the_fence_job(actions).reason == "fence-reapply"
    running = plan(_fenced_since(), jobs=(_lift("running", "2026-09-21T05:20:00Z"),))
    assert "fence-lifted-foreign" in reasons(running) and fence_jobs(running) == []
    ended_before = _lift("failed", "2026-09-21T05:10:00Z", ended="2026-09-21T05:20:00Z")
    assert reasons(plan(_fenced_since(), jobs=(ended_before,))) == ["same-boot", "same-boot"]


def test_a_lift_older_than_the_fence_record_changes_nothing() -> None:
    """The guard fenced the GPU again after that lift: the record holds."""
    actions = plan(_fenced_since(), jobs=(_lift("succeeded", "2026-09-21T05:20:00Z"),))
    assert reasons(actions) == ["same-boot", "same-boot"]


def test_status_shows_the_fence_lifted_behind_the_guards_back() -> None:
    snap = snapshot(_fenced_since(), jobs=(_lift("succeeded", "2026-09-21T05:40:00Z"),))
    (row,) = report(snap, ON, TEMPLATES, Sight("http://prom.test:9090")).nodes
    assert row.state == "gpu-fence-not-set"
    assert row.blocked is not None and row.blocked.condition == "fence-lifted-foreign"
    assert "gpu-fence says fenced" in row.blocked.observed
