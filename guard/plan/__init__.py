"""The planners: pure functions from a Snapshot, the Settings and the Job templates to actions."""

from __future__ import annotations

from collections.abc import Iterable

from guard.actions import Action, ClearGuardAnnotations, Cordon, Skip, Uncordon
from guard.jobs import JobTemplates
from guard.model import Snapshot
from guard.plan import budget, fence_audit, units
from guard.plan.checks import plan_checks
from guard.plan.common import with_archive_events
from guard.plan.isolation import MAX_CORDON_TRIES, plan_isolation
from guard.plan.unreadable import plan_unreadable, unreadable_events
from guard.settings import Settings


def plan_cycle(snap: Snapshot, s: Settings, t: JobTemplates) -> tuple[Action, ...]:
    """What could not be read, the return check, isolation, the lifecycle checks, then the
    Events about unreadable nodes. Nodes the return check releases this cycle no longer count
    against the breaker; a cycle cordons at most one node, a hardware fault first."""
    returning = units.plan_return(snap, s, t)
    let_go = released(returning)
    screened = plan_isolation(snap, s, t, let_go)  # the nodes the checks leave to it
    checks, failed = plan_checks(snap, s, t, let_go, screened)
    isolating = plan_isolation(snap, s, t, let_go, conformance=failed) if failed else screened
    # The unreadable nodes' Events last: bounded, and never ahead of a cordon.
    planned = plan_unreadable(snap, s) + returning + isolating + checks + unreadable_events(snap)
    planned += fence_audit.plan_audit(snap, s, planned)  # fence Jobs no record explains
    planned += budget.plan_budget(snap, s)
    return with_archive_events(snap, s, planned)


def released(returning: Iterable[Action]) -> frozenset[str]:
    """Nodes the return check uncordons or lets go of (a person's uncordon) in this cycle."""
    return frozenset(a.node for a in returning if isinstance(a, Uncordon | ClearGuardAnnotations))


def plan_fallback(
    snap: Snapshot, s: Settings, t: JobTemplates, refused: frozenset[str]
) -> tuple[Action, ...]:
    """The isolation check's next pick once the API refused the cordons of `refused` this cycle:
    only the new pick's writes (its skip lines were logged with the first plan); empty when none
    is left, the breaker is open, or `MAX_CORDON_TRIES` cordons were sent."""

    if not refused or len(refused) >= MAX_CORDON_TRIES:
        return ()
    let_go = released(units.plan_return(snap, s, t))
    again = plan_isolation(snap, s, t, let_go, refused)
    pick = next((a.node for a in again if isinstance(a, Cordon)), None)
    return with_archive_events(
        snap, s, (a for a in again if a.node == pick and not isinstance(a, Skip))
    )
