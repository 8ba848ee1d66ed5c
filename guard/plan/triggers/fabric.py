"""`fabric`: a node whose NVSwitch fabric stays failed over the hold.

Signal (guard.codec.queries.fabric_failed), per node, any faulted fabric entity of dcgm-exporter:
a GPU whose DCGM_FI_DEV_FABRIC_MANAGER_STATUS (DCGM's dcgmFabricManagerStatus_t) is Failure (4),
its fabric training ended in an error; an NVSwitch whose DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS holds
a fatal SXid; an NVSwitch port whose DCGM_FI_DEV_NVSWITCH_LINK_STATUS is ERROR (3); a GPU whose
DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL rose within the last hold. Each leaves the GPUs
present but unusable for NVLink work across the NVSwitches. Case list, for each node:
  a faulted entity at every step since `since`, up to now, and now − since ≥
      `Settings.fabric_hold` → candidate
  faulted now, not that long → pending
  a recovery counter that did not rise within the hold, a switch port OFF or SAFE (uncabled,
      training) → nothing
  NotSupported, NotStarted, InProgress, Success, Unrecognized, NvmlTooOld → nothing (no
      NVSwitch, a boot's training, or a driver and DCGM that disagree: not the node's fault)
  no series of a field on the node → nothing: the exporter does not expose it; when no node
      has a series of any of the four fields, `not_applicable` says so in ONE line per run
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
