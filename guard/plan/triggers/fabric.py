"""`fabric`: a node whose NVSwitch fabric stays failed over the hold (Fabric Manager Failure, a
fatal SXid, a switch port in ERROR, rising NVLink recovery errors). Which values count and why:
docs/triggers.md, "fabric".
"""

from __future__ import annotations

from collections.abc import Iterator

from guard.actions import Action, Skip
from guard.codec.queries import FABRIC_METRIC, FABRIC_METRICS
from guard.ledger import FABRIC
from guard.model import Snapshot
from guard.plan.triggers.model import Hit, series_hits
from guard.settings import Settings
from guard.states import Decision

DETAIL = (
    f"a fabric fault on the node: Fabric Manager status Failure ({FABRIC_METRIC}=4), an "
    "NVSwitch fatal SXid, an NVSwitch port in ERROR or rising NVLink recovery errors"
)


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    return series_hits(snap, snap.prom.fabric_since, FABRIC, s.fabric_hold, lambda _: DETAIL)


def not_applicable(snap: Snapshot) -> tuple[Action, ...]:
    """One line for the run: dcgm-exporter exposes none of the fabric fields on any node."""
    if snap.prom.fabric_seen is not False:
        return ()
    metrics = ", ".join(FABRIC_METRICS)
    detail = f"no series of {metrics} in Prometheus: the fabric trigger does not apply"
    fix = (
        "nothing on systems without NVSwitches; otherwise add the fields to dcgm-exporter's "
        "counters CSV"
    )
    return (Skip("", Decision.FABRIC_NOT_APPLICABLE, detail, fix),)
