"""Fence Jobs the guard did not make (guard/plan/fence_audit.py), through the whole cycle's plan:
the guard's own chain of one cordon (set → lift → set again) is never flagged though its record
keeps only the last Job; a set Job on a healthy node and a lift Job no record explains are one
WARN and one Warning Event, once per Job."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from guard.actions import Action, EmitEvent, Skip
from guard.ledger import parse_time
from guard.model import GuardEvent, JobInfo, NodeInfo, Snapshot
from guard.plan import plan_cycle
from guard.plan.fence_audit import why_foreign
from guard.status.derive import report
from guard.status.model import Sight
from tests.builders import KEYS, PASSED, TEMPLATES, job_uid, node, settings, snapshot

ON = settings(fence_gpu=True)  # the cordon of `waiting` is at 05:00, the cycle at 05:55


def at(hh_mm: str) -> datetime:
    return parse_time(f"2026-09-21T{hh_mm}:00Z")


def fence_job(name: str, created: str, node_name: str = "b", uid: str = "") -> JobInfo:
    return JobInfo(
        name, "fence", node_name, "succeeded", result=PASSED, uid=uid, created=at(created)
    )


def waiting(fence: str) -> NodeInfo:
    """Guard-cordoned for Xid 79 at 05:00 in boot-1, waiting for its power cycle."""
    return node("b", cordoned=True, guarded_xid=79, extra={KEYS.fence: fence})


# The guard's chain of one cordon: set at 05:00, read back 05:10 (fenced), lift 05:15, read back
# 05:20 (lifted), the load test fails, set again 05:40, read back 05:45 (fenced).
CHAIN = (
    fence_job("gng-fn-b-set0", "05:00"),
    fence_job("gng-fn-b-lift1", "05:15"),
    fence_job("gng-fn-b-set2", "05:40"),  # the last: `owned` records it as the guard's
)


def flagged(actions: tuple[Action, ...]) -> list[Action]:
    return [
        a
        for a in actions
        if (isinstance(a, Skip) and a.reason == "fence-job-foreign")
        or (isinstance(a, EmitEvent) and a.event_reason == "GuardForeignJob")
    ]


def cycle(snap: Snapshot) -> tuple[Action, ...]:
    return plan_cycle(snap, ON, TEMPLATES)


def test_the_guards_own_chain_set_lift_set_is_never_flagged() -> None:
    for state in ("lifted boot-1 2026-09-21T05:20:00Z", "fenced boot-1 2026-09-21T05:45:00Z"):
        snap = snapshot(waiting(f"{state} job/gng-fn-b-x"), jobs=CHAIN)
        assert [why_foreign(snap.nodes[0], j) for j in snap.jobs] == ["", "", ""]
        assert flagged(cycle(snap)) == []


def test_a_set_job_on_a_healthy_node_is_a_warn_and_an_event() -> None:
    snap = snapshot(node("h"), jobs=(fence_job("gng-fn-h-x", "05:50", "h", job_uid("x")),))
    warn, event = flagged(cycle(snap))
    assert isinstance(warn, Skip) and warn.level == "WARN" and warn.node == "h"
    assert "no guard cordon" in warn.detail
    assert isinstance(event, EmitEvent) and event.event_type == "Warning"


def test_after_the_return_only_jobs_made_since_are_flagged() -> None:
    back = node("h", extra={KEYS.returned: "2026-09-21T05:30:00Z job/gng-lt-h-x"})
    old = fence_job("gng-fn-h-lift", "05:20", "h", job_uid("lift"))  # the incident's own lift
    new = fence_job("gng-fn-h-set", "05:40", "h", job_uid("set"))
    (warn, _) = flagged(cycle(snapshot(back, jobs=(old, new), own=False)))
    assert "job/gng-fn-h-set" in warn.detail  # type: ignore[attr-defined]


def test_a_lift_job_no_record_explains_is_flagged() -> None:
    fenced = waiting("fenced boot-1 2026-09-21T05:45:00Z job/gng-fn-b-set2")
    theirs = fence_job("gng-fn-b-lift9", "05:50", uid=job_uid("theirs"))
    snap = snapshot(fenced, jobs=(*CHAIN, theirs))
    warn, event = flagged(cycle(snap))
    assert "job/gng-fn-b-lift9" in warn.detail  # type: ignore[attr-defined]
    assert "gng-fn-b-set2" in warn.detail  # type: ignore[attr-defined]  # the guard's last
    assert isinstance(event, EmitEvent) and event.incident == f"gng-fn-b-lift9 {theirs.uid}"


def test_the_recorded_name_with_another_uid_is_flagged() -> None:
    snap = snapshot(waiting("fenced boot-1 2026-09-21T05:45:00Z job/gng-fn-b-set2"), jobs=CHAIN)
    (b,) = snap.nodes
    made_again = replace(snap.jobs[2], uid=job_uid("again"), created=at("05:50"))
    assert why_foreign(b, made_again)
    assert not why_foreign(b, snap.jobs[2])


def test_said_once_per_job_the_event_already_posted_is_not_repeated() -> None:
    snap = snapshot(node("h"), jobs=(fence_job("gng-fn-h-x", "05:50", "h", job_uid("x")),))
    (_, event) = flagged(cycle(snap))
    assert isinstance(event, EmitEvent)
    posted = GuardEvent(event.name, "h", "GuardForeignJob", 1)
    assert flagged(cycle(replace(snap, events=(posted,)))) == []


def test_a_job_the_fence_step_already_calls_foreign_gets_one_event() -> None:
    waiting_node = node("b", cordoned=True, guarded_xid=79)
    set_name = next(
        a.name  # type: ignore[attr-defined]
        for a in cycle(snapshot(waiting_node))
        if getattr(a, "job_kind", "") == "fence"
    )
    theirs = fence_job(set_name, "05:50", uid=job_uid("other"))
    actions = cycle(snapshot(waiting_node, jobs=(theirs,), own=False))
    events = [a for a in flagged(actions) if isinstance(a, EmitEvent)]
    assert len(events) == 1 and "fence-foreign" in [a.reason for a in actions]


def test_status_shows_the_healthy_node_with_a_foreign_fence_job_said_or_not() -> None:
    snap = snapshot(node("h"), jobs=(fence_job("gng-fn-h-x", "05:50", "h", job_uid("x")),))
    (_, event) = flagged(cycle(snap))
    assert isinstance(event, EmitEvent)
    said = replace(snap, events=(GuardEvent(event.name, "h", "GuardForeignJob", 1),))
    for seen in (snap, said):
        (row,) = report(seen, ON, TEMPLATES, Sight("http://prom.test:9090")).nodes
        assert row.node == "h" and row.state == "job-not-made-by-the-guard"
        assert row.blocked is not None and "job/gng-fn-h-x" in row.blocked.observed
    assert report(snapshot(node("h")), ON, TEMPLATES, Sight("http://prom.test:9090")).nodes == ()


def test_a_forged_job_made_seconds_after_the_guards_own_is_flagged() -> None:
    """Bound by uid (`fence-jobs`), not by creation time: a Job made with the guard's token two
    seconds after the guard's set Job, so before the guard's later lift and set again, is not
    taken for one of the guard's older Jobs."""
    fenced = waiting("fenced boot-1 2026-09-21T05:45:00Z job/gng-fn-b-set2")
    forged = replace(
        fence_job("gng-fn-b-forged", "05:00", uid=job_uid("forged")),
        created=parse_time("2026-09-21T05:00:02Z"),
    )
    snap = snapshot(fenced, jobs=(*CHAIN, forged))
    (b,) = snap.nodes
    assert len(b.fence_jobs) == 3 and forged.uid not in b.fence_jobs
    assert [why_foreign(b, j) == "" for j in snap.jobs] == [True, True, True, False]
    warn, event = flagged(cycle(snap))
    assert "job/gng-fn-b-forged" in warn.detail  # type: ignore[attr-defined]
    assert isinstance(event, EmitEvent) and event.incident == f"gng-fn-b-forged {forged.uid}"
