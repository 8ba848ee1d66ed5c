"""The in-run watch: after its cycle, `run` cordons a hold when it completes, each decision a
turn of the run (guard/run.py `Run.turn`), and follows the returns (guard/returns.py); see
docs/lifecycle.md, "Within one run: the cycle, then the watch"; its requests: docs/benchmarks.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from guard.actions import Cordon, TaintDevice
from guard.apply import cordon_landed
from guard.codec import queries
from guard.doors.kube import KubeError
from guard.doors.kube_errors import first_line
from guard.doors.prom import PromError
from guard.doors.retry import Anchor
from guard.ledger import format_time
from guard.log import Level
from guard.model import PromView, Snapshot
from guard.plan import hold
from guard.plan.isolation import plan_isolation
from guard.plan.mismatch import NVML_MISMATCH
from guard.plan.watch import Due, decision_snapshot, dues, fine, split
from guard.read import read_node
from guard.read.prom_view import read_prom, with_prom_unreadable
from guard.returns import Returns

if TYPE_CHECKING:
    from guard.run import Run


@dataclass
class RunClock:
    """The run's start (on Prometheus' clock) advanced by the monotonic clock: a step of the wall
    clock never makes the watch wait past its end, nor its requests run past the run's deadline."""

    anchor: Anchor
    sleep: Callable[[float], None] = time.sleep

    def now(self) -> datetime:
        return self.anchor.now()


@dataclass
class ReplayClock:
    """`--at` with `--watch`: the watch runs in the replayed time, each wait passing at once."""

    at: datetime

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@dataclass
class Watch:
    """The run's later turns (guard/run.py `Run`): one decision per due hold or new fault."""

    run: Run
    base: Snapshot  # the cycle's
    clock: RunClock | ReplayClock
    end: datetime
    waiting: dict[str, Due] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # nodes decided, waited for or left
    left: set[str] = field(default_factory=set)
    decisions: int = 0
    polls: int = 0
    cordoned: str = ""
    returns: Returns | None = None  # the return's turns (guard/returns.py)

    def watch(self) -> None:
        run, s = self.run, self.run.s
        deciding = run.may_isolate()
        within, later = split(dues(self.base, s), self.end) if deciding else ((), ())
        self.waiting = {d.node: d for d in within}
        self.left = {d.node for d in later}
        decided = {g.node for g in hold.candidates(self.base.prom, self.base.now, s)}
        self.seen = {*self.waiting, *self.left, *decided}
        start = self.clock.now()
        self.returns = Returns.start(run, self.base, start)
        first = min(self.waiting.values(), key=lambda d: d.at, default=None)
        if not deciding:
            nxt = "a cordon landed in this run: holding the cycle's Lease, deciding nothing more"
        elif first:
            nxt = f"first decision at {format_time(first.at)} ({first.node})"
        else:
            nxt = "polling for new faults"
        run.decisions.event(
            "watch-start",
            waiting=len(self.waiting),
            left=len(self.left),
            until=format_time(self.end),
            interval_s=s.scrape_interval_s,
            returning=len(self.returns.names),
            next=nxt,
        )
        prom, kube = run.prom, run.kube
        prom_before, retries_before = prom.requests_made, prom.backoff.waits
        api_before = kube.requests_made if kube else 0
        level: Level = "INFO"
        try:
            why = self._loop(start)
        except (PromError, KubeError) as exc:  # the cycle's work stands; the next run reads again
            why, level = f"read-failed: {first_line(str(exc))}", "WARN"
        self.left |= set(self.waiting)
        run.decisions.event(
            "watch-end",
            level,
            why=why,
            decisions=self.decisions,
            cordoned=self.cordoned or "-",
            left=len(self.left),
            polls=self.polls,
            return_turns=self.returns.turns if self.returns else 0,
            prometheus_requests=prom.requests_made - prom_before,
            prometheus_retries=prom.backoff.waits - retries_before,
            api_requests=(kube.requests_made if kube else 0) - api_before,
            next="the next run decides what is left" if self.left else "nothing left",
        )

    def _loop(self, start: datetime) -> str:
        run, step = self.run, timedelta(seconds=self.run.s.scrape_interval_s)
        next_poll = start + step
        while True:
            now = self.clock.now()
            due = sorted(
                (d for d in self.waiting.values() if d.at <= now), key=lambda d: (d.at, d.node)
            )
            mismatches = {d.node for d in due if d.reason == NVML_MISMATCH}
            view = self._read([d.node for d in due], now, mismatches)
            for d in due:
                del self.waiting[d.node]
                if self._decide(d.node, now, view, mismatch=d.node in mismatches):
                    self._stop_deciding()
                    break
            if run.lost:
                return "lease-lost"
            returns = self.returns
            if returns is not None and returns.due(now) and now < self.end:
                returns.poll(now)
                if run.lost:
                    return "lease-lost"
            if now >= self.end:
                return "cordon-landed" if self.cordoned else "deadline"
            if now >= next_poll:
                if run.may_isolate() and self._poll(now):
                    self._stop_deciding()
                if returns is not None:
                    returns.on_grid(now)
                if run.lost:
                    return "lease-lost"
                next_poll += step
                if not run.renew():
                    return "lease-lost"
            times = [next_poll, self.end, *(d.at for d in self.waiting.values())]
            if returns is not None and returns.active():
                times.append(returns.next_at)
            wake = min(t for t in times if t > now)  # the end is later than now
            self.clock.sleep(max(0.0, (wake - self.clock.now()).total_seconds()))

    def _stop_deciding(self) -> None:
        """The run may isolate no more: what still waits is the next run's; the Lease stays held."""
        self.left |= set(self.waiting)
        self.waiting.clear()

    def _poll(self, now: datetime) -> bool:
        """Looks at each node the poll names for the first time; True when a cordon landed."""
        self.polls += 1
        answer = self.run.prom.checked(
            queries.WATCH_POLL, queries.watch_poll(self.run.s).promql, now, (queries.NODE_LABEL,)
        )
        found = sorted({x.label(queries.NODE_LABEL) for x in answer.good})
        # a name no Node has is the cycle's not-in-api line, not a decision
        new = [n for n in found if n not in self.seen and self.base.node(n) is not None]
        view = self._read(new, now, set())
        for name in new:
            self.seen.add(name)
            if self._decide(name, now, view, new=True):
                return True
        return False

    def _read(self, names: list[str], now: datetime, mismatches: set[str]) -> PromView:
        """The facts of the nodes decided at `now`, re-read together (one request per query): their
        loss history (the `mismatches`' nvidia-match history too) on the scrape grid."""
        if not names:
            return PromView()
        at_scrape = fine(self.run.s)
        sent = queries.hold_queries(at_scrape, *names)
        if mismatches:
            sent += queries.mismatch_queries(at_scrape, *sorted(mismatches))
        every = [n.name for n in self.base.nodes]
        return read_prom(self.run.prom, at_scrape, now, every, sent)

    def _snapshot(self, name: str, view: PromView, now: datetime) -> Snapshot:
        """The cycle's snapshot with that node's facts (and Node) as re-read at `now`."""
        kube = self.run.kube
        node = read_node(kube, self.run.s, name) if kube else self.base.node(name)
        found = with_prom_unreadable(node, view) if node is not None else None
        return decision_snapshot(self.base, name, found, view, now)

    def _decide(
        self, name: str, now: datetime, view: PromView, new: bool = False, mismatch: bool = False
    ) -> bool:
        """One decision for the node on the facts re-read at `now`; True when a cordon landed."""
        run, s = self.run, self.run.s
        snap = self._snapshot(name, view, now)
        found = {g.node for g in hold.candidates(snap.prom, now, s)}
        if mismatch and s.nvml_mismatch_cordon:
            found.update(hold.nvml_candidates(snap.prom, now, s))
        if name in found:
            self.decisions += 1
            actions = plan_isolation(snap, s, run.templates, run.released)
            run.turn(snap, actions)
            if cordon_landed(run.outcomes):
                self.cordoned = next(a.node for a in actions if isinstance(a, Cordon | TaintDevice))
            return not run.may_isolate()
        later = [d for d in dues(snap, s, s.scrape_interval_s) if d.node == name]
        if later and later[0].at <= self.end:
            self.waiting[name] = later[0]
            word, nxt = "waits", f"decides at {format_time(later[0].at)}"
        elif later:
            self.left.add(name)
            word, nxt = "left", f"decides at {format_time(later[0].at)}, after this run: next run"
        else:
            word = "ended"
            nxt = "no hardware Xid with GPU loss (or mismatch) now, not cordoned: nothing to do"
        if new and word == "ended":
            # The poll's instant saw a loss the history's last step does not show yet (it is
            # read on the step grid): no line, and the next poll looks again.
            self.seen.discard(name)
            return False
        self.decisions += 1
        run.decisions.event("watch-wait", node=name, hold=word, next=nxt)
        return False
