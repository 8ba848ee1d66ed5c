"""`admission-rejected`: a node on which kubelet keeps refusing GPU pods at admission
(UnexpectedAdmissionError only: the node owns it). Why, and the numbers: docs/triggers.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from guard.ledger import ADMISSION_REJECTED
from guard.model import Snapshot
from guard.plan.triggers.model import Hit, series_hits
from guard.settings import Settings


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    if s.admission_rejected_min_pods == 0:
        return iter(())
    count = dict(snap.prom.admission_now)
    window = s.admission_rejected_window_s

    def detail(name: str) -> str:
        return (
            f"{count.get(name, 0)} GPU pods created in the last {window}s rejected at admission "
            f"(UnexpectedAdmissionError; minimum {s.admission_rejected_min_pods})"
        )

    return series_hits(
        snap, snap.prom.admission_since, ADMISSION_REJECTED, s.admission_hold, detail
    )
