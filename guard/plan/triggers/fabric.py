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
from guard.plan.hold import held_s
from guard.plan.triggers.model import Hit
from guard.settings import Settings
from guard.states import Decision


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    cordoned = set(snap.prom.cordoned)
    for name, start in snap.prom.fabric_since:
        node = snap.node(name)
        if name in cordoned or node is None or node.unreadable:
            continue
        detail = (
            f"a fabric fault on the node: Fabric Manager status Failure ({FABRIC_METRIC}=4), an "
            "NVSwitch fatal SXid, an NVSwitch port in ERROR or rising NVLink recovery errors"
        )
        held = held_s(start, snap.now)
        yield Hit(name, FABRIC, start, held, s.fabric_hold, detail, node.gpu_capacity)


def not_applicable(snap: Snapshot) -> tuple[Action, ...]:
    """One line for the run: dcgm-exporter exposes none of the fabric fields on any node."""
    if snap.prom.fabric_seen is not False:
        return ()
    return (
        Skip(
            "",
            Decision.FABRIC_NOT_APPLICABLE,
            f"no series of {', '.join(FABRIC_METRICS)} in Prometheus: the fabric trigger does "
            "not apply",
            "nothing on systems without NVSwitches; otherwise add the fields to dcgm-exporter's "
            "counters CSV",
        ),
    )
