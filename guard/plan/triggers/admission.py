"""`admission-rejected`: a node on which kubelet keeps refusing GPU pods at admission.

Signal (guard.codec.queries.admission_rejected): GPU pods with `status.reason`
UnexpectedAdmissionError on the node, created within `admission_rejected_window_s`, at least
`admission_rejected_min_pods` of them. Case list, for each node:
  that many at every step since `since`, up to now, and now − since ≥
      `Settings.admission_hold` → candidate
  that many now, not that long → pending
  fewer now, or none → nothing (a single refusal during a device-plugin restart is not a fault)
Why the node owns it: kubelet's device manager failed to allocate a GPU the node advertises
(the incident write-up's first Xid 79 episode: the plugin's GetPreferredAllocation failed on the
lost GPU; the scheduler kept sending pods by the numbers). OutOfcpu, OutOfmemory and node
affinity are the scheduler's or the pod's: no series of that reason is selected.
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
