"""The in-run watch's pure parts (guard.plan.watch): what it waits for, what it leaves to the next
run, and the snapshot one decision plans on."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

import pytest
import responses

from guard.actions import Cordon
from guard.codec import queries
from guard.doors.prom import PromClient
from guard.doors.retry import Backoff
from guard.log import Log
from guard.model import PromView
from guard.plan.isolation import plan_isolation
from guard.plan.watch import Due, decision_snapshot, dues, fine, scheduled_at, split, watch_end
from guard.settings import CRONJOB_DEADLINE_S, WATCH_MARGIN_S
from guard.watch import ReplayClock, Watch
from tests.builders import (
    NOW,
    TEMPLATES,
    UUID,
    Signals,
    brief,
    gpu,
    node,
    settings,
    snapshot,
    xid_cordon,
)
from tests.run_builders import dry_run


def after(seconds: int):
    return NOW + timedelta(seconds=seconds)


def test_dues_are_each_nodes_first_hold_by_time():
    snap = snapshot(
        node("a"),
        node("b"),
        node("c"),
        hardware=(gpu("a", 48), gpu("b", 48), gpu("b", 79, index=5), gpu("c", 79)),
        loss={"a": 300, "b": 60, "c": 30},
    )
    # The cycle's minute grid: on the scrape grid each hold may complete up to 45 s sooner.
    assert dues(snap, settings()) == (
        Due("b", "xid-79", after(60 - 45)),  # its fast-path GPU decides before its Xid 48
        Due("c", "xid-79", after(90 - 45)),
        Due("a", "xid-48", after(300 - 45)),
    )
    # A view read on the scrape grid (the watch's re-read) says exactly when.
    assert dues(snap, settings(), step_s=15)[0] == Due("b", "xid-79", after(60))


@pytest.mark.parametrize("delay", [0, 17, 59, 299])
def test_the_watch_ends_after_the_jobs_schedule_never_past_its_deadline(delay: int) -> None:
    """A pod that started `delay` s after its Job's schedule watches until 240 s after the
    schedule: the CronJob's activeDeadlineSeconds counts from the Job's start, never earlier."""
    tick = datetime(2026, 9, 21, 5, 50, tzinfo=UTC)
    s = settings(job_name=f"gpu-node-guard-{int(tick.timestamp()) // 60}")
    started = tick + timedelta(seconds=delay)
    end = watch_end(started, s)
    assert end == tick + timedelta(seconds=s.watch_until_s)
    assert end <= tick + timedelta(seconds=CRONJOB_DEADLINE_S - WATCH_MARGIN_S)


@pytest.mark.parametrize("job", ["", "gpu-node-guard-manual", "gpu-node-guard-manual-1"])
def test_a_job_without_a_schedule_watches_from_the_runs_start(job: str) -> None:
    s = settings(job_name=job)
    assert watch_end(NOW, s) == NOW + timedelta(seconds=s.watch_until_s)


def test_a_schedule_that_does_not_fit_the_run_is_not_taken() -> None:
    """A name ending in a number that is not this period's schedule (a later one, or one more
    than a period before the start) counts from the run's start."""
    minutes = int(NOW.timestamp()) // 60
    for name in (f"x-{minutes + 1}", f"x-{minutes - 6}"):
        assert scheduled_at(name, NOW, 300) is None, name
    assert scheduled_at(f"x-{minutes}", NOW, 300) == datetime.fromtimestamp(minutes * 60, UTC)


def test_a_pending_mismatch_is_due_too_unless_its_cordon_is_off():
    """A driver/NVML mismatch's hold (10 minutes by default) is the watch's when it completes
    while the run is up; with --no-nvml-mismatch-cordon nothing waits for it."""
    snap = snapshot(node("m"), signals=Signals(failing={"m": 540}))
    assert dues(snap, settings()) == (Due("m", "nvml-mismatch", after(60 - 45)),)
    assert dues(snap, settings(nvml_mismatch_cordon=False)) == ()


def test_no_due_for_a_name_no_node_has_or_a_cordoned_node():
    snap = snapshot(
        node("a", cordoned=True),
        hardware=(gpu("a", 79), gpu("ghost", 79)),
        loss={"a": 30, "ghost": 30},
    )
    assert dues(snap, settings()) == ()


def test_a_hold_past_the_end_is_left_to_the_next_run():
    found = (Due("b", "xid-79", after(60)), Due("a", "xid-48", after(300)))
    assert split(found, after(180)) == (found[:1], found[1:])
    assert split(found, after(300)) == (found, ())  # completes at the end: still this run's


def test_a_decision_plans_on_that_nodes_new_facts_only():
    """At the decision, b's hold has passed; a's old facts (held 100 s of 600 at the cycle)
    would pass too by the clock alone, but only b was re-read: one cordon, of b."""
    base = snapshot(
        node("a"), node("b"), hardware=(gpu("a", 48), gpu("b", 79)), loss={"a": 500, "b": 60}
    )
    at = after(120)
    fresh = PromView(
        hardware_xids=(gpu("b", 79),), loss_since=(("b", NOW - timedelta(seconds=60)),)
    )
    snap = decision_snapshot(base, "b", base.node("b"), fresh, at)
    assert snap.now == at and [n.name for n in snap.nodes] == ["a", "b"]
    assert brief(plan_isolation(snap, settings(), TEMPLATES)) == xid_cordon("b", 79)


def test_the_re_read_node_decides_a_persons_cordon_wins():
    base = snapshot(node("b"), hardware=(gpu("b", 79),), loss={"b": 60})
    fresh = PromView(
        hardware_xids=(gpu("b", 79),), loss_since=(("b", NOW - timedelta(seconds=60)),)
    )
    cordoned = replace(base.node("b"), unschedulable=True, resource_version="2")
    snap = decision_snapshot(base, "b", cordoned, fresh, after(60))
    assert brief(plan_isolation(snap, settings(), TEMPLATES)) == [("skip", "b", "already-cordoned")]
    gone = decision_snapshot(base, "b", None, fresh, after(60))
    assert brief(plan_isolation(gone, settings(), TEMPLATES)) == [("skip", "b", "not-in-api")]


def test_the_cordon_carries_the_resource_version_as_re_read():
    base = snapshot(node("b", rv="1"), hardware=(gpu("b", 79),), loss={"b": 60})
    fresh = PromView(
        hardware_xids=(gpu("b", 79),), loss_since=(("b", NOW - timedelta(seconds=60)),)
    )
    snap = decision_snapshot(
        base, "b", replace(base.node("b"), resource_version="7"), fresh, after(60)
    )
    (cordon,) = [a for a in plan_isolation(snap, settings(), TEMPLATES) if a.node == "b"][:1]
    assert cordon.resource_version == "7"  # type: ignore[union-attr]


def test_a_read_that_fails_during_the_watch_ends_it_with_one_warn_line():
    """Prometheus gone after the cycle (nothing listens on the port): the watch's decision read
    fails, the watch ends with a WARN line, and nothing is written."""
    out = io.StringIO()
    log = Log("text", out, NOW)
    base = snapshot(node("b"), hardware=(gpu("b", 79),), loss={"b": 60})
    s = settings(prometheus_url="http://127.0.0.1:9")
    run = dry_run(s, PromClient("http://127.0.0.1:9", timeout_s=1), log, NOW)
    Watch(run, base, ReplayClock(NOW), after(s.watch_until_s)).watch()
    lines = out.getvalue().splitlines()
    assert [line.split()[1:3] for line in lines] == [["INFO", "watch-start"], ["WARN", "watch-end"]]
    assert 'why="read-failed: ' in lines[1] and run.outcomes == []


@responses.activate
def test_the_watch_survives_one_503_and_still_decides():
    """One failed Prometheus read used to end the watch for the rest of the run (7 of 37 watch
    replays lost the due cordon to one transient answer): the first read of the watch answers
    503, it is retried within the run's budget, and the due hold is cordoned."""
    s = settings(prometheus_url="http://prom.test")
    at_scrape = fine(s)
    hold_names = {q.promql: q.name for q in queries.hold_queries(at_scrape, "b")}
    gauge = {"node": "b", "gpu": "4", "UUID": UUID, "pci_bus_id": "00000000:99:00.0"}

    def reply(request):
        form = parse_qs(request.body)
        t = float(form["time"][0])
        name = hold_names.get(form["query"][0], "poll")
        result: list[dict[str, object]] = []
        kind = "matrix" if name == "loss-history" else "vector"
        if name == "hardware-xid":
            result = [{"metric": gauge, "value": [t, "79"]}]
        elif name == "loss-history":
            start = (NOW - timedelta(seconds=60)).timestamp()
            steps = range(int(start), int(t) + 1, s.scrape_interval_s)
            result = [{"metric": {"node": "b"}, "values": [[p, "1"] for p in steps]}]
        body = {"status": "success", "data": {"resultType": kind, "result": result}}
        return 200, {"Content-Type": "application/json"}, json.dumps(body)

    url = "http://prom.test/api/v1/query"
    responses.add(responses.POST, url, status=503, body="Service Unavailable")
    responses.add_callback(responses.POST, url, callback=reply)
    out = io.StringIO()
    log = Log("text", out, NOW)
    base = snapshot(node("b", allocatable=7), hardware=(gpu("b", 79),), loss={"b": 60})
    ticks = [0.0]
    backoff = Backoff(
        100.0, clock=lambda: ticks[0], sleep=lambda d: ticks.__setitem__(0, ticks[0] + d)
    )
    prom = PromClient("http://prom.test", timeout_s=1, backoff=backoff)
    run = dry_run(s, prom, log, NOW)
    Watch(run, base, ReplayClock(NOW), after(s.watch_until_s)).watch()
    text = out.getvalue()
    assert "read-failed" not in text and prom.codes["503"] == 1
    assert [o.action.node for o in run.outcomes if isinstance(o.action, Cordon)] == ["b"]
    assert "watch-end why=cordon-landed " in text and "prometheus_retries=1 " in text


def _flapping_watch(flapping: int) -> tuple[int, int]:
    """A whole watch while `flapping` nodes flap: every poll names them all (a hardware Xid and
    GPU loss at that instant), and their re-read shows no loss held on the scrape grid, so none
    is decided and the next poll names them again. (Prometheus requests, polls.)"""
    s = settings(prometheus_url="http://prom.test")
    names = [f"flap-{i:03d}.gpu" for i in range(flapping)]
    poll = queries.watch_poll(s).promql

    def reply(request):
        form = parse_qs(request.body)
        t, query = float(form["time"][0]), form["query"][0]
        result = [{"metric": {"node": n}, "value": [t, "1"]} for n in names]
        kind = "matrix" if query.endswith("s]") else "vector"  # the loss history's subquery
        body = {"status": "success", "data": {"resultType": kind, "result": []}}
        if query == poll:
            body["data"]["result"] = result  # type: ignore[index]
        return 200, {"Content-Type": "application/json"}, json.dumps(body)

    with responses.RequestsMock() as mocked:
        mocked.add_callback(responses.POST, "http://prom.test/api/v1/query", callback=reply)
        base = snapshot(node("idle"), *(node(n) for n in names))
        prom = PromClient("http://prom.test", timeout_s=1)
        run = dry_run(s, prom, Log("text", io.StringIO(), NOW), NOW)
        watch = Watch(run, base, ReplayClock(NOW), after(s.watch_until_s))
        watch.watch()
    assert watch.decisions == 0 and run.outcomes == []
    return prom.requests_made, watch.polls


def test_the_watchs_prometheus_requests_per_scrape_do_not_grow_with_flapping_nodes():
    """Issue 39: each node a poll named used to cost its own four re-read queries, so a fault
    storm multiplied the guard's load on Prometheus (190 requests per 40 s watch at 5,000 nodes,
    2 % flapping). The nodes of one instant are re-read together: one poll and one request per
    hold query per scrape, whatever their number."""
    per_scrape = {}
    for flapping in (1, 10, 100):
        made, polls = _flapping_watch(flapping)
        # a poll each scrape after the start; at the end the watch ends instead
        assert polls == settings().watch_until_s // settings().scrape_interval_s - 1
        per_scrape[flapping] = made / polls
    hold = len(queries.hold_queries(settings(), "a"))
    assert per_scrape == {1: 1 + hold, 10: 1 + hold, 100: 1 + hold}
