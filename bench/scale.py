"""One cluster size, end to end: TSDB, List file, Prometheus, then file mode and API mode."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

from bench import apimode
from bench.cluster import write_list
from bench.cycle import CycleCost, Target, measure_cycle
from bench.openmetrics import stamps
from bench.synthetic import ClusterSpec, families
from bench.tsdb import BuiltTsdb, build_blocks
from guard.settings import Settings
from tests.engines import serve

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SizeResult:
    nodes: int
    objects: int  # Nodes + Pods + the ledger ConfigMap
    snapshot_mb: float
    tsdb: BuiltTsdb
    file: CycleCost
    api: CycleCost | None
    api_note: str  # why API mode did not run, or how long filling the API server took


@dataclass(frozen=True, slots=True)
class Plan:
    """What to measure at one size."""

    reps: int
    api: bool
    profile: bool


def measure_size(nodes: int, plan: Plan, say: Say) -> SizeResult:
    spec, s = ClusterSpec(nodes), Settings()
    with tempfile.TemporaryDirectory(prefix="gng-bench-") as tmp:
        workdir = Path(tmp)
        offsets, texts = stamps(spec.start.timestamp(), spec.data_s, spec.scrape_s)
        built = build_blocks(families(spec), offsets, texts, workdir)
        say(
            f"[{nodes} nodes] TSDB: {built.series:,} series, {built.samples:,} samples "
            f"(write {built.write_s:.1f} s, promtool {built.promtool_s:.1f} s)"
        )
        snapshot = workdir / "cluster.json"
        objects, size = write_list(spec, s, snapshot)
        say(f"[{nodes} nodes] List file: {objects:,} objects, {size / 1e6:.1f} MB")
        with serve(workdir, timeout_s=300) as prom:
            path = str(snapshot)
            target = Target(
                "file", prom.url, spec.at, ("--cluster-snapshot", path), ("--snapshot", path)
            )
            file_cost = measure_cycle(target, plan.reps, plan.profile)
            say(f"[{nodes} nodes] file mode: guard {file_cost.guard.wall_s:.2f} s wall")
            api_cost, note = None, apimode.unavailable() if plan.api else "not asked (--no-api)"
            if plan.api and not note:
                api_cost, note = _api(spec, s, workdir, prom.url, plan, say)
    return SizeResult(nodes, objects, size / 1e6, built, file_cost, api_cost, note)


def _api(
    spec: ClusterSpec,
    s: Settings,
    workdir: Path,
    prometheus_url: str,
    plan: Plan,
    say: Say,
) -> tuple[CycleCost | None, str]:
    """The API-mode cost; a control plane that fails to start or fill is a note, not a crash."""
    started = time.monotonic()
    try:
        with apimode.api_cluster(spec, s, workdir / "apiserver", prometheus_url) as (
            target,
            filled,
        ):
            say(f"[{spec.nodes} nodes] API server filled in {filled:.0f} s")
            cost = measure_cycle(target, plan.reps, plan.profile)
            say(f"[{spec.nodes} nodes] API mode: guard {cost.guard.wall_s:.2f} s wall")
    except (RuntimeError, requests.RequestException) as exc:
        reason = str(exc).splitlines()[0][:200]
        say(f"[{spec.nodes} nodes] API mode failed: {reason}")
        return None, f"failed: {reason}"
    return cost, f"control plane started and filled in {time.monotonic() - started:.0f} s"
