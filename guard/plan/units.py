"""The isolation units, registered in one list (docs/architecture.md, "A new isolation unit"):
each names its record, its policy kind, its isolating action, its target, its isolate and its
return. The breaker counts every unit's isolations here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from guard.actions import Action, Cordon, TaintDevice
from guard.codec.records import isolations
from guard.jobs import JobTemplates
from guard.model import GpuSample, Isolation, NodeInfo, Snapshot, Unit
from guard.names import Annotations
from guard.plan import device_taint, returning
from guard.plan.common import keys
from guard.settings import Settings

Planner = Callable[[Snapshot, Settings, JobTemplates], tuple[Action, ...]]
Actions = tuple[Action, ...]
Isolator = Callable[[Snapshot, Settings, JobTemplates, NodeInfo, GpuSample, int], Actions]


@dataclass(frozen=True, slots=True)
class IsolationUnit:
    name: Unit
    record: Callable[[Annotations], str]  # the node annotation that records the isolation
    policy_kind: str  # the kind whose admission policy bounds its writes (guard.generate.policies)
    isolating: type[Action]  # the action that isolates (one per cycle, across every unit)
    takes: Callable[[Snapshot, NodeInfo, GpuSample], bool]  # the pick is this unit's target
    isolate: Isolator
    plan_return: Planner  # every isolation of this unit: the return table, gates, lift


CORDON = IsolationUnit(
    "cordon",
    lambda k: k.reason,
    "Node",
    Cordon,
    lambda snap, node, g: False,  # the unit of every GPU no other unit takes (unit_for)
    returning.isolate,
    returning.plan_return,
)
DEVICE_TAINT = IsolationUnit(
    "device-taint",
    lambda k: k.device_taint,
    "DeviceTaintRule",
    TaintDevice,
    lambda snap, node, g: bool(device_taint.targets(snap, node.name, g.uuid, g.pci)),
    device_taint.isolate,
    device_taint.plan_return,
)
# Every unit, in the order the return plans them.
UNITS: tuple[IsolationUnit, ...] = (CORDON, DEVICE_TAINT)


def unit_for(snap: Snapshot, node: NodeInfo, g: GpuSample) -> IsolationUnit:
    """The unit that isolates the pick's GPU: the first that takes it, else the cordon."""
    return next((u for u in UNITS if u.takes(snap, node, g)), CORDON)


def plan_return(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    return tuple(a for u in UNITS for a in u.plan_return(snap, s, t))


def all_isolations(snap: Snapshot, s: Settings) -> tuple[Isolation, ...]:
    return isolations(snap, keys(s))


def breaker_count(snap: Snapshot, s: Settings, released: frozenset[str] = frozenset()) -> int:
    """Every isolation of every unit once (`Isolation.key`), readable or not (an unreadable node
    still holds its place), less those the return check lets go this cycle (`released`)."""

    return sum(1 for i in all_isolations(snap, s) if i.node not in released)
