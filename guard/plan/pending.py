"""Pending candidates: a hardware Xid, a driver/NVML mismatch or a node trigger on its way to a
cordon whose hold has not completed yet; one `pending` line each per cycle, with when it decides
(docs/lifecycle.md, "Within one run").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from guard.ledger import format_time
from guard.log import Value
from guard.model import Snapshot
from guard.plan import mismatch, triggers
from guard.plan.hold import decides_at, held_s, xid_holds
from guard.settings import Settings
from guard.states import Reason, xid_reason


@dataclass(frozen=True, slots=True)
class Pending:
    node: str
    xid: int
    gpu: str  # dcgm-exporter's GPU index
    pci: str
    uuid: str
    held_s: int
    needs_s: int
    decides_at: datetime  # when the hold completes if the loss goes on (guard.plan.hold)

    @property
    def reason(self) -> Reason:
        return xid_reason(self.xid)

    @property
    def order(self) -> tuple[str, int, str, int]:
        return self.node, 0, self.gpu.zfill(4), self.xid

    def log_line(self) -> tuple[str, dict[str, Value]]:
        return _line(self, ("gpu", self.pci), "the GPU loss holds")

    def to_json(self) -> dict[str, Value]:
        return _json(self)


@dataclass(frozen=True, slots=True)
class PendingNode:
    """A whole node's finding that has not held yet: its driver/NVML mismatch
    (`Settings.nvml_hold_s`) or a node trigger's (guard.plan.triggers)."""

    node: str
    reason: Reason
    detail: str  # what it saw (guard.plan.mismatch.seen, the trigger's finding)
    held_s: int
    needs_s: int
    decides_at: datetime

    @property
    def trigger(self) -> bool:
        return self.reason != mismatch.NVML_MISMATCH

    @property
    def order(self) -> tuple[str, int, str, int]:
        # After the node's Xid GPUs, its mismatch before its triggers, as the isolation check ranks.
        return (self.node, 2, self.reason, 0) if self.trigger else (self.node, 1, "", 0)

    def log_line(self) -> tuple[str, dict[str, Value]]:
        holds = "it holds" if self.trigger else "the mismatch holds"
        return _line(self, ("detail", self.detail), holds)

    def to_json(self) -> dict[str, Value]:
        return _json(self)


def _line(p: Waiting, seen: tuple[str, Value], holds: str) -> tuple[str, dict[str, Value]]:
    """The `pending` line: the GPU, or what a whole node's finding saw; what it waits for."""
    return "pending", {
        "node": p.node,
        "reason": p.reason,
        seen[0]: seen[1],
        "held_s": p.held_s,
        "needs_s": p.needs_s,
        "decides_at": format_time(p.decides_at),
        "next": f"cordon candidate if {holds} {p.needs_s - p.held_s}s more",
    }


# The `-o json` candidate's keys: xid, gpu, pci and uuid null for a whole node's finding.
_JSON = ("node", "reason", "xid", "gpu", "pci", "uuid", "held_s", "needs_s", "decides_at", "detail")


def _json(p: Waiting) -> dict[str, Value]:
    out: dict[str, Value] = {key: getattr(p, key, None) for key in _JSON}
    return out | {"decides_at": format_time(p.decides_at)}


Waiting = Pending | PendingNode


def pending(snap: Snapshot, s: Settings) -> tuple[Waiting, ...]:
    """Every pending GPU, mismatch and node trigger, sorted by node, then GPU and Xid,
    a node's mismatch after its GPUs."""
    cordoned = set(snap.prom.cordoned) | {n.name for n in snap.nodes if n.unschedulable}
    out: list[Waiting] = []
    for g, start, held, needs in xid_holds(snap.prom, snap.now, s, cordoned):
        if held < needs:
            at = decides_at(start, needs)
            out.append(Pending(g.node, g.value, g.gpu, g.pci, g.uuid, held, needs, at))
    needs = s.nvml_hold_s
    for node, start in snap.prom.nvml_since if s.nvml_mismatch_cordon else ():
        if node not in cordoned and (held := held_s(start, snap.now)) < needs:
            seen = mismatch.seen(snap, node)
            at = decides_at(start, needs)
            out.append(PendingNode(node, mismatch.NVML_MISMATCH, seen, held, needs, at))
    for h in triggers.hits(snap, s):
        if not h.held and not h.onboarding and h.node not in cordoned:
            at = decides_at(h.since, h.needs_s)
            out.append(PendingNode(h.node, h.reason, h.detail, h.held_s, h.needs_s, at))
    return tuple(sorted(out, key=lambda p: p.order))
