"""From what every rank reported to one all-reduce result: who failed first, and the figures; pure,
so the attribution is tested without processes."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from statistics import fmean

from guard.loadtest.collective import (
    AllreducePlan,
    AllreduceResult,
    Mismatch,
    RankOutcome,
    RankReport,
    SizeFigure,
    Status,
    Step,
    bus_factor,
    silence_limit_s,
    stage,
)


# Which ranks failed by themselves (docs/loadtest.md, "Deadlines"): a rank that died unasked is
# the cause whenever there is one; else the first that reported an error; else the hung ones.
# Every other rank not done is "stopped" (waited, raised because of a peer, or ended by us).
def summarise(
    plan: AllreducePlan,
    all_steps: Sequence[Step],
    reports: Sequence[RankReport],
    hung: Sequence[int] = (),
) -> AllreduceResult:
    n_steps = len(all_steps)
    unfinished = [r for r in reports if not r.is_done(n_steps)]
    died = {r.rank for r in unfinished if r.exit is not None and not r.killed and r.error is None}
    raised = sorted((r for r in unfinished if r.error is not None), key=lambda r: r.error_seq)
    if died:
        causes: dict[int, Status] = dict.fromkeys(died, "died")
    elif raised:
        causes = {raised[0].rank: "error"}
    else:
        causes = dict.fromkeys(hung, "hung")
    mismatches = tuple(
        Mismatch(r.rank, all_steps[k].name, count)
        for r in reports
        for k, count in sorted(r.mismatches.items())
        if count
    )
    positions = [r.position for r in reports]
    hung_after_s = silence_limit_s(positions, plan) if "hung" in causes.values() else None
    return AllreduceResult(
        plan.spec.transport,
        plan.world,
        tuple(_outcome(r, all_steps, causes) for r in reports),
        _size_figures(plan, all_steps, reports),
        _gpu_busbw(plan, all_steps, reports),
        mismatches,
        hung_after_s,
    )


def _outcome(
    report: RankReport, all_steps: Sequence[Step], causes: dict[int, Status]
) -> RankOutcome:
    where = stage(report.position, all_steps)
    if report.is_done(len(all_steps)):
        return RankOutcome(report.rank, "ok", where)
    status: Status = causes.get(report.rank, "stopped")
    detail = report.error or (exit_text(report.exit) if status == "died" else "")
    if status == "died" and report.log_tail:
        detail += f" last_output={report.log_tail!r}"
    return RankOutcome(report.rank, status, where, detail)


def exit_text(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"signal={signal.Signals(-code).name}"
        except ValueError:
            return f"signal={-code}"
    return f"exit={code}"


def _timed(reports: Sequence[RankReport], k: int, ranks: Sequence[int]) -> float | None:
    """Mean seconds of step `k` over `ranks`, as nccl-tests averages; None unless all timed it."""
    values = [reports[r].seconds.get(k) for r in ranks]
    numbers = [v for v in values if v is not None and v > 0]
    return fmean(numbers) if len(numbers) == len(values) and numbers else None


def _size_figures(
    plan: AllreducePlan, all_steps: Sequence[Step], reports: Sequence[RankReport]
) -> tuple[SizeFigure, ...]:
    figures = []
    for k, step in enumerate(all_steps):
        seconds = _timed(reports, k, range(plan.world)) if not step.pairs else None
        if seconds is not None:
            algbw = step.size_bytes / seconds / 1e9
            figures.append(
                SizeFigure(step.size_bytes, seconds, algbw, algbw * bus_factor(plan.world))
            )
    return tuple(figures)


def _gpu_busbw(
    plan: AllreducePlan, all_steps: Sequence[Step], reports: Sequence[RankReport]
) -> tuple[float | None, ...]:
    """Each GPU's best pair (three or more ranks); with two, both have the node's figure."""
    if plan.world == 2:
        figures = _size_figures(plan, all_steps, reports)
        largest = max(figures, key=lambda f: f.size_bytes, default=None)
        return (largest.busbw_gbps,) * 2 if largest else (None, None)
    best: dict[int, float] = {}
    for k, step in enumerate(all_steps):
        for pair in step.pairs:
            seconds = _timed(reports, k, pair)
            if seconds is not None:
                busbw = step.size_bytes / seconds / 1e9 * bus_factor(2)
                for rank in pair:
                    best[rank] = max(best.get(rank, busbw), busbw)
    return tuple(best.get(rank) for rank in range(plan.world))
