"""Cost of one cycle: ``gpu-node-guard run --dry-run`` against its floor, each in a child process.

Per run: wall time of the process, the cycle's own time (`counts.elapsed_s`: after imports, the
reads, plan and print), the child's peak RSS, and the HTTP requests it made. Each figure is the
median of `reps` runs (RSS: the largest), after one unmeasured floor run that warms Prometheus
and the page cache. When the default Prometheus timeout aborts a run, that abort is recorded and
the measured runs use a longer timeout, so the table still says what the cycle costs.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from bench.proc import Measured, measure
from guard.doors.kube import PAGE
from guard.settings import CRONJOB_DEADLINE_S, MAX_SERIES

RUN_TIMEOUT_S = 1200
# The longest answer wait the settings take: below the CronJob's activeDeadlineSeconds.
LONG_QUERY_TIMEOUT = f"timeout={CRONJOB_DEADLINE_S - 10}"
# Above 20,000 nodes the host-label answers (one series per node) pass the default series cap;
# the largest cap the settings take is what a site of that size sets.
MOST_SERIES = f"series={MAX_SERIES}"


def remedy(abort: str) -> str:
    """The --prometheus-limits key that answers the abort `abort` of a guard run ("" for any
    other abort)."""
    if "--prometheus-limits series=" in abort:
        return MOST_SERIES
    if "no complete answer" in abort or "--prometheus-limits timeout=" in abort:
        return LONG_QUERY_TIMEOUT
    return ""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one cycle reads from, as arguments of the guard and of the floor."""

    mode: str  # "file" or "api"
    prometheus_url: str
    at: datetime
    guard_source: tuple[str, ...]
    floor_source: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Run:
    wall_s: float
    elapsed_s: float
    peak_rss_mb: float
    prometheus_requests: int
    api_requests: int
    error: str = ""
    actions: str = ""  # the plan as JSON text, to compare two variants
    query_s: tuple[tuple[str, float], ...] = ()  # the floor's seconds per query


@dataclass(frozen=True, slots=True)
class CycleCost:
    floor: Run
    guard: Run
    default_abort: str  # why the guard with default settings aborted; "" when it did not
    profile: str = ""  # bench.profile output (cpu, then mem); empty unless asked
    flags: tuple[str, ...] = ()  # what the measured guard runs added to the defaults


def at_text(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _run_argv(t: Target, module: list[str], extra: Sequence[str]) -> list[str]:
    """`python -m <module…> run --dry-run --output json` against the target."""
    return [
        sys.executable,
        "-m",
        *module,
        "run",
        "--dry-run",
        "--output",
        "json",
        "--prometheus-url",
        t.prometheus_url,
        "--at",
        at_text(t.at),
        *t.guard_source,
        *extra,
    ]


def run_guard(t: Target, module: str = "guard.cli", extra: Sequence[str] = ()) -> Run:
    done = measure(_run_argv(t, [module], extra), RUN_TIMEOUT_S)
    if done.returncode != 0:
        return _failed(done)
    answer = json.loads(done.stdout)
    counts = answer["counts"]
    return Run(
        done.wall_s,
        float(counts["elapsed_s"]),
        done.peak_rss_mb,
        int(counts["prometheus_requests"]),
        int(counts["api_requests"]),
        actions=json.dumps(answer["actions"], sort_keys=True),
    )


def run_floor(t: Target) -> Run:
    argv = [
        sys.executable,
        "-m",
        "bench.floor",
        "--prometheus-url",
        t.prometheus_url,
        "--page",
        str(PAGE),
        "--at",
        at_text(t.at),
        *t.floor_source,
    ]
    done = measure(argv, RUN_TIMEOUT_S)
    if done.returncode != 0:
        return _failed(done)
    answer = json.loads(done.stdout)
    return Run(
        done.wall_s,
        float(answer["elapsed_s"]),
        done.peak_rss_mb,
        int(answer["prometheus_requests"]),
        int(answer["api_requests"]),
        query_s=tuple((k, float(v)) for k, v in answer["query_s"].items()),
    )


def _failed(done: Measured) -> Run:
    lines = done.stderr.strip().splitlines()
    aborts = [line for line in lines if " abort " in line or line.startswith("Error")]
    reason = (aborts or lines or [f"exit {done.returncode}"])[-1]
    if "reason=" in reason:
        reason = reason.split("reason=", 1)[1].split(" next=")[0].strip('"')
    return Run(done.wall_s, 0.0, done.peak_rss_mb, 0, 0, error=reason)


def median_run(runs: Sequence[Run]) -> Run:
    """Median times, largest RSS; an error in any run is the result."""
    failed = [r for r in runs if r.error]
    if failed:
        return failed[0]
    return replace(
        runs[0],
        wall_s=statistics.median(r.wall_s for r in runs),
        elapsed_s=statistics.median(r.elapsed_s for r in runs),
        peak_rss_mb=max(r.peak_rss_mb for r in runs),
        query_s=tuple(
            (name, statistics.median(dict(r.query_s)[name] for r in runs))
            for name, _ in runs[0].query_s
        ),
    )


def profile_cycle(t: Target, extra: Sequence[str]) -> str:
    """bench.profile's cpu and mem reports for one cycle of the guard."""
    parts = []
    for kind in ("cpu", "mem"):
        done = measure(_run_argv(t, ["bench.profile", kind], extra), RUN_TIMEOUT_S)
        parts.append(done.stdout.strip() if done.returncode == 0 else _failed(done).error)
    return "\n\n".join(parts)


def measure_cycle(t: Target, reps: int, profile: bool = False) -> CycleCost:
    run_floor(t)  # warm-up: Prometheus caches and the page cache, not measured
    floor, guard, abort, flags = _interleaved(t, "guard.cli", reps)
    profiled = profile_cycle(t, flags) if profile else ""
    return CycleCost(floor, guard, abort, profiled, flags)


def _interleaved(t: Target, module: str, reps: int) -> tuple[Run, Run, str, tuple[str, ...]]:
    """Median floor and guard runs, alternating so that load on the machine hits both alike.

    First, unmeasured guard runs say whether the default settings abort: each abort the bench
    knows an answer to (`remedy`: a longer Prometheus timeout, the largest series cap) adds
    that answer's flags and runs again, as a site of that size would set them one after the
    other. The measured runs use what that gathered; the first abort and those flags are
    returned.
    """
    keys: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    first = ""
    while error := run_guard(t, module, extra).error:
        first = first or error
        more = remedy(error)
        if not more or more in keys:
            break  # not one the bench can answer: the measured runs report it
        keys += (more,)
        extra = ("--prometheus-limits", ",".join(keys))
    floors, guards = [], []
    for _ in range(reps):
        floors.append(run_floor(t))
        guards.append(run_guard(t, module, extra))
    return median_run(floors), median_run(guards), first, extra
