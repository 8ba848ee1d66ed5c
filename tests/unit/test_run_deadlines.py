"""The run's deadlines (guard.plan.deadlines) and the clock the live watch keeps them on
(guard.doors.retry `Anchor`, guard.watch `RunClock`)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest

from guard.actions import Cordon
from guard.apply.outcome import Outcome, RunTrace
from guard.doors.prom import PromClient
from guard.doors.retry import Anchor
from guard.ledger import format_time
from guard.log import Log
from guard.plan.deadlines import END_MARGIN_S, RELEASE_S, run_deadlines
from guard.plan.watch import cron_slot
from guard.run import Budget, Inputs, Run, _prometheus_clock
from guard.settings import CRONJOB_DEADLINE_S, Settings
from guard.watch import RunClock, Watch
from tests.builders import node, snapshot
from tests.run_builders import dry_run

TICK = datetime(2026, 9, 21, 5, 50, tzinfo=UTC)  # the Job's schedule
JOB = f"gpu-node-guard-{int(TICK.timestamp()) // 60}"
KILLED = TICK + timedelta(seconds=CRONJOB_DEADLINE_S)  # the earliest the pod can be killed


@pytest.mark.parametrize("delay", [0, 5, 59, 100, 299])
def test_the_watch_and_the_release_get_api_time_up_to_the_watchs_end(delay: int) -> None:
    """Every default: the API door's budget for the watch and the Lease's release runs past the
    watch's end (not `cycle_deadline_s` after the start, where it ended before: the watch's last
    40 s had no API), and always ends before the CronJob's deadline."""
    s = Settings(job_name=JOB)
    started = TICK + timedelta(seconds=delay)
    d = run_deadlines(started, s, watching=True)
    assert d.watch_end == TICK + timedelta(seconds=s.watch_until_s)
    assert (
        d.run
        > d.watch_end
        > started + timedelta(seconds=s.cycle_deadline_s) - timedelta(seconds=delay + 1)
    )
    assert d.run <= KILLED - timedelta(seconds=END_MARGIN_S)
    assert d.cycle <= started + timedelta(seconds=s.cycle_deadline_s) and d.cycle <= d.run
    if delay <= 5:  # on time: the whole release margin after the watch's end
        assert d.run == d.watch_end + timedelta(seconds=RELEASE_S)


def test_the_defaults_by_the_clock():
    d = run_deadlines(TICK + timedelta(seconds=5), Settings(job_name=JOB), watching=True)
    assert [int((t - TICK).total_seconds()) for t in (d.cycle, d.watch_end, d.run)] == [
        205,
        240,
        255,
    ]


def test_a_late_pod_with_the_longest_cycle_still_ends_before_its_deadline():
    s = Settings(job_name=JOB, cycle_deadline_s=CRONJOB_DEADLINE_S - 10)
    d = run_deadlines(TICK + timedelta(seconds=120), s, watching=True)
    assert d.cycle == d.run == KILLED - timedelta(seconds=END_MARGIN_S)


def test_a_run_that_does_not_watch_releases_after_its_cycle():
    started = TICK + timedelta(seconds=5)
    d = run_deadlines(started, Settings(job_name=JOB), watching=False)
    assert d.run == d.cycle + timedelta(seconds=RELEASE_S)


@pytest.mark.parametrize("job", ["gpu-node-guard-manual-1", "gpu-node-guard-manual", ""])
@pytest.mark.parametrize("into_s", [0, 17, 200, 239, 240, 299])
def test_a_run_that_does_not_know_its_slot_never_watches_across_it(job: str, into_s: int):
    """A run by hand or `kubectl create job --from=cronjob/…` (no schedule in its Job's name):
    its cycle counts from its start, its watch ends `watch_until_s` after its slot on the
    cadence's grid, as that slot's CronJob run's does — never in the next slot, where that
    slot's run would take the Lease (it expires at the boundary) and both could cordon. Before,
    it watched `watch_until_s` after its start: 4:59 into a slot, nearly four minutes into the
    next one."""
    s = Settings(job_name=job)
    started = TICK + timedelta(seconds=into_s)
    d = run_deadlines(started, s, watching=True)
    assert d.cycle == started + timedelta(seconds=s.cycle_deadline_s)
    assert d.watch_end == TICK + timedelta(seconds=s.watch_until_s)
    assert d.watch_end < TICK + timedelta(seconds=s.cadence_s)  # the next slot's start
    assert d.run == max(d.cycle, d.watch_end) + timedelta(seconds=RELEASE_S)


class Ticks:
    """A monotonic clock that sleeping advances."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert len(self.slept) < 1000, "a watch that never reaches its end"
        self.slept.append(seconds)
        self.t += seconds


def test_the_anchor_turns_deadlines_into_monotonic_instants():
    ticks = Ticks()
    anchor = Anchor(TICK, ticks.t, ticks)
    assert anchor.at(TICK + timedelta(seconds=255)) == ticks.t + 255
    ticks.sleep(42.5)
    assert anchor.now() == TICK + timedelta(seconds=42.5)


def test_the_live_watch_waits_on_the_monotonic_clock():
    """The live watch's time is the run's start advanced by the monotonic clock: it ends at its
    end having slept exactly the time to it, whatever the wall clock did meanwhile (a step back
    would otherwise have it sleep past the run's deadline)."""
    ticks = Ticks()
    clock = RunClock(Anchor(TICK, ticks.t, ticks), ticks.sleep)
    out = io.StringIO()
    log = Log("text", out, TICK)
    end = TICK + timedelta(seconds=240)
    renewed: list[datetime] = []

    class Lease:  # records each renewal on the run's clock
        isolated = ""

        def renew(self, _now: datetime) -> bool:
            renewed.append(clock.now())
            return True

    landed = Outcome(Cordon("b", "xid-79", "7", {}, "0000:99:00.0", 600, "job/e"), "applied")
    prom = PromClient("http://127.0.0.1:9", timeout_s=1)
    # a cordon landed in the cycle: the watch only holds the Lease
    run = dry_run(Settings(), prom, log, TICK, Lease(), (landed,))
    Watch(run, snapshot(node("a")), clock, end).watch()
    assert "watch-end why=deadline " in out.getvalue()
    assert sum(ticks.slept) == 240 and clock.now() == end
    # renewed at every scrape before the end, on the run's clock
    step = timedelta(seconds=Settings().scrape_interval_s)
    assert renewed == [TICK + n * step for n in range(1, 240 // 15)]


def test_the_live_watch_keeps_the_cycles_offset_to_prometheus_time():
    """A pod clock ahead of Prometheus (guard.plan.instant): the run's anchor moves back by the
    offset (guard/run.py `_prometheus_clock`), and so do the watch's instants, on the same
    monotonic clock."""
    ticks = Ticks()
    clock = RunClock(Anchor(TICK - timedelta(seconds=120), ticks.t, ticks), ticks.sleep)
    assert clock.now() == TICK - timedelta(seconds=120)
    clock.sleep(15)
    assert clock.now() == TICK - timedelta(seconds=105)


class PromAt(PromClient):
    """Prometheus whose `time()` answers `at` (its own clock)."""

    def __init__(self, at: datetime) -> None:
        super().__init__("http://127.0.0.1:9", timeout_s=1)
        self.at = at

    def server_time(self, name: str = "prometheus-time") -> datetime:
        return self.at


@pytest.mark.parametrize(
    "skew_s", [120, -120, 0], ids=["pod-2min-ahead", "pod-2min-behind", "agree"]
)
def test_a_pod_clock_off_moves_neither_the_deadlines_nor_the_slot_nor_the_lease(skew_s):
    """The run's clock is Prometheus' from its time read on (guard/run.py `_prometheus_clock`):
    a pod clock two minutes ahead no longer ends the watch two minutes early (nor dates the
    Lease into the next slot), one behind no longer has it sleep past the pod's kill."""
    ticks = Ticks()
    s = Settings(job_name=JOB)
    started = TICK + timedelta(seconds=5)  # the pod's start, truly
    pod = Anchor(started + timedelta(seconds=skew_s), ticks.t, ticks)
    out = io.StringIO()
    renewed: list[datetime] = []

    class Lease:
        isolated = ""

        def renew(self, now: datetime) -> bool:
            renewed.append(now)
            return True

    prom = PromAt(started + timedelta(seconds=2))
    inputs = Inputs(dry_run=False, at=None, snapshot_file=None, output="json", watch=True)
    budget = Budget(pod, run_deadlines(pod.wall, s, True))
    prom.backoff = budget.cycle()
    run = Run(s, RunTrace(prom), Log("text", out, TICK), Log("text", out, TICK), inputs, budget)
    ticks.sleep(2)  # the time read's answer came
    _prometheus_clock(run)
    clock, d = run.budget.anchor, run.budget.deadlines
    assert clock.now() == started + timedelta(seconds=2)
    assert d == run_deadlines(started, s, True)
    # on the monotonic clock: the watch ends 235 s after the start, the run before the kill
    assert clock.at(d.watch_end) == pod.mono + 235
    assert clock.at(d.run) <= pod.mono + (KILLED - started).total_seconds() - END_MARGIN_S
    assert prom.backoff.deadline == clock.at(d.cycle)
    assert cron_slot(clock.now(), s) == TICK
    run.lease = Lease()  # type: ignore[assignment]
    assert run.renew() and renewed == [started + timedelta(seconds=2)]
    assert ("clock-skew" in out.getvalue()) is (skew_s != 0)


@pytest.mark.parametrize(
    ("job", "at_s", "slot_s"),
    [
        ("", 299, 0),  # by hand, started late: the cycle's writes still inside its slot
        ("", 301, 300),  # … and after it: recorded as the slot they land in
        (JOB, 120, 0),  # the CronJob's run, inside its schedule's slot
        (JOB, 302, 300),  # … whose cycle ends after it
    ],
    ids=["by-hand-in-slot", "by-hand-after-slot", "scheduled-in-slot", "scheduled-after-slot"],
)
def test_an_isolations_slot_record_is_the_slot_its_writes_land_in(job, at_s, slot_s):
    """A run started late in its slot (by hand: `kubectl create job --from`) whose cycle writes
    after the slot's end records the slot the writes land in, not its own: the next slot's run
    then finds that slot isolated (`slot-isolated`) instead of cordoning a second node seconds
    later beside it."""
    s = Settings(job_name=job)
    started = TICK + timedelta(seconds=at_s)
    recorded: list[str] = []

    class Lease:
        isolated = ""

        def record(self, slot: str, now: datetime) -> bool:
            recorded.append(slot)
            return False  # lost: the turn writes nothing (no executor needed)

    inputs = Inputs(dry_run=False, at=None, snapshot_file=None, output="json", watch=True)
    budget = Budget(Anchor(started, 5.0, lambda: 5.0), run_deadlines(started, s, True))
    out = io.StringIO()
    run = Run(
        s,
        RunTrace(PromAt(started)),
        Log("json", out, TICK),
        Log("json", out, TICK),
        inputs,
        budget,
        lease=Lease(),
        slot=format_time(TICK),
    )  # type: ignore[arg-type]
    run.turn(snapshot(node("a")), (Cordon("a", "xid-79", "7", (), "0000:99:00.0", 600, "job/e"),))
    assert recorded == [format_time(TICK + timedelta(seconds=slot_s))] and run.lost
