"""Time to return: from a repaired node's return (Ready with a new boot, or `reset-done` written)
to its uncordon (the device taint's removal), with and without the return's later turns
(guard/returns.py), in replayed time: no wall-clock sleep, no cluster.

What a return waits for is each Job's result, so the bench replays the schedule, not the
cluster: the CronJob's ticks every TICK_S, each run's pod starting `delay` seconds after its
tick (the isolate bench's DELAYS_S), its cycle deciding CYCLE_S later, and — with the loop — its
return polls every RETURN_POLL_S until the watch's end (`watch_until_s` after the tick: the
Job's schedule), each poll that finds a result taking the next step after one full re-read
(TURN_S). Without the loop only the cycles decide (one step a run, the behaviour before). The
node comes back at every phase of the slot (every `step_s` seconds of TICK_S). A Job's result is
readable JOB_START_S (its Pod's start: image cached) plus its documented duration after its
create (docs/lifecycle.md: the conformance Job seconds, the load test 90 s).

The steps themselves are the real planner's (guard.plan.units `plan_return` on the test
builders' snapshots, `chain`): for an Xid cordon after a reboot and for a reset-class cordon
with `reset-done`, the Jobs it creates one after the other before it uncordons; the device-taint
return (a claim and a one-GPU load test, then the rule's removal: docs/lifecycle.md) is the
documented chain.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from guard.actions import CreateJob, Uncordon
from guard.plan.return_loop import RETURN_POLL_S
from guard.plan.units import plan_return
from guard.settings import Settings

TICK_S = 300  # the CronJob's */5 schedule (Settings.cadence_s)
DELAYS_S = (0, 1, 4, 17, 31, 46, 59)  # the guard's pod start after the tick (bench/isolate.py)
CYCLE_S = 3  # the cycle's reads and plan before its writes
TURN_S = 1  # a return turn's full re-read before its writes
JOB_START_S = 5  # a Job's Pod scheduled and started (image on the node)
CONFORMANCE_S = 10  # docs/lifecycle.md: the conformance Job runs seconds
LOADTEST_S = 90  # docs/lifecycle.md: the load test's burn
DURATION_S = {"conformance": CONFORMANCE_S, "loadtest": LOADTEST_S}
MEDIAN_MARGIN_S = 45  # done when: median ≤ the checks + 45 s
WORST_MARGIN_S = 180  # worst ≤ the checks + 3 min


@dataclass(frozen=True, slots=True)
class Case:
    key: str
    title: str
    jobs: tuple[str, ...]  # the Jobs the return creates one after the other, then the return

    def checks_s(self) -> int:
        return sum(DURATION_S[j] for j in self.jobs)


@dataclass(frozen=True, slots=True)
class Figures:
    case: Case
    loop: bool
    times: tuple[float, ...]

    @property
    def low(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return float(statistics.median(self.times))

    @property
    def worst(self) -> float:
        return max(self.times)


def chain(**node: object) -> tuple[str, ...]:
    """The Job kinds the return check creates, in order, before it uncordons the node: the real
    planner driven on snapshots in which each Job it made passed."""
    from tests.builders import TEMPLATES, S, back_node, passed_job, snapshot

    s = replace(S, return_conformance=Settings().return_conformance)
    back = back_node("b", **node)  # type: ignore[arg-type]
    made: list[str] = []
    jobs: list[object] = []
    for _ in range(5):
        actions = plan_return(snapshot(back, jobs=tuple(jobs)), s, TEMPLATES)  # type: ignore[arg-type]
        if any(isinstance(a, Uncordon) for a in actions):
            return tuple(made)
        new = [a for a in actions if isinstance(a, CreateJob)]
        if not new:
            raise RuntimeError(f"the return check neither creates a Job nor returns: {actions}")
        made += [a.job_kind for a in new]
        jobs += [passed_job(a.name, a.job_kind, "b") for a in new]
    raise RuntimeError("the return check made five Jobs without a return")


def cases() -> tuple[Case, ...]:
    reset_at = "2026-09-21T05:30:00Z GPU reset"
    reset_xid = Settings().reset_class_xids[0]
    return (
        Case("reboot", "Xid 79 cordon, node back with a new boot", chain()),
        Case(
            "reset",
            f"Xid {reset_xid} (reset-class) cordon, `reset-done` written",
            chain(boot="boot-1", guarded_xid=reset_xid, reset_done=reset_at),
        ),
        Case("device", "device taint, node back with a new boot", ("loadtest",)),
    )


def returned_after(case: Case, phase_s: int, delay_s: int, loop: bool, s: Settings) -> float:
    """Seconds from the node's return (`phase_s` after tick 0) to its return by the guard."""
    ready_at, step = float(phase_s), 0  # the next step's input is readable from `ready_at`
    tick = 0
    while True:
        start = tick * TICK_S + delay_s
        cycle_at = start + CYCLE_S
        instants = [float(cycle_at)]
        if loop:
            end = tick * TICK_S + s.watch_until_s
            poll = cycle_at + RETURN_POLL_S
            while poll < end:
                instants.append(float(poll))
                poll += RETURN_POLL_S
        for i, at in enumerate(instants):
            if at < ready_at:
                continue
            done = at + (TURN_S if i else 0)  # a poll's turn reads everything again first
            if step == len(case.jobs):
                return done - phase_s
            ready_at = done + JOB_START_S + DURATION_S[case.jobs[step]]
            step += 1
        tick += 1


def phases(step_s: int) -> tuple[int, ...]:
    if not 1 <= step_s <= TICK_S:
        raise ValueError(f"phase step must be in 1..{TICK_S} s")
    return tuple(range(0, TICK_S, step_s))


def time_to_return(step_s: int) -> tuple[Figures, ...]:
    s = Settings()
    out = []
    for case in cases():
        for loop in (True, False):
            times = tuple(
                returned_after(case, p, d, loop, s) for p in phases(step_s) for d in DELAYS_S
            )
            out.append(Figures(case, loop, times))
    return tuple(out)


def table(figures: tuple[Figures, ...], step_s: int) -> list[str]:
    """The docs/benchmarks.md table: one row per case and mode, with the done-when targets."""
    rows = [
        "| return | loop | checks | min | median | worst | median target | worst target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        checks = f.case.checks_s()
        median_ok = f.median <= checks + MEDIAN_MARGIN_S
        worst_ok = f.worst <= checks + WORST_MARGIN_S
        rows.append(
            f"| {f.case.title} ({' → '.join(f.case.jobs)}) | {'yes' if f.loop else 'no (before)'} "
            f"| {checks} s | {_mmss(f.low)} | {_mmss(f.median)} | {_mmss(f.worst)} "
            f"| ≤ {_mmss(checks + MEDIAN_MARGIN_S)} {'met' if median_ok else 'missed'} "
            f"| ≤ {_mmss(checks + WORST_MARGIN_S)} {'met' if worst_ok else 'missed'} |"
        )
    n = len(phases(step_s)) * len(DELAYS_S)
    rows += [
        "",
        f"({n} returns per row: the node back every {step_s} s of the {TICK_S} s slot × the"
        f" guard's pod starting {', '.join(map(str, DELAYS_S))} s after its tick; a Job's Pod"
        f" starts {JOB_START_S} s after its create, conformance {CONFORMANCE_S} s, load test"
        f" {LOADTEST_S} s; return poll every {RETURN_POLL_S} s until the watch's end,"
        f" {Settings().watch_until_s} s after the tick.)",
    ]
    return rows


def _mmss(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"
