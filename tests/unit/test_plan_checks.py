"""The lifecycle checks as tables: after every reboot (conformance per boot, FAIL → cordon
`conformance-<item>`, PASS → recorded), the shared Job budget, the breaker and one cordon per
cycle, the return of a conformance cordon, and the unreadable results in between."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import Cordon, CreateJob, EmitEvent, RecordBoot, Skip, Uncordon
from guard.model import Finding, GuardEvent, JobInfo, JobResult, Snapshot
from guard.plan import plan_cycle
from guard.plan.checks import plan_checks
from guard.plan.isolation import plan_isolation
from guard.plan.returning import plan_return
from tests.builders import (
    HELD_S,
    KEYS,
    NOW,
    OUT_OF_CPU,
    TEMPLATES,
    brief,
    gpu,
    kubelet_rejected,
    node,
    rewritten_event,
    settings,
    snapshot,
)

NOW_S = "2026-09-21T05:55:00Z"
CHECKED = {KEYS.checked_boot: "boot-1 2026-09-20T00:00:00Z job/gng-cf-b-00000000"}
IPVS = (Finding("ipvs-loaded", "ip_vs is not loaded"), Finding("ipvs-persist", "no file"))


def serving(name: str = "b", boot: str = "boot-2", **kw: object) -> object:
    """A schedulable GPU node whose boot-1 passed; it now runs `boot` (boot-2: rebooted)."""
    return node(name, boot=boot, extra={**CHECKED, **kw.pop("extra", {})}, **kw)  # type: ignore[arg-type]


def checks(snap: Snapshot, **changes: object) -> tuple:
    """The lifecycle checks' actions, their conformance failures through the isolation check's
    one pick first (as guard.plan.plan_cycle orders them)."""
    s = settings(**changes)
    actions, failed = plan_checks(snap, s, TEMPLATES)
    return plan_isolation(snap, s, TEMPLATES, conformance=failed) + actions


def job_of(snap: Snapshot, node_name: str = "b", kind: str = "conformance", **changes) -> str:
    """The name of the Job the lifecycle checks create for `node_name`: the one a later cycle
    finds."""
    (job,) = [
        a
        for a in checks(snap, **changes)
        if isinstance(a, CreateJob) and a.node == node_name and a.job_kind == kind
    ]
    return job.name


def done(name: str, status: str, result: JobResult | None, kind: str = "conformance") -> JobInfo:
    return JobInfo(name, kind, "b", status, result=result)  # type: ignore[arg-type]


CF = job_of(snapshot(serving()))
FAILED = JobResult("read", failed=IPVS)
PASSED = JobResult("read", passed=True)
FOREIGN_UID = "0b9c6d1e-0000-4000-8000-00000000dead"
UNREAD = JobResult("unreadable", "x")
ADOPTED = JobResult("unreadable", "pod x ran on node a, not on node b", foreign=True)


def after(status: str, result: JobResult | None) -> Snapshot:
    """The rebooted node and its conformance Job, finished (or running) with `result`."""
    return snapshot(serving(), jobs=(done(CF, status, result),))


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(serving()),
            [("create-job", "b", "new-boot")],
            id="new-boot-gets-its-conformance-job",
        ),
        pytest.param(
            snapshot(node("b")),
            [("create-job", "b", "never-checked")],
            id="never-checked-node-gets-one",
        ),
        pytest.param(snapshot(serving(boot="boot-1")), [], id="checked-boot-is-left-alone"),
        pytest.param(snapshot(node("cpu", gpus=0)), [], id="cpu-node-is-not-checked"),
        pytest.param(
            after("running", None), [("skip", "b", "boot-check-running")], id="running-waits"
        ),
        pytest.param(
            after("succeeded", PASSED),
            [("record-boot", "b", "boot-check-passed")],
            id="pass-records-the-boot",
        ),
        pytest.param(
            after("succeeded", None),
            [("skip", "b", "boot-check-unreadable")],
            id="succeeded-with-its-pod-gone-is-no-pass",
        ),
        pytest.param(
            after("failed", FAILED),
            [("cordon", "b", "conformance-ipvs-loaded"), ("event", "b", "conformance-ipvs-loaded")],
            id="fail-cordons-on-its-item",
        ),
        pytest.param(
            after("failed", UNREAD),
            [("skip", "b", "boot-check-unreadable")],
            id="unreadable-summary-no-cordon",
        ),
        pytest.param(
            after("failed", None),
            [("skip", "b", "boot-check-unreadable")],
            id="failed-without-summary-no-cordon",
        ),
        pytest.param(
            after("succeeded", UNREAD),
            [("skip", "b", "boot-check-unreadable")],
            id="passed-job-unread-no-record",
        ),
        pytest.param(
            snapshot(serving(), jobs=(JobInfo(CF, "conformance", "b", "unreadable"),)),
            [("skip", "b", "boot-check-unreadable")],
            id="unreadable-job-status",
        ),
        pytest.param(
            snapshot(serving(cordoned=True)),
            [],
            id="a-persons-cordon-waits-for-the-uncordon-silently",
        ),
        pytest.param(
            snapshot(serving(cordoned=True), jobs=(done(CF, "succeeded", PASSED),)),
            [],
            id="a-pass-on-a-node-a-person-cordoned-since-waits",
        ),
        pytest.param(
            snapshot(serving(cordoned=True), jobs=(done(CF, "failed", FAILED),)),
            [("skip", "b", "already-cordoned")],
            id="a-fail-on-a-node-a-person-cordoned-since-is-no-guard-cordon",
        ),
        pytest.param(
            snapshot(serving(), jobs=(replace(done(CF, "succeeded", PASSED), uid=FOREIGN_UID),)),
            [("skip", "b", "boot-check-foreign"), ("event", "b", "boot-check-foreign")],
            id="a-replaced-job-is-no-pass",
        ),
        pytest.param(
            snapshot(serving(), jobs=(done(CF, "succeeded", PASSED),), own=False),
            [("skip", "b", "boot-check-foreign"), ("event", "b", "boot-check-foreign")],
            id="a-job-without-the-guards-record-is-no-pass",
        ),
        pytest.param(
            after("succeeded", ADOPTED),
            [("skip", "b", "boot-check-foreign"), ("event", "b", "boot-check-foreign")],
            id="a-pass-of-a-pod-from-another-node-is-no-pass",
        ),
        pytest.param(
            after("failed", kubelet_rejected(CF, "conformance", *OUT_OF_CPU)),
            [("skip", "b", "job-rejected"), ("event", "b", "job-rejected")],
            id="a-pod-the-node-rejected-is-no-failure-and-no-pass",
        ),
        pytest.param(
            snapshot(serving(), hardware=(gpu("b", 79),)),
            [("skip", "b", "boot-check-deferred")],
            id="hardware-xid-isolation-first",
        ),
        pytest.param(
            snapshot(serving(boot="")),
            [("skip", "b", "boot-check-no-boot-id")],
            id="no-boot-id-no-check",
        ),
        pytest.param(
            snapshot(node("b", cordoned=True, guarded_xid=79, boot="boot-2")),
            [],
            id="guard-cordoned-node-is-the-return-checks",
        ),
    ],
)
def test_after_reboot_check(snap: Snapshot, expected: list[tuple[str, str, str]]) -> None:
    assert brief(checks(snap)) == expected


def test_the_check_can_be_turned_off() -> None:
    assert checks(snapshot(serving(), node("c")), boot_check=False) == ()


def test_pass_records_exactly_this_boot_and_job() -> None:
    snap = after("succeeded", PASSED)
    (record,) = checks(snap)
    assert record == RecordBoot(
        "b",
        "boot-check-passed",
        "100",
        "boot-2",
        ((KEYS.checked_boot, f"boot-2 {NOW_S} job/{CF}"),),
        "checked again after the next reboot",
    )


def test_fail_cordons_with_the_failed_items_on_the_node_and_a_warning_event() -> None:
    earlier = {KEYS.returned: "2026-09-20T00:00:00Z job/gng-lt-b-1"}
    snap = snapshot(serving(extra=earlier), jobs=(done(CF, "failed", FAILED),))
    cordon, event = checks(snap)
    assert cordon == Cordon(
        "b",
        "conformance-ipvs-loaded",
        "100",
        (
            (KEYS.reason, "conformance-ipvs-loaded"),
            (KEYS.at, NOW_S),
            (KEYS.boot_id, "boot-2"),
            (KEYS.gpu_capacity, "8"),
            (KEYS.conformance_failed, f"{NOW_S} job/{CF} ipvs-loaded,ipvs-persist"),
        ),
        "-",
        0,
        "fix ipvs-loaded,ipvs-persist, then reboot",
        (KEYS.returned,),
    )
    assert isinstance(event, EmitEvent) and event.event_type == "Warning"
    assert event.message == (
        "cordoned by gpu-node-guard: conformance failed on boot boot-2: ipvs-loaded (ip_vs is "
        f"not loaded); ipvs-persist (no file); job/{CF}"
    )


def fails(*names: str) -> Snapshot:
    nodes = [serving(n) for n in names]
    jobs = tuple(
        replace(done(job_of(snapshot(n), n.name), "failed", FAILED), node=n.name) for n in nodes
    )
    return snapshot(*nodes, jobs=jobs)


def test_one_conformance_cordon_per_cycle() -> None:
    assert brief(checks(fails("a", "b"))) == [
        ("cordon", "a", "conformance-ipvs-loaded"),
        ("event", "a", "conformance-ipvs-loaded"),
        ("skip", "b", "one-per-cycle"),
    ]


def test_a_persons_cordon_is_not_the_guards_and_does_not_use_up_the_cycles_cordon() -> None:
    """Node a failed its after-reboot conformance but a person cordoned it meanwhile: no guard
    write (the node-scope policy would refuse it, 422, every cycle), and b gets the one cordon."""
    snap = fails("a", "b")
    a = replace(snap.nodes[0], unschedulable=True)
    assert brief(checks(replace(snap, nodes=(a, snap.nodes[1])))) == [
        ("cordon", "b", "conformance-ipvs-loaded"),
        ("event", "b", "conformance-ipvs-loaded"),
        ("skip", "a", "already-cordoned"),
    ]


def with_xid_79_on_x(snap: Snapshot) -> Snapshot:
    """`snap` plus node x, one GPU lost to an Xid 79 held long enough to cordon."""
    return replace(
        snap,
        nodes=(*snap.nodes, node("x", allocatable=7)),
        prom=replace(
            snap.prom,
            hardware_xids=(gpu("x", 79),),
            loss_since=(("x", NOW - timedelta(seconds=HELD_S)),),
        ),
    )


def test_no_conformance_cordon_in_a_cycle_the_isolation_check_cordoned() -> None:
    snap = with_xid_79_on_x(fails("b"))
    plan = brief(plan_cycle(snap, settings(), TEMPLATES))
    assert plan[0] == ("cordon", "x", "xid-79")
    assert ("skip", "b", "one-per-cycle") in plan
    assert not [p for p in plan if p[0] == "cordon" and p[1] == "b"]


def test_a_conformance_failure_waits_behind_the_cycles_one_pick_under_one_breaker_count() -> None:
    """One pick, one breaker count: the hardware candidate is the pick and the conformance
    failure waits behind it, even where that cordon fills the breaker (docs/isolation.md)."""
    snap = with_xid_79_on_x(fails("b"))
    plan = plan_cycle(snap, settings(breaker_max_nodes=1), TEMPLATES)
    assert brief(plan)[0] == ("cordon", "x", "xid-79")
    (wait,) = [a for a in plan if a.node == "b"]
    assert brief((wait,)) == [("skip", "b", "one-per-cycle")]
    assert isinstance(wait, Skip)
    assert wait.detail.startswith("conformance failed on ipvs-loaded,ipvs-persist (job/")
    assert wait.detail.endswith("); waits behind the isolation check's cordon")


def test_the_breaker_holds_conformance_cordons_with_a_warning_each() -> None:
    guarded = [node(f"g{i}", cordoned=True, guarded_xid=79) for i in range(5)]
    snap = fails("a", "b")
    snap = replace(snap, nodes=tuple(sorted((*snap.nodes, *guarded), key=lambda n: n.name)))
    plan = checks(snap)
    assert brief(plan) == [
        ("skip", "a", "breaker-open"),
        ("event", "a", "breaker-open"),
        ("skip", "b", "breaker-open"),
        ("event", "b", "breaker-open"),
    ]
    assert isinstance(plan[0], Skip) and plan[0].level == "WARN"


def test_jobs_per_cycle_are_bounded_rebooted_first() -> None:
    """Budget 3, one running: two new Jobs, the rebooted node before the never-checked ones."""
    running = serving("r")
    r_job = done(job_of(snapshot(running), "r"), "running", None)
    snap = snapshot(node("a"), node("c"), serving("z"), running, jobs=(replace(r_job, node="r"),))
    plan = checks(snap, boot_check_max_jobs=3)
    assert brief(plan) == [
        ("create-job", "a", "never-checked"),
        ("skip", "r", "boot-check-running"),
        ("create-job", "z", "new-boot"),
        ("skip", "", "boot-check-queued"),
    ]
    assert plan[-1].detail == (
        "1 GPU nodes wait for a conformance Job (c); 1 run, at most 3 at once (boot_check_max_jobs)"
    )


def test_a_full_budget_starts_nothing() -> None:
    nodes = [serving(f"n{i}") for i in range(3)]
    jobs = tuple(
        replace(done(job_of(snapshot(n), n.name), "running", None), node=n.name) for n in nodes
    )
    plan = checks(snapshot(*nodes, node("new"), jobs=jobs), boot_check_max_jobs=3)
    assert [a for a in plan if isinstance(a, CreateJob)] == []
    assert brief(plan)[-1] == ("skip", "", "boot-check-queued")


def test_a_job_the_guard_did_not_make_takes_no_slot_of_the_budget() -> None:
    """Three running Jobs of the guard's names, each made again by someone else (another uid):
    none counts against the budget of 3 (docs/lifecycle.md), each is said to be foreign."""
    nodes = [serving(f"n{i}") for i in range(3)]
    theirs = tuple(
        replace(done(job_of(snapshot(n), n.name), "running", None), node=n.name, uid=FOREIGN_UID)
        for n in nodes
    )
    plan = checks(snapshot(*nodes, node("new"), jobs=theirs), boot_check_max_jobs=3)
    assert [a.node for a in plan if isinstance(a, CreateJob)] == ["new"]
    assert [a.reason for a in plan if isinstance(a, Skip)] == ["boot-check-foreign"] * 3


def test_the_conformance_job_is_the_policys_and_expires_sooner() -> None:
    (job,) = checks(snapshot(serving()), boot_check_job_ttl_s=7200)
    assert isinstance(job, CreateJob)
    spec = job.manifest["spec"]
    assert spec["ttlSecondsAfterFinished"] == 7200
    assert spec["template"]["spec"]["containers"][0]["command"][:2] == [
        "gpu-node-guard",
        "conformance",
    ]
    assert job.manifest["metadata"]["annotations"][f"{KEYS.prefix}reason"] == "boot-check"


# ── The return of a conformance cordon ──────────────────────────────────────────────────────


def cordoned_for_conformance(boot: str = "boot-3", **extra: str) -> object:
    notes = {
        KEYS.reason: "conformance-ipvs-loaded",
        KEYS.at: "2026-09-21T05:00:00Z",
        KEYS.boot_id: "boot-2",
        KEYS.gpu_capacity: "8",
        KEYS.conformance_failed: f"2026-09-21T05:00:00Z job/{CF} ipvs-loaded",
        **extra,
    }
    return node("b", cordoned=True, boot=boot, extra=notes)


def returns(snap: Snapshot, **changes: object) -> tuple:
    return plan_return(snap, settings(**changes), TEMPLATES)


RCF = next(
    a.name
    for a in returns(snapshot(cordoned_for_conformance(), ledger={}))
    if isinstance(a, CreateJob)
)


@pytest.mark.parametrize(
    ("snap", "changes", "expected"),
    [
        pytest.param(
            snapshot(cordoned_for_conformance(boot="boot-2"), ledger={}),
            {},
            [("skip", "b", "conformance-same-boot")],
            id="same-boot-waits-no-event",
        ),
        pytest.param(
            snapshot(cordoned_for_conformance(), ledger={}),
            {},
            [("create-job", "b", "conditions-met")],
            id="new-boot-runs-conformance",
        ),
        pytest.param(
            snapshot(cordoned_for_conformance(), ledger={}, jobs=(done(RCF, "succeeded", PASSED),)),
            {},
            [("uncordon", "b", "conformance-passed"), ("event", "b", "returned")],
            id="later-boot-passes-returns",
        ),
        pytest.param(
            snapshot(cordoned_for_conformance(), ledger={}, jobs=(done(RCF, "succeeded", PASSED),)),
            {"boot_check_return_loadtest": True},
            [("create-job", "b", "conditions-met")],
            id="with-the-load-test-configured-it-runs-next",
        ),
        pytest.param(
            snapshot(cordoned_for_conformance(), ledger={}, jobs=(done(RCF, "succeeded", UNREAD),)),
            {},
            [("skip", "b", "conformance-unreadable")],
            id="a-pass-whose-summary-contradicts-it-does-not-return-the-node",
        ),
        pytest.param(
            snapshot(cordoned_for_conformance(), ledger={}, jobs=(done(RCF, "failed", FAILED),)),
            {},
            [("annotate", "b", "conformance-failed"), ("event", "b", "conformance-failed")],
            id="later-boot-fails-again-stays",
        ),
    ],
)
def test_conformance_cordon_return(snap: Snapshot, changes: dict, expected: list) -> None:
    assert brief(returns(snap, **changes)) == expected


@pytest.mark.parametrize(
    ("minutes_later", "kept", "rewritten"),
    [
        pytest.param(10, False, True, id="lost-event-written-again-under-its-name"),
        pytest.param(10, True, False, id="event-there-nothing"),
        pytest.param(55, False, False, id="too-old-it-may-have-expired"),
    ],
)
def test_a_lost_conformance_cordon_event_is_written_again(minutes_later, kept, rewritten) -> None:
    """The Event the cordon wrote is missing from the next cycle's snapshot: the return check
    writes it again under the same name (the API server keeps Events 1 h)."""
    cordon, event = checks(snapshot(serving(), jobs=(done(CF, "failed", FAILED),)))
    n = node("b", cordoned=True, boot="boot-2", extra=dict(cordon.annotations))
    events = (GuardEvent(event.name, "b", "GuardCordoned", 1),) if kept else ()
    later = replace(
        snapshot(n, ledger={}), now=NOW + timedelta(minutes=minutes_later), events=events
    )
    again = rewritten_event(returns(later), event, rewritten)
    if again:
        assert again.message == (
            f"cordoned by gpu-node-guard at {NOW_S}: conformance failed on boot boot-2: "
            f"ipvs-loaded, ipvs-persist; job/{CF} (Event written late: its first write failed)"
        )


def test_the_return_records_the_boot_that_passed() -> None:
    snap = snapshot(cordoned_for_conformance(), ledger={}, jobs=(done(RCF, "succeeded", PASSED),))
    uncordon = returns(snap)[0]
    assert isinstance(uncordon, Uncordon)
    assert dict(uncordon.annotations) == {
        KEYS.returned: f"{NOW_S} job/{RCF}",
        KEYS.checked_boot: f"boot-3 {NOW_S} job/{RCF}",
    }
    assert set(uncordon.clear_keys) == {
        KEYS.reason,
        KEYS.at,
        KEYS.boot_id,
        KEYS.gpu_capacity,
        KEYS.conformance_failed,
    }


def test_a_failed_return_check_records_its_items() -> None:
    snap = snapshot(cordoned_for_conformance(), ledger={}, jobs=(done(RCF, "failed", FAILED),))
    annotate = returns(snap)[0]
    assert dict(annotate.annotations) == {
        KEYS.conformance_result: f"failed job/{RCF} at {NOW_S}",
        KEYS.conformance_failed: f"{NOW_S} job/{RCF} ipvs-loaded,ipvs-persist",
    }


def test_after_the_return_the_next_cycle_does_not_check_the_same_boot_again() -> None:
    back = node("b", boot="boot-3", extra={KEYS.checked_boot: f"boot-3 {NOW_S} job/{RCF}"})
    assert checks(snapshot(back)) == ()


def test_cycle_time_is_the_snapshot_now() -> None:
    assert NOW.isoformat() == "2026-09-21T05:55:00+00:00"


def test_a_guarded_node_the_isolation_check_skips_still_counts_for_the_breaker() -> None:
    """Five guard-cordoned nodes that Prometheus still names: the isolation check skips them
    (already-cordoned); they hold their places under the breaker, so a conformance failure is
    not cordoned."""
    guarded = [node(f"g{i}", cordoned=True, guarded_xid=79, allocatable=7) for i in range(5)]
    snap = fails("b")
    xids = tuple(gpu(n.name, 79) for n in guarded)
    snap = replace(
        snap,
        nodes=tuple(sorted((*snap.nodes, *guarded), key=lambda n: n.name)),
        prom=replace(
            snap.prom,
            hardware_xids=xids,
            loss_since=tuple((g.node, NOW - timedelta(seconds=HELD_S)) for g in xids),
        ),
    )
    plan = brief(plan_cycle(snap, settings(), TEMPLATES))
    assert ("skip", "b", "breaker-open") in plan
