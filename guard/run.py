"""One run of `gpu-node-guard run` (docs/architecture.md, "One cycle"): one `Run`; the cycle is
its first read → plan → apply turn, each watch decision (guard/watch.py) a later one. The Lease
and the slot's record around a turn: docs/architecture.md; a refused cordon's fallback:
docs/writes.md.
"""

from __future__ import annotations

import functools
import json
import socket
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click

from guard.actions import Action, Cordon, TaintDevice, to_json
from guard.apply import KubeExecutor, PrintExecutor, cordon_landed, refused_cordons
from guard.apply.outcome import Outcome, RunTrace, failed, tally
from guard.bundle import BundleError, load_bundle
from guard.doors.kube import Kube, KubeError
from guard.doors.lease import CycleLease, holder_identity, slot_key
from guard.doors.prom import PromClient, PromError
from guard.doors.retry import Anchor, Backoff
from guard.jobs import JobTemplates, TemplateLoadError
from guard.ledger import format_time
from guard.log import Log, Value
from guard.model import Snapshot
from guard.names import CYCLE_LEASE
from guard.plan import hold, plan_cycle, plan_fallback, released
from guard.plan.deadlines import Deadlines, run_deadlines
from guard.plan.instant import SKEW_WARN_S, cycle_instant
from guard.plan.isolation import MAX_CORDON_TRIES
from guard.plan.pending import Waiting, pending
from guard.plan.watch import cron_slot, watch_end
from guard.read import (
    SNAPSHOT_COMMAND,
    SnapshotError,
    build_snapshot,
    load_cluster_file,
    read_cluster,
    read_prom,
    require_nodes,
)
from guard.read.prom_view import check_join, coverage_pairs
from guard.settings import Settings, setting_fields
from guard.settings_flags import layout_warnings

DRY_RUN_PROM_RETRY_S = 10.0  # how long a dry run retries a transient Prometheus answer


@dataclass(frozen=True, slots=True)
class Inputs:
    """How `run` was asked to read and what to do with the plan."""

    dry_run: bool
    at: datetime | None
    snapshot_file: Path | None
    output: str
    watch: bool = False


@dataclass(frozen=True, slots=True)
class Budget:
    """The run's deadlines on the monotonic clock from its start: the doors retry until the
    cycle's, then (the watch, the Lease's release) until the run's."""

    anchor: Anchor
    deadlines: Deadlines

    def cycle(self) -> Backoff:
        return Backoff(self.anchor.at(self.deadlines.cycle))

    def until(self, word: str, prom: PromClient | None, kube: Kube | None) -> None:
        """The doors retry until the cycle's deadline (`word` "cycle") or the run's ("run")."""
        end = self.anchor.at(self.deadlines.run if word == "run" else self.deadlines.cycle)
        for door in (prom, kube):
            if door is not None:
                door.backoff.until(end, word)


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did: the plan, what became of each action, and the counts built from that."""

    dry_run: bool
    actions: tuple[Action, ...]
    outcomes: tuple[Outcome, ...]
    counts: dict[str, Value]
    pending: tuple[Waiting, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``--output json``: each action with its outcome, the pending, the `done` counts."""
        rows = [
            {
                **to_json(o.action),
                "outcome": {"status": o.status, "reason": o.reason, "detail": o.detail},
            }
            for o in self.outcomes
        ]
        return {
            "at": self.counts["at"],
            "dry_run": self.dry_run,
            "actions": rows,
            "pending": [p.to_json() for p in self.pending],
            "counts": self.counts,
        }


class Yield(Exception):
    """This run decides nothing: another run holds the cycle's Lease, took it, or cordoned in
    this cron slot (guard/doors/lease.py). One line, exit 0."""

    def __init__(self, event: str, why: str, **fields: str) -> None:
        super().__init__(event)
        self.event, self.fields = event, {**fields, "lease": CYCLE_LEASE, "next": why}


@dataclass
class Run:
    """The run's one object: settings, clients, templates, log, Lease, executors, outcomes."""

    s: Settings
    trace: RunTrace  # the clients, the snapshot and the outcomes, as the push reads them
    log: Log
    decisions: Log  # the executors' lines (stdout for a dry run's text, else the run's log)
    inputs: Inputs
    budget: Budget
    lease: CycleLease | None = None
    slot: str = ""  # the cron slot recorded before a cordon ("": a replay or a dry run)
    released: frozenset[str] = frozenset()  # nodes the cycle's return check let go
    lost: bool = False

    @property
    def prom(self) -> PromClient:
        return self.trace.prom

    @property
    def kube(self) -> Kube | None:
        return self.trace.kube

    @property
    def templates(self) -> JobTemplates:
        assert self.trace.templates is not None
        return self.trace.templates

    @property
    def outcomes(self) -> list[Outcome]:
        return self.trace.outcomes

    def may_isolate(self) -> bool:
        """Not once an isolation landed in this run (one per run: the slot's record in the Lease
        says the same to the slot's other runs), nor once its Lease was lost."""
        return not self.lost and not cordon_landed(self.outcomes)

    def _slot(self, now: datetime) -> str:
        """The slot an isolation's writes record: the one they land in (a run started late ends
        after its own), so no two cordons land in one slot's time (a replay: its instant's)."""
        if self.inputs.at:
            return self.slot
        return format_time(cron_slot(now, self.s))

    def executor(self, snap: Snapshot) -> PrintExecutor | KubeExecutor:
        """A snapshot's executor (the cycle's, each watch decision's): one list of outcomes."""
        if self.inputs.dry_run:
            return PrintExecutor(self.decisions, self.inputs.output == "text", self.outcomes)
        assert self.kube is not None
        return KubeExecutor(self.kube, self.log, self.s, snap, socket.gethostname(), self.outcomes)

    def renew(self) -> bool:
        """The Lease renewed (no Lease: a dry run holds none); False once it is lost."""
        if self.lease is not None and not self.lost:
            self.lost = not self.lease.renew(self.budget.anchor.now())
        return not self.lost

    def turn(self, snap: Snapshot, actions: tuple[Action, ...]) -> None:
        """One decision's writes, after the Lease's renewal (with a cordon, the slot's record),
        the fallback after a refused cordon, and the record undone when no cordon landed."""
        if not actions:
            return
        now = self.budget.anchor.now()
        if self.lease is not None:
            isolates = self.slot and any(isinstance(a, Cordon | TaintDevice) for a in actions)
            held = self.lease.record(self._slot(now), now) if isolates else self.lease.renew(now)
            if not held:
                self.lost = True
                return
        executor = self.executor(snap)
        first = len(self.outcomes)
        for action in actions:
            executor.apply(action)
        self._fall_back(executor, snap, first)
        if self.lease is not None and self.lease.isolated and not cordon_landed(self.outcomes):
            self.lease.unrecord(self.budget.anchor.now())

    def _fall_back(
        self, executor: PrintExecutor | KubeExecutor, snap: Snapshot, first: int
    ) -> None:
        """A cordon the API refused in this turn: the next candidate is planned and written, one
        line per try, while the run may still isolate, up to MAX_CORDON_TRIES (docs/writes.md)."""
        refused = refused_cordons(self.outcomes[first:])
        while refused and self.may_isolate():
            more = plan_fallback(snap, self.s, self.templates, refused)
            if not more:
                return
            self.decisions.event(
                "cordon-fallback",
                "WARN",
                node=more[0].node,
                refused=",".join(sorted(refused)),
                attempt=len(refused) + 1,
                tries=MAX_CORDON_TRIES,
                next="the API refused the cordon above; the next candidate is cordoned instead",
            )
            for action in more:
                executor.apply(action)
            now = refused_cordons(self.outcomes[first:])
            if now == refused:  # not landed and not refused (changed under us, unreachable)
                return
            refused = now


def start(s: Settings, prom: PromClient, log: Log, inputs: Inputs, anchor: Anchor) -> int:
    """The run and its exit code: 1 after an abort (one line) or a failed write, else 0."""
    log.event(
        "start",
        mode="dry-run" if inputs.dry_run else "apply",
        at=inputs.at.isoformat() if inputs.at else "now",
    )
    log.emit("settings", _settings_fields(s))
    for warning in layout_warnings(s):
        log.emit("layout", dict(warning), "WARN")
    budget = Budget(anchor, run_deadlines(anchor.wall, s, inputs.watch))
    # A dry run is a person at a terminal: a mistyped Prometheus URL answers within seconds,
    # not after the CronJob's whole cycle budget of retries.
    prom.backoff = (
        Backoff.for_seconds(min(s.cycle_deadline_s, DRY_RUN_PROM_RETRY_S))
        if inputs.dry_run and not inputs.watch
        else budget.cycle()
    )
    prom.warn = functools.partial(_prom_warning, log)
    stream = sys.stderr if inputs.output == "json" else sys.stdout
    decisions = log
    if inputs.dry_run:
        decisions = Log(log.fmt, stream, log.clock, runbook_base_url=log.runbook_base_url)
    run = Run(s, RunTrace(prom), log, decisions, inputs, budget)
    code = run_code(run)
    if s.pushgateway_url and not inputs.dry_run:  # docs/metrics.md: after the last line
        from guard.apply.push import push_run  # the push's status report is loaded only to push

        ended = run.budget.anchor.now().timestamp()  # the run's clock, as the alerts' time()
        push_run(s, run.trace, code, ended, time.monotonic() - anchor.mono, log)
    return code


def run_code(run: Run) -> int:
    """The cycle (and its watch) and its exit code."""
    log, trace = run.log, run.trace
    try:
        trace.templates = load_bundle()  # every shipped file checked before anything
        result = _with_lease(run)
    except Yield as exc:
        if exc.event == "lease-held":
            trace.lease_held = run.budget.anchor.now().timestamp()
        log.event(exc.event, **exc.fields)
        return 0
    except Exception as exc:  # a bug or an unforeseen answer too: still one line, still exit 1
        if isinstance(exc, PromError | KubeError | SnapshotError | TemplateLoadError | BundleError):
            reason = str(exc)
            report = ""
        else:
            first = (str(exc).strip().splitlines() or [""])[0]
            reason = f"unexpected {type(exc).__name__}: {first}"
            report = "; please report"
        log.event("abort", "ERROR", reason=reason, next=f"no writes after this; exit 1{report}")
        return 1
    if run.inputs.output == "json":
        click.echo(json.dumps(result.to_json(), sort_keys=False))
    return 1 if failed(result.outcomes) else 0


def _settings_fields(s: Settings) -> dict[str, Value]:
    """The one `settings` line, sorted, values typed (lists comma-joined); no kubeconfig path."""
    values = sorted(
        (f.name, getattr(s, f.name)) for f in setting_fields() if f.name != "kubeconfig"
    )
    return {k: ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in values}


def _prom_warning(log: Log, query: str, warning: str) -> None:
    """A Prometheus warning that does not say the answer is partial: one line per text a run."""
    log.event(
        "prometheus-warning",
        "WARN",
        query=query,
        warning=warning,
        next="answer used (it does not say it is partial); later answers with this warning are"
        " used without a line (docs/runbook.md#prometheus-warning)",
    )


def _connect(run: Run) -> Kube:
    s = run.s
    run.trace.kube = Kube.connect(s.kubeconfig, None, run.budget.cycle(), s.api_timeout_s)
    return run.trace.kube


def _with_lease(run: Run) -> CycleResult:
    """The turns; a real run holds the cycle's Lease from before its reads to its end."""
    s, inputs = run.s, run.inputs
    if inputs.snapshot_file is not None or inputs.dry_run:
        return _turns(run)
    kube = _connect(run)
    if not inputs.at:
        _prometheus_clock(run)  # the slot, the deadlines and the Lease's times on its clock
    clock = run.budget.anchor
    this_slot = cron_slot(clock.now(), s)
    key = slot_key(s.annotation_prefix)
    expires_by = this_slot + timedelta(seconds=s.cadence_s)  # the next slot's start
    lease = CycleLease(kube, s.namespace, holder_identity(), s.lease_duration_s, key, expires_by)
    holder = lease.take(clock.now())
    if holder:
        why = "another run holds the cycle's Lease and decides this slot; exit 0"
        raise Yield("lease-held", why, holder=holder)
    run.trace.lease_taken = clock.now().timestamp()
    if lease.taken_over:
        was, why = lease.taken_over
        run.log.event(
            "lease-taken-over",
            "WARN",
            holder=was,
            reason=f"no run writes this Lease: {why}",
            lease=CYCLE_LEASE,
            next="this run holds it and decides; find who wrote it (docs/runbook.md)",
        )
    try:
        # A replay's writes (--at) take the slot guard too: its instant's slot (docs/lifecycle.md).
        run.slot = format_time(cron_slot(inputs.at, s) if inputs.at else this_slot)
        if run.slot and lease.isolated_slot() == run.slot:
            why = "one cordon per cron slot: a run of this slot cordoned; the next slot's run"
            raise Yield("slot-isolated", f"{why} decides; exit 0", slot=run.slot)
        run.lease = lease
        return _turns(run)
    finally:
        run.budget.until("run", run.prom, kube)  # an aborted cycle's release too
        try:
            lease.release(clock.now())
        except KubeError as exc:  # it expires on its own within the CronJob's deadline
            expires = f"the Lease expires {s.lease_duration_s}s after its last renewal"
            run.log.event("lease-release-failed", "WARN", reason=str(exc), next=expires)


def _turns(run: Run) -> CycleResult:
    """The cycle (the first turn: everything read, planned, applied), its `done` line, then the
    watch's turns (guard/watch.py) while the run may still isolate."""
    s, inputs, prom, log = run.s, run.inputs, run.prom, run.log
    started = time.monotonic()
    # The cluster first: its Node names join dcgm-exporter's series to Nodes (guard.read.prom_view).
    if inputs.snapshot_file is not None:  # a bad file is reported before any query runs
        objs = load_cluster_file(inputs.snapshot_file, s)
        if objs.gaps:
            step = f"the plan may miss incidents and Jobs; take it with `{SNAPSHOT_COMMAND}`"
            log.event("snapshot", "WARN", lacks="; ".join(objs.gaps), next=step)
    else:
        objs = require_nodes(read_cluster(run.kube or _connect(run), s))
    names = {n.name for n in objs.nodes}
    if not inputs.at and run.lease is None:  # a dry run: Prometheus' clock after the file's check
        _prometheus_clock(run)
    now = inputs.at or run.budget.anchor.now().replace(microsecond=0)
    view = read_prom(prom, s, now, names, dra_gpus=objs.dra_gpus())
    snap = run.trace.snap = build_snapshot(now, objs, view, s)
    missing = check_join(view, snap.nodes)  # no Xid series naming a Node: JoinError, abort
    if missing:
        log.emit("dcgm-missing", coverage_pairs(missing), "WARN")
    actions = plan_cycle(snap, s, run.templates)
    run.released = released(actions)
    run.turn(snap, actions)
    if run.lost:
        why = "another run took the cycle's Lease after this run's reads and decides this slot"
        raise Yield("lease-lost", f"{why}; no writes; exit 0")
    waiting = pending(snap, s)  # on their way to a cordon: one line each, after the decisions
    for p in waiting:
        run.decisions.decision(*p.log_line())
    run.decisions.summarise()
    outcomes = tuple(run.outcomes)
    kube = run.kube
    counts: dict[str, Value] = {
        "at": now.isoformat().replace("+00:00", "Z"),
        "nodes": len(snap.nodes),
        "candidates": len({c.node for c in hold.candidates(view, now, s)}),
        "pending": len(waiting),
        **tally(outcomes),
        "prometheus_requests": prom.requests_made,
        "prometheus_retries": prom.backoff.waits,
        "api_requests": kube.requests_made if kube else 0,
        "api_retries": kube.backoff.waits if kube else 0,
        "elapsed_s": round(time.monotonic() - started, 3),
    }
    bad = len(failed(outcomes))
    done = {k: v for k, v in counts.items() if k != "at"}
    if bad:
        done["next"] = f"exit 1: {bad} writes failed (write-failed lines above)"
    log.emit("done", done, "ERROR" if bad else "INFO")
    if inputs.watch and not bad:
        run.budget.until("run", prom, kube)  # the watch's reads and writes, the Lease's release
        if run.renew():
            from guard.watch import ReplayClock, RunClock, Watch  # watching runs only

            clock = ReplayClock(now) if inputs.at else RunClock(run.budget.anchor)
            end = watch_end(now, s) if inputs.at else run.budget.deadlines.watch_end
            Watch(run, snap, clock, end).watch()
        outcomes = tuple(run.outcomes)
    return CycleResult(inputs.dry_run, actions, outcomes, counts, waiting)


def _prometheus_clock(run: Run) -> None:
    """The run's clock becomes Prometheus' own (guard.plan.instant) on the monotonic clock: its
    queries, writes, deadlines, cron slot and Lease times. Clocks far apart are one WARN line."""
    theirs = run.prom.server_time()
    was = run.budget.anchor
    found = cycle_instant(was.now(), theirs)  # the pod's read after the answer came
    if found.skewed:
        ahead = "ahead of" if found.skew_s > 0 else "behind"
        run.log.event(
            "clock-skew",
            "WARN",
            skew_s=found.skew_s,
            prometheus=format_time(theirs),
            bound_s=SKEW_WARN_S,
            next=f"the pod's clock runs {ahead} Prometheus': queries, writes, deadlines and the"
            " Lease use Prometheus' time; check the nodes' time sync (docs/runbook.md#clock-skew)",
        )
    anchor = Anchor(was.wall + found.offset, was.mono, was.clock)
    run.budget = Budget(anchor, run_deadlines(anchor.wall, run.s, run.inputs.watch))
    dry = run.inputs.dry_run and not run.inputs.watch  # start(): a dry run's own budget
    run.budget.until("cycle", None if dry else run.prom, run.kube)
