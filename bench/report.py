"""Markdown tables of both benchmarks, with each target marked met or missed."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import yaml

from bench.cycle import CycleCost, Run
from bench.isolate import INCIDENT_PHASE_S, SEED_MEASURED_S, CaseSummary, median_s
from bench.scale import SizeResult

WALL_RATIO_TARGET = 1.5
RSS_SHARE_OF_LIMIT = 0.6  # peak RSS at most 60 % of the CronJob's memory limit
PAGE = 500
CRONJOB = Path(__file__).resolve().parents[1] / "manifests" / "base" / "cronjob.yaml"
_UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def cronjob_memory_limit_mb() -> float:
    """The guard container's memory limit in manifests/base/cronjob.yaml, in MB (10^6 bytes,
    as the RSS figures)."""
    doc = yaml.safe_load(CRONJOB.read_text(encoding="utf-8"))
    pod = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    text = str(pod["containers"][0]["resources"]["limits"]["memory"])
    unit = next((u for u in _UNITS if text.endswith(u)), "")
    return int(text.removesuffix(unit)) * _UNITS.get(unit, 1) / 1e6


def rss_target_mb() -> float:
    return RSS_SHARE_OF_LIMIT * cronjob_memory_limit_mb()


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "none in slot"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def isolation(summaries: Sequence[CaseSummary], step_s: int, watch: bool = False) -> list[str]:
    rows = []
    for s in summaries:
        lags, c = s.lags, s.case
        worst_target, median_target = c.targets(watch)
        worst = max(lags) if s.complete else None
        ok = worst is not None and worst <= worst_target and min(lags) >= c.hold_s
        target = f"min ≥ hold {duration(c.hold_s)}, worst ≤ {duration(worst_target)}"
        if median_target is not None:
            target += f", median ≤ {duration(median_target)}"
            ok = ok and median_s(s) <= median_target
        rows.append(
            [
                c.title,
                str(len(s.results)),
                duration(min(lags) if lags else None),
                duration(median_s(s) if lags else None),
                duration(worst),
                target,
                verdict(ok),
            ]
        )
    rows.append(
        [
            "write-up's guard, 21 September (10-minute window for every Xid)",
            "1",
            "",
            duration(SEED_MEASURED_S),
            "",
            "",
            "",
        ]
    )
    out = table(["case", "runs", "min", "median", "max", "target", ""], rows)
    delays = sorted({r.delay_s for r in summaries[0].results})
    out += [
        "",
        f"Per phase (Xid p s after a */5 tick; p = {INCIDENT_PHASE_S} is 21 September; "
        f"step {step_s} s); each cell: guard started on the tick / the range over start delays "
        f"{', '.join(str(d) for d in delays)} s:",
        "",
    ]
    per_phase = []
    for phase in sorted({r.slot.phase_s for r in summaries[0].results}):
        row = [f"{phase} s"]
        for s in summaries:
            mine = [r for r in s.results if r.slot.phase_s == phase]
            on_tick = [r.lag_s for r in mine if r.delay_s == 0]
            lags_here = [r.lag_s for r in mine if r.lag_s is not None]
            span = f"{duration(min(lags_here))}–{duration(max(lags_here))}" if lags_here else ""
            row.append(f"{duration(on_tick[0] if on_tick else None)} / {span}")
        per_phase.append(row)
    out += table(["phase", *(s.case.title for s in summaries)], per_phase)
    # The pod's start after its Job's schedule moves the worst case: the watch ends 240 s after
    # the schedule, the next run decides at its own start.
    per_delay = []
    for delay in delays:
        row = [f"{delay} s"]
        for s in summaries:
            here = sorted(r.lag_s for r in s.results if r.delay_s == delay and r.lag_s is not None)
            row.append(
                f"{duration(statistics.median(here))} / {duration(here[-1])}" if here else ""
            )
        per_delay.append(row)
    out += ["", "Per start delay (all phases); each cell: median / max:", ""]
    return out + table(["start delay", *(s.case.title for s in summaries)], per_delay)


def cycle(results: Sequence[SizeResult], mode: str) -> list[str]:
    rows = []
    for r in results:
        cost = r.file if mode == "file" else r.api
        if cost is None:
            continue
        g, f = cost.guard, cost.floor
        rows.append(
            [
                f"{r.nodes:,}",
                f"{r.objects:,} ({r.snapshot_mb:.0f} MB)",
                _requests(g),
                _requests(f),
                _secs(g.wall_s, g),
                _secs(f.wall_s, f),
                _ratio(g.wall_s, f.wall_s, g, f),
                _secs(g.elapsed_s, g),
                _secs(f.elapsed_s, f),
                _ratio(g.elapsed_s, f.elapsed_s, g, f),
                f"{g.peak_rss_mb:.0f}",
                f"{f.peak_rss_mb:.0f}",
                *_above_floor(g, f, r.nodes),
            ]
        )
    if not rows:
        return []
    header = [
        "nodes",
        "objects (List file)",
        "guard requests prom / API",
        "floor requests prom / API",
        "guard wall s",
        "floor wall s",
        "wall ratio",
        "guard cycle s",
        "floor cycle s",
        "cycle ratio",
        "guard peak RSS MB",
        "floor peak RSS MB",
        "guard − floor MB",
        "bytes per node above the floor",
    ]
    aborts = _aborts(results, mode)
    return [*table(header, rows), *(["", *aborts] if aborts else [])]


def _above_floor(g: Run, f: Run, nodes: int) -> list[str]:
    """What the guard's peak RSS adds to the floor's, in all and per node (the per-node record
    plus the fixed cost of the client and the planners, spread over the nodes)."""
    if g.error or f.error:
        return ["—", "—"]
    above = g.peak_rss_mb - f.peak_rss_mb
    return [f"{above:.0f}", f"{above * 1e6 / nodes:,.0f}"]


def _requests(run: Run) -> str:
    return "—" if run.error else f"{run.prometheus_requests} / {run.api_requests}"


def _secs(value: float, run: Run) -> str:
    return "aborted" if run.error else f"{value:.2f}"


def _ratio(a: float, b: float, ra: Run, rb: Run) -> str:
    return "—" if ra.error or rb.error or b <= 0 else f"{a / b:.2f}"


def _aborts(results: Sequence[SizeResult], mode: str) -> list[str]:
    lines = []
    for r in results:
        cost = r.file if mode == "file" else r.api
        if cost is None and mode == "api":
            lines.append(f"- {r.nodes:,} nodes: API mode {r.api_note}.")
        elif cost is not None and cost.guard.error:
            lines.append(
                f"- {r.nodes:,} nodes: the measured guard run aborted (`{cost.guard.error}`)."
            )
        elif cost is not None and cost.default_abort:
            lines.append(
                f"- {r.nodes:,} nodes: with default settings the guard aborted "
                f"(`{cost.default_abort}`); the row above ran with "
                f"`{' '.join(cost.flags)}`."
            )
    return lines


def targets(results: Sequence[SizeResult], mode: str) -> list[str]:
    """The issue's three targets, judged at the largest size of this mode."""
    costs = [(r, r.file if mode == "file" else r.api) for r in results]
    measured = [(r, c) for r, c in costs if c is not None and not c.guard.error]
    if not measured:
        return [f"- {mode} mode: no successful guard run to judge"]
    big, cost = measured[-1]
    g, f = cost.guard, cost.floor
    prom = {c.guard.prometheus_requests for _, c in measured}
    ratio = g.wall_s / f.wall_s if f.wall_s else math.inf
    return [
        *_growth(measured),
        f"- Prometheus requests per cycle: {sorted(prom)} at every size — "
        f"{verdict(len(prom) == 1)} (independent of node count)",
        *_api_growth(measured, mode),
        f"- wall time at {big.nodes:,} nodes: {g.wall_s:.2f} s = {ratio:.2f}× the floor "
        f"(target ≤ {WALL_RATIO_TARGET}×) — {verdict(ratio <= WALL_RATIO_TARGET)}",
        f"- peak RSS at {big.nodes:,} nodes: {g.peak_rss_mb:.0f} MB (target ≤ "
        f"{rss_target_mb():.0f} MB, {RSS_SHARE_OF_LIMIT:.0%} of the CronJob's memory limit "
        f"{cronjob_memory_limit_mb():.0f} MB; floor {f.peak_rss_mb:.0f} MB) — "
        f"{verdict(g.peak_rss_mb <= rss_target_mb())}",
    ]


def _growth(measured: Sequence[tuple[SizeResult, CycleCost]]) -> list[str]:
    """Bytes each further node adds to the guard's peak RSS, between consecutive sizes: the
    per-node cost, without the fixed cost that dominates "bytes per node above the floor" at
    small sizes."""
    steps = []
    for (a, ca), (b, cb) in itertools.pairwise(measured):
        added = (cb.guard.peak_rss_mb - ca.guard.peak_rss_mb) * 1e6 / (b.nodes - a.nodes)
        steps.append(f"{a.nodes:,}→{b.nodes:,}: {added:,.0f}")
    return [f"- peak RSS added per node (bytes): {'; '.join(steps)}"] if steps else []


def _api_growth(measured: Sequence[tuple[SizeResult, CycleCost]], mode: str) -> list[str]:
    """API requests beyond the node-list pages must not grow with the cluster."""
    if mode == "file":
        return []
    pages = [math.ceil(r.nodes / PAGE) for r, _ in measured]
    others = [c.guard.api_requests - p for (_, c), p in zip(measured, pages, strict=True)]
    shown = ", ".join(
        f"{c.guard.api_requests} = {p} node pages + {o}"
        for (_, c), p, o in zip(measured, pages, others, strict=True)
    )
    flat = len(set(others)) == 1
    return [
        f"- API requests: {shown}; beyond the node list's pages of {PAGE} the count "
        f"{'stays the same' if flat else 'grows'} — {verdict(flat)}"
    ]


def query_times(results: Sequence[SizeResult]) -> list[str]:
    """Seconds per PromQL query of the floor at every size (median of the runs)."""
    columns = [(r, r.file) for r in results]
    if not columns or not columns[0][1].floor.query_s:
        return []
    names = [name for name, _ in columns[0][1].floor.query_s]
    header = ["query", *(f"{r.nodes:,} nodes, s" for r, _ in columns)]
    rows = [[name, *(_query_cell(c, name) for _, c in columns)] for name in names]
    return table(header, rows)


def _query_cell(cost: CycleCost, name: str) -> str:
    took = dict(cost.floor.query_s).get(name)
    return "—" if took is None else f"{took:.2f}"


def profiles(results: Sequence[SizeResult]) -> list[str]:
    lines = []
    for r in results:
        for mode, cost in (("file", r.file), ("api", r.api)):
            if cost is not None and cost.profile:
                title = f"### Profile of one cycle: {r.nodes:,} nodes, {mode} mode"
                lines += [title, "", "```", cost.profile, "```", ""]
    return lines
