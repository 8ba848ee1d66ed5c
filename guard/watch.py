"""The in-run watch: after its cycle, `run` stays up and cordons a hold when it completes, not
at the next tick.

It waits for the holds pending at its start (guard.plan.watch `dues`: hardware Xids and the
driver/NVML mismatch; for a mismatch it also re-reads the node's nvidia-match history and
status, `guard.read.queries.mismatch_queries`) and polls with one query
per scrape (`Settings.scrape_interval_s`; `guard.read.queries.watch_poll`: hardware Xid and GPU loss
now, not cordoned) for faults that appear while it is up. When a node's hold is due it re-reads
only that node — its Xids, its loss history on the scrape grid, its cordon in kube-state-metrics
(`guard.read.queries.hold_queries`), its Node object — and the isolation check plans on the cycle's
snapshot with those facts
(guard.plan.watch `decision_snapshot`): the same breaker, hold and cancel checks, the Node's
resourceVersion as re-read for the cordon's precondition, a person's cordon winning
(`already-cordoned`). At most one cordon per run: after a cordon landed in the cycle the watch
decides nothing and only holds the cycle's Lease until its end (a run started beside this one in
the same slot then finds the Lease held); after a cordon of its own it does the same. Each
decision's writes come right after a renewal of the Lease: a lost one means no writes. It ends at
`Settings.watch_until_s` after its Job's schedule (guard.plan.watch `watch_end`), when the
cycle's Lease is lost, or when a read still fails after its retries (one WARN `watch-end` line;
the cycle's exit code stands); a hold that cannot complete by then is the next run's. Its API
and Prometheus requests retry until the run's deadline (guard.plan.deadlines, after its end: its
last decision's writes and the Lease's release fit in), not the cycle's; the live watch's time
is the monotonic clock's from the run's start, never ahead of Prometheus' (`RunClock`).

Lines: ``watch-start`` (what it waits for, until when), one per decision (the executor's cordon
or skip line, or ``watch-wait`` when the re-read hold moved or ended), ``watch-end`` (what it did,
its Prometheus and API requests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from guard.actions import Action, Cordon, TaintDevice
from guard.apply import KubeExecutor, PrintExecutor, cordon_landed
from guard.doors.kube import Kube, KubeError, NotFound
from guard.doors.kube_errors import first_line
from guard.doors.prom import PromClient, PromError
from guard.doors.retry import Anchor
from guard.gpu_classes import class_label_keys
from guard.jobs import JobTemplates
from guard.ledger import format_time
from guard.log import Level, Log
from guard.model import NodeInfo, Snapshot
from guard.names import Annotations
from guard.plan import hold
from guard.plan.isolation import plan_isolation
from guard.plan.mismatch import NVML_MISMATCH
from guard.plan.watch import Due, decision_snapshot, dues, fine, split
from guard.read import queries
from guard.read.objects import node_info
from guard.read.prom_view import read_prom, with_prom_unreadable
from guard.settings import Settings


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass
class RunClock:
    """The live watch's: the run's start advanced by the monotonic clock (guard.doors.retry
    `Anchor`), so a step of the wall clock never makes the watch wait past its end, nor its
    requests run past the run's deadline; `offset` back to Prometheus' time where the pod's
    clock runs ahead (guard.plan.instant)."""

    anchor: Anchor
    offset: timedelta = timedelta(0)
    pause: Callable[[float], None] = time.sleep

    def now(self) -> datetime:
        return self.anchor.now() + self.offset

    def sleep(self, seconds: float) -> None:
        self.pause(seconds)


@dataclass
class ReplayClock:
    """`--at` with `--watch`: the watch runs in the replayed time, each wait passing at once."""

    at: datetime

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


Executor = PrintExecutor | KubeExecutor


@dataclass
class Watch:
    s: Settings
    prom: PromClient
    kube: Kube | None  # None for a `--cluster-snapshot` dry run: the file's Nodes are re-read
    templates: JobTemplates
    log: Log
    base: Snapshot  # the cycle's
    executor_for: Callable[[Snapshot], Executor]
    clock: Clock
    end: datetime
    renew: Callable[[datetime], bool] = lambda _at: True
    released: frozenset[str] = frozenset()  # nodes the cycle's return check let go
    # False after a cordon landed in the cycle: the run decides nothing more, but stays up
    # holding the cycle's Lease until the end, so a run started beside it in the same slot
    # finds the Lease held and cannot cordon a second node.
    deciding: bool = True
    # A decision's writes: the renewal right before them (with a cordon among them, the run's
    # cron slot goes into the Lease with it: guard/doors/lease.py; False: lost, write nothing),
    # and after them whether a cordon landed (no: the record as it was).
    before_writes: Callable[[tuple[Action, ...]], bool] = lambda _actions: True
    after_writes: Callable[[bool], None] = lambda _landed: None
    waiting: dict[str, Due] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # nodes decided, waited for or left
    left: set[str] = field(default_factory=set)
    decisions: int = 0
    polls: int = 0
    cordoned: str = ""
    lost: bool = False  # the renewal before a decision's writes met another holder

    def run(self) -> None:
        within, later = split(dues(self.base, self.s), self.end) if self.deciding else ((), ())
        self.waiting = {d.node: d for d in within}
        self.left = {d.node for d in later}
        decided = {g.node for g in hold.candidates(self.base.prom, self.base.now, self.s)}
        self.seen = {*self.waiting, *self.left, *decided}
        start = self.clock.now()
        first = min(self.waiting.values(), key=lambda d: d.at, default=None)
        if not self.deciding:
            nxt = "a cordon landed in this run: holding the cycle's Lease, deciding nothing more"
        elif first:
            nxt = f"first decision at {format_time(first.at)} ({first.node})"
        else:
            nxt = "polling for new faults"
        self.log.emit(
            "watch-start",
            {
                "waiting": len(self.waiting),
                "left": len(self.left),
                "until": format_time(self.end),
                "interval_s": self.s.scrape_interval_s,
                "next": nxt,
            },
        )
        prom_before, retries_before = self.prom.requests_made, self.prom.backoff.waits
        api_before = self.kube.requests_made if self.kube else 0
        level: Level = "INFO"
        try:
            why = self._loop(start)
        except (PromError, KubeError) as exc:  # the cycle's work stands; the next run reads again
            why, level = f"read-failed: {first_line(str(exc))}", "WARN"
        self.left |= set(self.waiting)
        self.log.emit(
            "watch-end",
            {
                "why": why,
                "decisions": self.decisions,
                "cordoned": self.cordoned or "-",
                "left": len(self.left),
                "polls": self.polls,
                "prometheus_requests": self.prom.requests_made - prom_before,
                "prometheus_retries": self.prom.backoff.waits - retries_before,
                "api_requests": (self.kube.requests_made if self.kube else 0) - api_before,
                "next": "the next run decides what is left" if self.left else "nothing left",
            },
            level,
        )

    def _loop(self, start: datetime) -> str:
        next_poll = start + timedelta(seconds=self.s.scrape_interval_s)
        while True:
            now = self.clock.now()
            for d in sorted(
                (d for d in self.waiting.values() if d.at <= now), key=lambda d: (d.at, d.node)
            ):
                del self.waiting[d.node]
                if self._decide(d.node, now, mismatch=d.reason == NVML_MISMATCH):
                    self._stop_deciding()
                    break
            if self.lost:
                return "lease-lost"
            if now >= self.end:
                return "cordon-landed" if self.cordoned else "deadline"
            if now >= next_poll:
                if self.deciding and self._poll(now):
                    self._stop_deciding()
                if self.lost:
                    return "lease-lost"
                next_poll += timedelta(seconds=self.s.scrape_interval_s)
                if not self.renew(self.clock.now()):
                    return "lease-lost"
            times = [next_poll, self.end, *(d.at for d in self.waiting.values())]
            wake = min(t for t in times if t > now)  # the end is later than now
            self.clock.sleep(max(0.0, (wake - self.clock.now()).total_seconds()))

    def _stop_deciding(self) -> None:
        """One cordon per run: what still waits is the next run's; the Lease stays held."""
        self.deciding = False
        self.left |= set(self.waiting)
        self.waiting.clear()

    def _poll(self, now: datetime) -> bool:
        """Looks at each node the poll names for the first time; True when a cordon landed."""
        self.polls += 1
        answer = self.prom.vector_checked(
            queries.WATCH_POLL, queries.watch_poll(self.s).promql, now, (queries.NODE_LABEL,)
        )
        found = sorted({x.label(queries.NODE_LABEL) for x in answer.good})
        for name in found:
            if name in self.seen or self.base.node(name) is None:
                continue  # a name no Node has is the cycle's not-in-api line, not a decision
            self.seen.add(name)
            if self._decide(name, now, new=True):
                return True
        return False

    def _read(self, name: str, now: datetime, mismatch: bool) -> Snapshot:
        """The cycle's snapshot with that node's facts as re-read at `now`, its loss history
        (and for a mismatch hold its nvidia-match history) on the scrape grid (one node:
        cheap)."""
        names, at_scrape = [n.name for n in self.base.nodes], fine(self.s)
        sent = queries.hold_queries(at_scrape, name)
        if mismatch:
            sent += queries.mismatch_queries(at_scrape, name)
        view = read_prom(self.prom, at_scrape, now, names, sent)
        node = self._node(name)
        found = with_prom_unreadable(node, view) if node is not None else None
        return decision_snapshot(self.base, name, found, view, now)

    def _node(self, name: str) -> NodeInfo | None:
        if self.kube is None:
            return self.base.node(name)
        try:
            keys = Annotations(self.s.annotation_prefix)
            labels = class_label_keys(self.s.gpu_classes)
            return node_info(self.kube.node(name), keys, labels)
        except NotFound:
            return None

    def _decide(self, name: str, now: datetime, new: bool = False, mismatch: bool = False) -> bool:
        """One decision for the node; True when a cordon landed."""
        snap = self._read(name, now, mismatch)
        found = {g.node for g in hold.candidates(snap.prom, now, self.s)}
        if mismatch and self.s.nvml_mismatch_cordon:
            found.update(hold.nvml_candidates(snap.prom, now, self.s))
        if name in found:
            return self._apply(snap, plan_isolation(snap, self.s, self.templates, self.released))
        later = [d for d in dues(snap, self.s, self.s.scrape_interval_s) if d.node == name]
        if later and later[0].at <= self.end:
            self.waiting[name] = later[0]
            word, nxt = "waits", f"decides at {format_time(later[0].at)}"
        elif later:
            self.left.add(name)
            word, nxt = "left", f"decides at {format_time(later[0].at)}, after this run: next run"
        else:
            word, nxt = (
                "ended",
                "no hardware Xid with GPU loss (or mismatch) now, not cordoned: nothing to do",
            )
        if new and word == "ended":
            # The poll's instant saw a loss the history's last step does not show yet (it is
            # read on the step grid): no line, and the next poll looks again.
            self.seen.discard(name)
            return False
        self.decisions += 1
        self.log.emit("watch-wait", {"node": name, "hold": word, "next": nxt})
        return False

    def _apply(self, snap: Snapshot, actions: tuple[Action, ...]) -> bool:
        """The decision's writes, each after a renewal of the cycle's Lease (a lost one: none,
        and the watch ends); True when a cordon landed or the Lease was lost."""
        self.decisions += 1
        if actions and not self.before_writes(actions):
            self.lost = True
            return True
        executor = self.executor_for(snap)
        for action in actions:
            executor.apply(action)
        landed = cordon_landed(executor.outcomes)
        if actions:
            self.after_writes(landed)
        if landed:
            self.cordoned = next(a.node for a in actions if isinstance(a, Cordon | TaintDevice))
            return True
        return False
