"""``python -m bench`` (``make bench``): time to isolate, time to return and the cost of one cycle,
as tables.

Progress goes to stderr; the Markdown report goes to stdout (and to --save FILE).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from bench import isolate, live, report, returns
from bench.apimode import unavailable
from bench.machine import describe
from bench.scale import Plan, SizeResult, measure_size
from guard.settings import Settings
from tests.engines import ENGINES, Engine, PrometheusUnavailable, binaries

_STARTED = time.monotonic()
GROWTH_SIZES = (100, 1_000, 5_000, 10_000, 20_000, 50_000)


def _say(text: str) -> None:
    click.echo(f"[{time.monotonic() - _STARTED:6.0f} s] {text}", err=True)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of node counts") from None
    if not sizes or min(sizes) < 10:
        raise click.BadParameter("each size must be at least 10 nodes")
    return sizes


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="100 nodes, one run each, a 60 s phase step.")
@click.option("--sizes", default="100,1000,5000", show_default=True, help="Node counts.")
@click.option(
    "--growth",
    is_flag=True,
    help=f"The growth table: sizes {','.join(map(str, GROWTH_SIZES))}, one run each (--reps 1).",
)
@click.option(
    "--reps",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Runs per figure (median).",
)
@click.option("--phase-step", default=15, show_default=True, help="Seconds between phases.")
@click.option("--api/--no-api", default=True, show_default=True, help="Also the API-server mode.")
@click.option(
    "--profile/--no-profile",
    default=False,
    show_default=True,
    help="Profile time and memory of one cycle at the largest size.",
)
@click.option(
    "--engines",
    default="prometheus2,prometheus3",
    show_default=True,
    help="Engines for the time-to-isolate bench (tests.engines.ENGINES).",
)
@click.option(
    "--live/--no-live",
    default=False,
    show_default=True,
    help="Also the worst watch phase live: one real-time run through a kube-apiserver (5 min).",
)
@click.option(
    "--only",
    type=click.Choice(["all", "isolate", "cycle", "return", "live"]),
    default="all",
)
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), help="Also write here.")
def main(
    quick: bool,
    growth: bool,
    sizes: str,
    reps: int,
    phase_step: int,
    api: bool,
    profile: bool,
    engines: str,
    live: bool,
    only: str,
    save: Path | None,
) -> None:
    """Benchmarks of gpu-node-guard against a real Prometheus (and kube-apiserver)."""
    try:
        if only != "return":  # the return bench replays the schedule: no Prometheus
            binaries()
    except PrometheusUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    started = time.monotonic()
    node_counts = (100,) if quick else GROWTH_SIZES if growth else _sizes(sizes)
    reps, phase_step = (1, 60) if quick else (1 if growth else max(1, reps), phase_step)
    isolate.phases(phase_step)  # a bad step is a usage error before any work
    chosen = tuple(e.strip() for e in engines.split(",") if e.strip())
    unknown = [e for e in chosen if e not in ENGINES]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown engine {unknown}; choose from {', '.join(ENGINES)}")
    if only in ("all", "isolate"):
        for engine in chosen:
            try:
                binaries(engine)  # type: ignore[arg-type]
            except PrometheusUnavailable as exc:
                raise click.ClickException(f"{engine}: {exc}; {exc.how}") from None
    lines = ["## Machine", "", *report.table(["", ""], describe()), ""]
    try:
        if only in ("all", "isolate"):
            for engine in chosen:
                lines += _isolation(phase_step, engine)  # type: ignore[arg-type]
        if only in ("all", "return"):
            lines += _returns(phase_step)
        if only in ("all", "cycle"):
            lines += _cycles(node_counts, reps, api, profile)
        if only == "live" or (live and only == "all"):
            lines += _live()
    except (PrometheusUnavailable, RuntimeError, OSError) as exc:
        raise click.ClickException(str(exc).strip().splitlines()[0]) from None
    lines += [
        f"Total bench run time: {time.monotonic() - started:.0f} s "
        f"(`python -m bench {' '.join(sys.argv[1:])}`).".replace(" `)", "`)"),
        "",
    ]
    text = "\n".join(lines)
    click.echo(text)
    if save is not None:
        save.write_text(text, encoding="utf-8")


def _isolation(step_s: int, engine: Engine) -> list[str]:
    _say(f"time to isolate on {engine}: phases every {step_s} s …")
    started = time.monotonic()
    without, watched = isolate.time_to_isolate(step_s, engine, watch=(False, True))
    took = time.monotonic() - started
    runs = sum(len(s.results) for s in (*without, *watched))
    return [
        f"## Time to isolate ({engine})",
        "",
        f"With the in-run watch (the run stays up {Settings().watch_until_s} s and cordons when"
        " the hold completes):",
        "",
        *report.isolation(watched, step_s, watch=True),
        "",
        "Each run's cycle only (`--no-watch`): the next tick decides.",
        "",
        *report.isolation(without, step_s),
        "",
        f"({took:.0f} s: one {engine}, {runs} phase × start delay replays, "
        f"{sum(r.ticks for s in (*without, *watched) for r in s.results)} guard runs.)",
        "",
    ]


def _returns(step_s: int) -> list[str]:
    _say(f"time to return: phases every {step_s} s …")
    return [
        "## Time to return",
        "",
        "From a repaired node's return (Ready with a new boot, or `reset-done` written) to its"
        " uncordon (the device taint's removal); `loop`: the run's return turns (guard/returns.py)"
        " take each step as its result is readable, else one step per run's cycle.",
        "",
        *returns.table(returns.time_to_return(step_s), step_s),
        "",
    ]


def _live() -> list[str]:
    r = live.live_worst_phase(_say)
    lag = "no cordon" if r.lag_s is None else f"{r.lag_s} s (decided at +{r.decided_s} s)"
    row = [
        f"Xid 79, phase {r.phase_s} s",
        lag,
        str(r.rc),
        f"{r.wall_s:.0f} s",
        r.watch_why,
        str(r.prometheus_requests),
        str(r.api_requests),
        "yes" if r.released else "no",
        ", ".join(r.problems) or "none",
    ]
    header = ["phase", "lag", "exit", "run", "watch-end", "Prom req", "API req", "released"]
    return [
        "## Time to isolate, live (kube-apiserver, real time, every default)",
        "",
        *report.table([*header, "WARN/ERROR lines"], [row]),
        "",
    ]


def _cycles(node_counts: tuple[int, ...], reps: int, api: bool, profile: bool) -> list[str]:
    if api and unavailable():
        _say(f"API mode skipped: {unavailable()}")
    results: list[SizeResult] = []
    for nodes in node_counts:
        _say(f"cost of one cycle: {nodes:,} nodes …")
        plan = Plan(reps, api, profile and nodes == node_counts[-1])
        results.append(measure_size(nodes, plan, _say))
    lines = ["## Cost of one cycle", ""]
    for mode, title in (("file", "--cluster-snapshot List file"), ("api", "kube-apiserver")):
        rows = report.cycle(results, mode)
        if not rows:
            note = results[-1].api_note if results else ""
            lines += [f"### Cluster from the {title}: skipped ({note})", ""]
            continue
        judged = "Targets (judged at the largest size run):"
        lines += [f"### Cluster from the {title}", "", *rows, "", judged, ""]
        lines += report.targets(results, mode)
        lines += [""]
    lines += [
        "### Seconds per query (file-mode floor, median)",
        "",
        *report.query_times(results),
        "",
    ]
    lines += [
        "TSDB per size: "
        + "; ".join(
            f"{r.nodes:,} nodes {r.tsdb.series:,} series / {r.tsdb.samples:,} samples "
            f"(promtool {r.tsdb.promtool_s:.0f} s)"
            for r in results
        )
        + ".",
        "",
    ]
    return lines + report.profiles(results)


if __name__ == "__main__":
    main()
