"""What the in-run watch asks of Prometheus, per minute, at one cluster size.

``python -m bench.watch_cost --nodes 5000 [--reps 5]`` builds the cycle bench's synthetic
cluster (`bench.synthetic`: N nodes × 8 GPUs, the role nodes with their faults, the same TSDB
the cycle bench reads) in a real Prometheus and times the watch's own PromQL, as
`guard.watch` sends it: the poll (`guard.codec.queries.watch_poll`, once per `scrape_interval_s`)
and a decision's four narrowed queries (`guard.codec.queries.hold_queries`, for the new Xid 79 node,
its loss history on the scrape grid), and
one cycle's queries (`guard.codec.queries.guard_queries`) beside them for scale. Prints
a Markdown table: seconds per query (median of `--reps`), and seconds of Prometheus time per
minute of watching with no decision and with one.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import requests

from bench.openmetrics import stamps
from bench.report import table
from bench.synthetic import ClusterSpec, families
from bench.tsdb import build_blocks
from guard.codec import queries
from guard.codec.series import on_step
from guard.plan.watch import fine
from guard.settings import Settings
from tests.engines import serve


def timed(session: requests.Session, url: str, q: queries.Query, at: float) -> float:
    form = {"query": q.promql, "time": f"{at:.3f}"}
    started = time.monotonic()
    answer = session.post(f"{url}/api/v1/query", data=form, timeout=600).json()
    if answer.get("status") != "success":
        raise click.ClickException(f"query {q.name}: {str(answer)[:200]}")
    return time.monotonic() - started


@click.command()
@click.option("--nodes", type=click.IntRange(10, 100_000), default=5000, show_default=True)
@click.option("--reps", type=click.IntRange(1, 50), default=5, show_default=True)
def main(nodes: int, reps: int) -> None:
    spec, s = ClusterSpec(nodes), Settings()
    fault = next(name for name, role in spec.roles().items() if role == "fault-79")
    with tempfile.TemporaryDirectory(prefix="gng-watch-") as tmp:
        workdir = Path(tmp)
        offsets, texts = stamps(spec.start.timestamp(), spec.data_s, spec.scrape_s)
        built = build_blocks(families(spec), offsets, texts, workdir)
        with serve(workdir, timeout_s=300) as prom:
            session = requests.Session()
            sent = (queries.watch_poll(s), *queries.hold_queries(fine(s), fault))
            cycle = queries.guard_queries(s)  # beside them, for scale: one cycle's queries
            took: dict[str, list[float]] = {q.name: [] for q in sent}
            whole: list[float] = []

            def at(q: queries.Query, step_s: int = s.query_step_s) -> float:
                return (on_step(spec.at, step_s) if q.on_step else spec.at).timestamp()

            for _ in range(reps + 1):  # the first round warms Prometheus; not counted
                for q in sent:
                    took[q.name].append(timed(session, prom.url, q, at(q, s.scrape_interval_s)))
                whole.append(sum(timed(session, prom.url, q, at(q)) for q in cycle))
    median = {name: statistics.median(values[1:]) for name, values in took.items()}
    poll = median[queries.WATCH_POLL]
    decision = sum(v for k, v in median.items() if k != queries.WATCH_POLL)
    per_minute = 60 / s.scrape_interval_s
    rows = [[name, f"{value:.3f}"] for name, value in median.items()]
    rows += [
        [f"per minute, polls only ({per_minute:g} polls)", f"{per_minute * poll:.3f}"],
        ["per minute with one decision", f"{per_minute * poll + decision:.3f}"],
        [f"one cycle's {len(cycle)} queries, for scale", f"{statistics.median(whole[1:]):.3f}"],
    ]
    click.echo(f"{nodes:,} nodes, {built.series:,} series; decision node {fault}; median of {reps}")
    click.echo("")
    click.echo("\n".join(table(["query", "seconds"], rows)))


if __name__ == "__main__":
    sys.exit(main())
