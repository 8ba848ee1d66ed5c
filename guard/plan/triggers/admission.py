"""`admission-rejected`: a node on which kubelet keeps refusing GPU pods at admission
(UnexpectedAdmissionError only: the node owns it). Why, and the numbers: docs/triggers.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from guard.ledger import ADMISSION_REJECTED
from guard.model import Snapshot
from guard.plan.hold import held_s
from guard.plan.triggers.model import Hit
from guard.settings import Settings


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    if s.admission_rejected_min_pods == 0:
        return
    cordoned, count = set(snap.prom.cordoned), dict(snap.prom.admission_now)
    window = s.admission_rejected_window_s
    for name, start in snap.prom.admission_since:
        node = snap.node(name)
        if name in cordoned or node is None or node.unreadable:
            continue
        detail = (
            f"{count.get(name, 0)} GPU pods created in the last {window}s rejected at admission "
            f"(UnexpectedAdmissionError; minimum {s.admission_rejected_min_pods})"
        )
        held = held_s(start, snap.now)
        yield Hit(
            name, ADMISSION_REJECTED, start, held, s.admission_hold, detail, node.gpu_capacity
        )
