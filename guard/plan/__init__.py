"""The planners: pure functions from a Snapshot, the Settings and the Job templates to actions."""

from __future__ import annotations

from collections.abc import Iterable

from guard.actions import Action, ClearGuardAnnotations, Uncordon
from guard.jobs import JobTemplates
from guard.model import Snapshot
from guard.plan.isolation import plan_isolation
from guard.plan.returning import plan_return
from guard.plan.unreadable import plan_unreadable
from guard.settings import Settings


def plan_cycle(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    """What could not be read (reported once), the return check (breaker or not), then isolation.

    Nodes the return check releases this cycle no longer count against the circuit breaker.
    """
    returning = plan_return(snap, s, t)
    return plan_unreadable(snap, s) + returning + plan_isolation(snap, s, t, released(returning))


def released(returning: Iterable[Action]) -> frozenset[str]:
    """Nodes the return check uncordons or lets go of (a person's uncordon) in this cycle."""
    return frozenset(a.node for a in returning if isinstance(a, Uncordon | ClearGuardAnnotations))
