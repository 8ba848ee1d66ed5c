"""`fabric`: a node whose NVSwitch fabric stays failed over the hold.

Signal (guard.codec.queries.fabric_failed): dcgm-exporter's DCGM_FI_DEV_FABRIC_MANAGER_STATUS per
GPU, DCGM's dcgmFabricManagerStatus_t; a GPU in Failure (4) is one whose fabric training ended
in an error: present, but unusable for NVLink work across the NVSwitches. Case list, for each
node:
  a GPU in Failure at every step since `since`, up to now, and now − since ≥
      `Settings.fabric_hold` → candidate
  in Failure now, not that long → pending
  NotSupported, NotStarted, InProgress, Success, Unrecognized, NvmlTooOld → nothing (no
      NVSwitch, a boot's training, or a driver and DCGM that disagree: not the node's fault)
  no series of the field on the node → nothing: the exporter does not expose it; when no node
      has one, `not_applicable` says so in ONE line per run, not once per node
"""

from __future__ import annotations

from collections.abc import Iterator

from guard.actions import Action, Skip
from guard.codec.queries import FABRIC_METRIC
from guard.ledger import FABRIC
from guard.model import Snapshot
from guard.plan.hold import held_s
from guard.plan.triggers.model import Hit
from guard.settings import Settings

NOT_APPLICABLE = "fabric-not-applicable"  # guard.states.Decision.FABRIC_NOT_APPLICABLE


def hits(snap: Snapshot, s: Settings) -> Iterator[Hit]:
    cordoned = set(snap.prom.cordoned)
    for name, start in snap.prom.fabric_since:
        node = snap.node(name)
        if name in cordoned or node is None or node.unreadable:
            continue
        detail = f"Fabric Manager status Failure ({FABRIC_METRIC}=4) on a GPU of the node"
        held = held_s(start, snap.now)
        yield Hit(name, FABRIC, start, held, s.fabric_hold, detail, node.gpu_capacity)


def not_applicable(snap: Snapshot) -> tuple[Action, ...]:
    """One line for the run: dcgm-exporter exposes no Fabric Manager status on any node."""
    if snap.prom.fabric_seen is not False:
        return ()
    return (
        Skip(
            "",
            NOT_APPLICABLE,
            f"no {FABRIC_METRIC} series in Prometheus: the fabric trigger does not apply",
            "nothing on systems without NVSwitches; otherwise add the field to dcgm-exporter's "
            "counters CSV",
        ),
    )
