"""What a node trigger found on one node (guard/plan/triggers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from guard.model import Snapshot
from guard.plan.hold import held_s
from guard.states import Decision


@dataclass(frozen=True, slots=True)
class Hit:
    """A node showing a trigger's fault now; a candidate once `held_s` ≥ `needs_s`."""

    node: str
    reason: Decision  # a guard.ledger.NODE_REASONS word
    since: datetime
    held_s: int
    needs_s: int
    detail: str  # what was seen, for the log line, the Event and the cordon
    gpu_capacity: int | None = None  # what the return needs (gpu-short: the class's count)
    onboarding: bool = False  # the node carries the onboarding gate's taint: not admitted yet

    @property
    def held(self) -> bool:
        return self.held_s >= self.needs_s


def series_hits(
    snap: Snapshot,
    since: tuple[tuple[str, datetime], ...],
    reason: Decision,
    needs_s: int,
    detail: Callable[[str], str],
) -> Iterator[Hit]:
    """A Hit for each readable node of `since` (its run of steps) not reported cordoned."""
    cordoned = set(snap.prom.cordoned)
    for name, start in since:
        node = snap.node(name)
        if name in cordoned or node is None or node.unreadable:
            continue
        held = held_s(start, snap.now)
        yield Hit(name, reason, start, held, needs_s, detail(name), node.gpu_capacity)
