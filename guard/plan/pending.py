"""Pending candidates: GPUs on their way to a cordon whose GPU loss has not held long enough yet.

Case list, for each GPU with a hardware Xid now (`PromView.hardware_xids`):
  no GPU loss on its node now (no `loss_since`)          → not pending (no candidate at all)
  node cordoned (kube-state-metrics or the API)          → not pending (nothing to cordon)
  loss held ≥ the Xid's window (`hold_window_s`)         → not pending: a candidate, decided by
                                                           the isolation check
  otherwise                                              → pending: held_s of needs_s
One line per pending GPU each cycle, so a tired reader sees a node before it is cordoned:
``pending node=gpu-3 reason=xid-48 gpu=0000:3b:00.0 held_s=360 needs_s=600 next=…``.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.log import Value
from guard.model import Snapshot
from guard.prom_view import held_s, hold_window_s
from guard.settings import Settings


@dataclass(frozen=True, slots=True)
class Pending:
    node: str
    xid: int
    gpu: str  # dcgm-exporter's GPU index
    pci: str
    uuid: str
    held_s: int
    needs_s: int

    @property
    def reason(self) -> str:
        return f"xid-{self.xid}"

    def log_line(self) -> tuple[str, dict[str, Value]]:
        more = self.needs_s - self.held_s
        return "pending", {
            "node": self.node,
            "reason": self.reason,
            "gpu": self.pci,
            "held_s": self.held_s,
            "needs_s": self.needs_s,
            "next": f"cordon candidate if the GPU loss holds {more}s more",
        }

    def to_json(self) -> dict[str, Value]:
        return {"node": self.node, "reason": self.reason, "xid": self.xid, "gpu": self.gpu,
                "pci": self.pci, "uuid": self.uuid, "held_s": self.held_s,
                "needs_s": self.needs_s}  # fmt: skip


def pending(snap: Snapshot, s: Settings) -> tuple[Pending, ...]:
    """Every pending GPU (the case list above), sorted by node, GPU and Xid."""
    since = dict(snap.prom.loss_since)
    cordoned = set(snap.prom.cordoned) | {n.name for n in snap.nodes if n.unschedulable}
    out = []
    for g in snap.prom.hardware_xids:
        start = since.get(g.node)
        if start is None or g.node in cordoned:
            continue
        held, needs = held_s(start, snap.now), hold_window_s(g.value, s)
        if held < needs:
            out.append(Pending(g.node, g.value, g.gpu, g.pci, g.uuid, held, needs))
    return tuple(sorted(out, key=lambda p: (p.node, p.gpu.zfill(4), p.xid)))
