"""Time to isolate: from the Xid to the first guard run whose plan cordons the node.

The CronJob runs on the wall-clock grid (*/5: :00, :05, …), so the ticks stay on it and the *Xid*
moves: for phase p the Xid lands p seconds after a tick, i.e. the ticks are onset − p + k·300 s.
Phases are p ≡ 164 (mod step) — 164 s is the 21 September incident itself (Xid at 05:52:44Z, tick
05:50:00Z) — so every Xid lands 1 s before a 15 s scrape, as it did then. The CronJob's pod never
starts exactly on the tick: each slot is also replayed with the guard starting `delay` seconds
after every tick (`DELAYS_S`: 0 and seconds 1–59 past the minute), and the lag is measured to
that start. The Job itself starts at the tick (`GUARD_JOB_NAME` carries its schedule, as the
CronJob's Job name does), so a late pod's watch still ends 240 s after the tick: the
`activeDeadlineSeconds` counts from the Job's start. The hold may never be shorter than the
setting: the minimum lag must be ≥ the hold.

One engine (Prometheus 2 or 3, …) holds every (case, phase) in its own 30-minute slot on its own
node: the Xid and the GPU loss (8 → 7 allocatable) start at the onset and clear 60 s before the
slot ends, so no two faults overlap and the guard's one-cordon-per-cycle rule never hides one.
Slot 0 is the incident at its real time. Each run is the real CLI in-process:
``gpu-node-guard run --dry-run --cluster-snapshot … --at <tick + delay> --output json``.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import click

from bench.openmetrics import check_matches_guard_writer, scenario_families, stamps
from bench.tsdb import build_blocks
from guard.cli import cli
from guard.settings import Settings
from tests.engines import Engine, serve
from tests.scenario_build import NodeTimeline, Scenario, incident

TICK_S = 300  # the CronJob's */5 schedule (Settings.cadence_s)
INCIDENT_TICK = datetime(2026, 9, 21, 5, 50, 0, tzinfo=UTC)
INCIDENT_PHASE_S = 164  # 05:52:44Z − 05:50:00Z
SCRAPE_S = Settings().scrape_interval_s  # the scenario's scrape is the one the guard is told
SLOT_S = 1800
LEAD_S = 600
CLEAR_BEFORE_END_S = 60
SEED_MEASURED_S = 12 * 60 + 26  # the write-up's guard: 14:52:44 → 15:05:10 KST


DELAYS_S = (0, 1, 4, 17, 31, 46, 59)  # the guard's start after the tick; 4 s as on 07:18:04


@dataclass(frozen=True, slots=True)
class Case:
    key: str
    title: str
    xid: int
    hold_s: int  # the setting: no lag may be shorter
    worst_target_s: int
    median_target_s: int | None
    # With the in-run watch (guard/watch.py): the hold, not the period, sets the time.
    watch_worst_s: int = 0
    watch_median_s: int | None = None

    def targets(self, watch: bool) -> tuple[int, int | None]:
        if watch:
            return self.watch_worst_s, self.watch_median_s
        return self.worst_target_s, self.median_target_s


_S = Settings()
CASES = (
    Case("xid79", "Xid 79 (fast path)", 79, _S.fast_hold_window_s, 450 + 59, 300 + 59, 240, 180),
    Case(
        "xid48", "Xid 48 + GPU loss (full hold window)", 48, _S.hold_window_s, 930 + 59, None, 720
    ),
)


@dataclass(frozen=True, slots=True)
class Slot:
    case: Case
    phase_s: int
    start: datetime  # a cron tick

    @property
    def node(self) -> str:
        return f"{self.case.key}-p{self.phase_s:03d}"

    @property
    def onset(self) -> datetime:
        return self.start + timedelta(seconds=self.phase_s)


@dataclass(frozen=True, slots=True)
class PhaseResult:
    slot: Slot
    delay_s: int  # the guard started this long after each tick
    decision: datetime | None  # None: no cordon within the slot's ticks
    ticks: int

    @property
    def lag_s(self) -> int | None:
        if self.decision is None:
            return None
        return int((self.decision - self.slot.onset).total_seconds())


@dataclass(frozen=True, slots=True)
class CaseSummary:
    case: Case
    results: tuple[PhaseResult, ...]

    @property
    def lags(self) -> list[int]:
        return sorted(r.lag_s for r in self.results if r.lag_s is not None)

    @property
    def complete(self) -> bool:
        return all(r.lag_s is not None for r in self.results)


def phases(step_s: int) -> tuple[int, ...]:
    if step_s % SCRAPE_S or not 0 < step_s <= TICK_S:
        raise click.BadParameter(f"phase step must be a multiple of {SCRAPE_S} s up to {TICK_S}")
    return tuple(range(INCIDENT_PHASE_S % step_s, TICK_S, step_s))


def slots(step_s: int) -> tuple[Slot, ...]:
    """The incident's own slot first (at its real time), then every other (case, phase)."""
    pairs = [(c, p) for c in CASES for p in phases(step_s)]
    pairs.sort(key=lambda cp: (cp != (CASES[0], INCIDENT_PHASE_S), cp[0].key, cp[1]))
    return tuple(
        Slot(c, p, INCIDENT_TICK + timedelta(seconds=i * SLOT_S)) for i, (c, p) in enumerate(pairs)
    )


def scenario(all_slots: tuple[Slot, ...]) -> Scenario:
    start = INCIDENT_TICK - timedelta(seconds=LEAD_S)

    def offset(at: datetime) -> int:
        return int((at - start).total_seconds())

    nodes = [
        NodeTimeline("bg-healthy"),
        NodeTimeline("bg-user13", xids=((0, 2, 13),)),
        NodeTimeline(
            "bg-human48", xids=((0, 1, 48),), allocatable=((0, 7),), unschedulable=((0, 1),)
        ),
    ]
    for slot in all_slots:
        on = -(-offset(slot.onset) // SCRAPE_S) * SCRAPE_S  # the exporter's next scrape
        clear = offset(slot.start) + SLOT_S - CLEAR_BEFORE_END_S
        nodes.append(
            NodeTimeline(
                slot.node,
                xids=((on, 4, slot.case.xid), (clear, 4, 0)),
                allocatable=((on, 7), (clear, 8)),
            )
        )
    return Scenario(start, LEAD_S + len(all_slots) * SLOT_S, tuple(nodes), SCRAPE_S)


def snapshot_list(sc: Scenario) -> dict[str, Any]:
    """The cluster as the API shows it before any cordon (only the person's cordon)."""
    items = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n.name, "resourceVersion": "1"},
            "spec": {"unschedulable": bool(n.unschedulable)},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"bootID": f"boot-{n.name}"},
                "capacity": {"nvidia.com/gpu": str(n.gpus)},
                "allocatable": {"nvidia.com/gpu": str(n.gpus)},
            },
        }
        for n in sc.nodes
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def plan_at(
    prometheus_url: str,
    snapshot: Path,
    at: datetime,
    watch: bool = False,
    tick: datetime | None = None,
) -> list[dict[str, Any]]:
    """One run of the real CLI, in-process (with `watch`: the cycle and its watch, in the
    replayed time; `tick`: the schedule of its Job); the actions as JSON."""
    scheduled = tick or at
    args = [
        "run",
        "--watch" if watch else "--no-watch",
        "--dry-run",
        "--output",
        "json",
        "--prometheus-url",
        prometheus_url,
        "--cluster-snapshot",
        str(snapshot),
        "--at",
        at.isoformat(),
    ]
    out, err = io.StringIO(), io.StringIO()
    try:
        job = {"GUARD_JOB_NAME": f"gpu-node-guard-{int(scheduled.timestamp()) // 60}"}
        with redirect_stdout(out), redirect_stderr(err), mock.patch.dict(os.environ, job):
            cli.main(args=args, prog_name="gpu-node-guard", standalone_mode=False)
    except SystemExit as exc:  # the run's own exit; 0 is a finished dry run
        if exc.code not in (0, None):
            raise RuntimeError(
                f"guard run at {at:%H:%M:%S} exited {exc.code}: {err.getvalue()}"
            ) from None
    actions: list[dict[str, Any]] = json.loads(out.getvalue())["actions"]
    return actions


def decide(
    prometheus_url: str, snapshot: Path, slot: Slot, delay_s: int, watch: bool = False
) -> PhaseResult:
    """The first run that cordons the slot's node, and when: the run's start, or with the
    watch the instant its watch decided (the cordon's `auto-cordon-at`)."""
    last_k = (SLOT_S - CLEAR_BEFORE_END_S) // TICK_S
    # From the slot's own tick: its run is before the Xid, but its watch is up after it.
    for k in range(0, last_k + 1):
        tick = slot.start + timedelta(seconds=k * TICK_S)
        run = tick + timedelta(seconds=delay_s)
        cordons = [
            a for a in plan_at(prometheus_url, snapshot, run, watch, tick) if a["type"] == "cordon"
        ]
        if any(a["node"] != slot.node for a in cordons):
            raise RuntimeError(f"slot {slot.node}: the run at {run} cordons {cordons}")
        if cordons:
            at = next(
                v for key, v in cordons[0]["annotations"].items() if key.endswith("auto-cordon-at")
            )
            decided = datetime.fromisoformat(at.replace("Z", "+00:00"))
            return PhaseResult(slot, delay_s, decided, k + 1)
    return PhaseResult(slot, delay_s, None, last_k + 1)


def time_to_isolate(
    step_s: int,
    engine: Engine = "prometheus2",
    delays: tuple[int, ...] = DELAYS_S,
    watch: tuple[bool, ...] = (False,),
) -> tuple[tuple[CaseSummary, ...], ...]:
    """Per `watch` mode, one summary per case (every mode over the same Prometheus)."""
    all_slots = slots(step_s)
    sc = scenario(all_slots)
    check_matches_guard_writer(incident())
    check_matches_guard_writer(replace(sc, duration_s=LEAD_S + 2 * SLOT_S))
    with tempfile.TemporaryDirectory(prefix="gng-isolate-") as tmp:
        workdir = Path(tmp)
        offsets, texts = stamps(sc.start.timestamp(), sc.duration_s, sc.scrape_s)
        build_blocks(scenario_families(sc), offsets, texts, workdir, engine)
        snapshot = workdir / "cluster.json"
        snapshot.write_text(json.dumps(snapshot_list(sc)), encoding="utf-8")
        end = sc.start + timedelta(seconds=sc.duration_s)
        with serve(workdir, engine, ready_at=end) as prom:
            found = {
                w: [decide(prom.url, snapshot, s, d, w) for s in all_slots for d in delays]
                for w in watch
            }
    return tuple(
        tuple(
            CaseSummary(c, tuple(sorted((r for r in found[w] if r.slot.case == c), key=_phase)))
            for c in CASES
        )
        for w in watch
    )


def _phase(r: PhaseResult) -> tuple[int, int]:
    return r.slot.phase_s, r.delay_s


def median_s(summary: CaseSummary) -> float:
    return float(statistics.median(summary.lags))
