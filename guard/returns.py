"""The return in the watch's turns: each next return step as soon as its input is readable, not
at the next tick (docs/lifecycle.md, "The return in the watch"). A poll re-reads only what the
returns wait for; a node whose inputs moved gets one turn, read and planned as in the cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from guard.codec import queries
from guard.model import Snapshot
from guard.names import APP_LABEL, APP_NAME
from guard.plan import released
from guard.plan import return_loop as loop
from guard.plan.units import plan_return
from guard.read import SnapshotError, build_snapshot, guard_jobs, read_cluster, read_node
from guard.read.job_results import FINISHED, attach, slim_pod
from guard.read.prom_view import read_prom

if TYPE_CHECKING:
    from guard.run import Run


@dataclass
class Returns:
    """The return's turns within the watch: the nodes it follows and their last inputs."""

    run: Run
    next_at: datetime
    names: tuple[str, ...] = ()
    seen: dict[str, loop.ReturnInputs] = field(default_factory=dict)
    held: tuple[loop.Held, ...] = ()  # the followed nodes a Prometheus row holds
    turns: int = 0
    ended: str = ""  # why it stopped following before the watch's end

    @classmethod
    def start(cls, run: Run, base: Snapshot, now: datetime) -> Returns:
        names = loop.followed(base, run.s) if run.kube is not None else ()
        seen, held = loop.of_snapshot(base, names), loop.held(base, run.s, names)
        return cls(run, now + timedelta(seconds=loop.RETURN_POLL_S), names, seen, held)

    def active(self) -> bool:
        return bool(self.names) and not self.ended

    def due(self, now: datetime) -> bool:
        return self.active() and now >= self.next_at

    def poll(self, now: datetime) -> None:
        """One poll; a turn for the nodes whose inputs moved since their last decision."""
        self.next_at = now + timedelta(seconds=loop.RETURN_POLL_S)
        changed = loop.moved(self.seen, self._light())
        if changed:
            self._turn(now, changed)

    def on_grid(self, now: datetime) -> None:
        """On the scrape grid: the held rows' inputs re-read together for the held nodes, one
        request per query whatever their number; a turn for the nodes whose row moved."""
        if not self.held or self.ended:
            return
        s, cases = self.run.s, [c for _, c in self.held]
        reads = {q for row, _ in self.held for q in row.reads}
        sent = queries.return_queries(s, reads, *sorted({c.node.name for c in cases}))
        every = [n.name for n in cases[0].snap.nodes]
        changed = loop.cleared(self.held, read_prom(self.run.prom, s, now, every, sent), now)
        if changed:
            self._turn(now, changed)

    def _turn(self, now: datetime, changed: tuple[str, ...]) -> None:
        """Everything read as the cycle reads it; the `changed` nodes' return planned, written."""
        run, s = self.run, self.run.s
        assert run.kube is not None
        try:
            objs = read_cluster(run.kube, s)
            names = [n.name for n in objs.nodes]
            view = read_prom(run.prom, s, now, names, dra_gpus=objs.dra_gpus())
            snap = build_snapshot(now, objs, view, s)
        except SnapshotError as exc:  # the cycle's own check; the next run reads again
            self.ended = f"read-failed: {exc}"
            return
        self.turns += 1
        actions = tuple(a for a in plan_return(snap, s, run.templates) if a.node in changed)
        run.released |= released(actions)
        run.turn(snap, actions)
        # What this turn decided on; a node isolated since the cycle is followed from now on.
        self.names = loop.followed(snap, s)
        self.held = loop.held(snap, s, self.names)
        self.seen = {**self.seen, **loop.of_snapshot(snap, tuple(changed))}

    def _light(self) -> dict[str, loop.ReturnInputs]:
        """The followed Nodes and the guard's Jobs with their finished Pods, as they are now."""
        run, s = self.run, self.run.s
        kube = run.kube
        assert kube is not None
        read = ((name, read_node(kube, s, name)) for name in self.names)
        nodes = {name: node for name, node in read if node is not None}
        mine = f"{APP_LABEL}={APP_NAME}"
        jobs = guard_jobs(kube.jobs(s.jobs_namespace, mine), s, [])
        pods = [slim_pod(p) for p in kube.pods(s.jobs_namespace, mine, FINISHED)]
        found = attach(jobs, pods)
        return {name: loop.inputs(nodes, found, name) for name in self.names}
