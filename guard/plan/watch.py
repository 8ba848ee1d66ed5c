"""The in-run watch's decisions (guard/watch.py runs them): which holds it waits for, and the
snapshot one decision plans on.

Case list, for each Node with a pending hardware-Xid hold (guard.plan.pending), at the start of
the watch and for each Node the watch's poll names later (a name no Node has is the cycle's
not-in-api line, not a wait):
  the hold completes at or before the watch's end       → due then (its node's earliest GPU)
  it completes later                                    → left to the next run
When a node is due, only its facts are read again (its Xids and loss history, its cordon in
kube-state-metrics, its Node object) and `decision_snapshot` puts them in the cycle's
snapshot in place of the old ones, with `now` the decision's instant; the isolation check then
plans on it unchanged: the breaker, the person's cordon (`already-cordoned`), hold, cancel and
the resourceVersion of the Node as re-read. The one cordon per run is the caller's: the watch
decides only while no cordon has landed in this run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from guard.model import NodeInfo, PromView, Snapshot
from guard.plan.pending import Pending, pending
from guard.settings import Settings


@dataclass(frozen=True, slots=True)
class Due:
    """A node whose hold completes at `at`, for the reason of its GPU that completes first."""

    node: str
    reason: str  # xid-79
    at: datetime


def dues(snap: Snapshot, s: Settings) -> tuple[Due, ...]:
    """Per node with a pending Xid hold, when the first of its holds completes; by time, name."""
    first: dict[str, Due] = {}
    for p in pending(snap, s):
        if not isinstance(p, Pending) or snap.node(p.node) is None:
            continue  # a mismatch's hold is the next run's; a name no Node has, not-in-api
        seen = first.get(p.node)
        if seen is None or p.decides_at < seen.at:
            first[p.node] = Due(p.node, p.reason, p.decides_at)
    return tuple(sorted(first.values(), key=lambda d: (d.at, d.node)))


def split(found: tuple[Due, ...], end: datetime) -> tuple[tuple[Due, ...], tuple[Due, ...]]:
    """(those the watch waits for, those left to the next run): a hold must complete by `end`."""
    return tuple(d for d in found if d.at <= end), tuple(d for d in found if d.at > end)


def decision_snapshot(
    base: Snapshot, name: str, node: NodeInfo | None, view: PromView, now: datetime
) -> Snapshot:
    """The cycle's snapshot with the node `name` as re-read (None: deleted since, so
    `not-in-api`) and, of Prometheus, only that node's facts as re-read at `now`: no other
    node's old facts can become a candidate by the clock alone."""
    nodes = tuple(n for n in base.nodes if n.name != name) + ((node,) if node else ())
    prom = PromView(
        hardware_xids=tuple(g for g in view.hardware_xids if g.node == name),
        loss_since=tuple(x for x in view.loss_since if x[0] == name),
        cordoned=tuple(n for n in view.cordoned if n == name),
        unreadable=tuple(p for p in view.unreadable if p.node == name),
    )
    return replace(base, now=now, nodes=tuple(sorted(nodes, key=lambda n: n.name)), prom=prom)
