"""`gpu-short`: a node whose GPU count stays below its class's count over the hold.

The node's count at each step is the lower of its `nvidia.com/gpu` capacity and the GPUs
dcgm-exporter reports on it (guard.read.queries.gpu_count); its class and the class's count come
from `Settings.gpu_classes` (guard.gpu_classes). Case list, for each node of a class:
  the class's count is `auto` and the class's other nodes agree on none → not checked
  the node carries the onboarding gate's taint → not a candidate: it was never admitted, and
      the gate checks the same count (guard.plan.onboarding: skip onboarding-gpu-short)
  its count was below the class's at every step since `since`, up to now, and
      now − since ≥ `Settings.gpu_short_hold` → candidate
  below now, but not that long → pending
A node without any count in the history (neither source) is not checked: absent is not short.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from guard.doors.prom import Series
from guard.gpu_classes import GpuClass, class_of, majority, parse_classes
from guard.ledger import GPU_SHORT
from guard.model import NodeInfo, Snapshot
from guard.plan.check_jobs import gate_taint
from guard.plan.hold import held_s
from guard.plan.triggers.model import Hit
from guard.read import queries
from guard.read.prom_view import loss_since
from guard.settings import Settings


def expected(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[GpuClass, int] | None:
    """The node's class and the GPU count it should have, or None when it is not checked."""
    found = class_of(parse_classes(s.gpu_classes), dict(node.labels))
    if found is None:
        return None
    if found.count is not None:
        return found, found.count
    peers = (
        _best(snap, n) for n in snap.nodes if n.name != node.name and found.matches(dict(n.labels))
    )
    learned = majority(c for c in peers if c > 0)
    return None if learned is None else (found, learned)


def _best(snap: Snapshot, node: NodeInfo) -> int:
    """The most GPUs the node showed in the history (its capacity where none): what it has when
    it is whole, so a peer losing a GPU now does not change the class's count."""
    counts = dict(snap.prom.gpu_counts).get(node.name, ())
    return max((c for _, c in counts), default=node.gpu_capacity)


def since(snap: Snapshot, s: Settings, node: str, count: int) -> datetime | None:
    """When the run of steps with the node below `count`, up to now, began; None if not now."""
    points = dict(snap.prom.gpu_counts).get(node, ())
    short = tuple((t.timestamp(), 1.0) for t, c in points if c < count)
    if not short:
        return None
    run = loss_since(
        (Series(((queries.NODE_LABEL, node),), short),),
        snap.now,
        s.query_step_s,
        queries.trigger_lookback_s(s),
    )
    return run[0][1] if run else None


def now_count(snap: Snapshot, node: str) -> int | None:
    points = dict(snap.prom.gpu_counts).get(node, ())
    return points[-1][1] if points else None


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    """Every node short of its class's count now (held or not), with its facts."""
    if not s.gpu_classes.strip():
        return
    cordoned = set(snap.prom.cordoned)
    for node in snap.nodes:
        if node.unreadable or node.name in cordoned:
            continue
        want = expected(snap, s, node)
        if want is None:
            continue
        cls, count = want
        start = since(snap, s, node.name, count)
        if start is None:
            continue
        have = now_count(snap, node.name)
        detail = f"{have} GPUs (capacity {node.gpu_capacity}), class {cls.selector} expects {count}"
        onboarding = gate_taint(node, s) is not None
        held = held_s(start, snap.now)
        yield Hit(node.name, GPU_SHORT, start, held, s.gpu_short_hold, detail, count, onboarding)
