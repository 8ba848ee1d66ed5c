"""`gpu-short`: a node whose GPU count (the lower of its capacity and what dcgm-exporter reports)
stays below its class's count over the hold; absent is not short. docs/triggers.md, "gpu-short".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime

from guard.codec import queries
from guard.codec.series import loss_since
from guard.doors.prom import Series
from guard.gpu_classes import GpuClass, class_of, majority, parse_classes
from guard.ledger import GPU_SHORT
from guard.model import Snapshot
from guard.plan.check_jobs import gate_taint
from guard.plan.hold import held_s
from guard.plan.triggers.model import Hit
from guard.settings import Settings


def expectations(snap: Snapshot, s: Settings) -> dict[str, tuple[GpuClass, int]]:
    """Every checked node's class and count, in one pass over the nodes: a learned count is the
    majority of the class's *other* nodes (the node's own count taken out of the tally)."""
    classes = parse_classes(s.gpu_classes)
    if not classes:
        return {}
    history = dict(snap.prom.gpu_counts)
    members: dict[int, list[tuple[str, int]]] = {}  # class index -> (node, most GPUs seen)
    for n in snap.nodes:
        found = class_of(classes, dict(n.labels))
        if found is not None:
            best = max((c for _, c in history.get(n.name, ())), default=n.gpu_capacity)
            members.setdefault(classes.index(found), []).append((n.name, best))
    out: dict[str, tuple[GpuClass, int]] = {}
    for index, nodes in members.items():
        cls = classes[index]
        tally = Counter(best for _, best in nodes if best > 0)
        for name, best in nodes:
            others = (tally - Counter({best: 1})).elements()  # the node's own count out
            learned = majority(others) if cls.count is None else cls.count
            if learned is not None:
                out[name] = (cls, learned)
    return out


Points = tuple[tuple[datetime, int], ...]


def since(snap: Snapshot, s: Settings, node: str, points: Points, count: int) -> datetime | None:
    """When the run of steps with the node below `count`, up to now, began; None if not now."""
    short = tuple((t.timestamp(), 1.0) for t, c in points if c < count)
    if not short:
        return None
    series = Series(((queries.NODE_LABEL, node),), short)
    run = loss_since((series,), snap.now, s.query_step_s, queries.trigger_lookback_s(s))
    return run[0][1] if run else None


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    """Every node short of its class's count now (held or not), with its facts."""
    if not s.gpu_classes.strip():
        return
    cordoned, wanted = set(snap.prom.cordoned), expectations(snap, s)
    history = dict(snap.prom.gpu_counts)
    for node in snap.nodes:
        if node.unreadable or node.name in cordoned:
            continue
        want = wanted.get(node.name)
        if want is None:
            continue
        cls, count = want
        points = history.get(node.name, ())
        start = since(snap, s, node.name, points, count)
        if start is None:
            continue
        have = points[-1][1]
        detail = f"{have} GPUs (capacity {node.gpu_capacity}), class {cls.selector} expects {count}"
        onboarding = gate_taint(node, s) is not None
        held = held_s(start, snap.now)
        yield Hit(node.name, GPU_SHORT, start, held, s.gpu_short_hold, detail, count, onboarding)
