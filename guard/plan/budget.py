"""The quarantine budget: one Warning Event when a guard isolation outlives its verdict's
expected repair time (`budget_*_h`; a cordon without an Xid is `human`). docs/alerts.md.

The window keeps it to one Event although the API server drops an Event an hour after its last
write: a cycle runs every few minutes, and one that finds it expired is past the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from guard.actions import EmitEvent
from guard.figures import budget_of
from guard.ledger import format_time
from guard.model import NodeInfo, Snapshot
from guard.settings import Settings
from guard.states import Decision
from guard.xid_tables import Repair, bundled_classes

EVENT_WINDOW = timedelta(minutes=50)  # shorter than the API server's event TTL (1 h)
EVENT_REASON = "GuardPastBudget"


def verdict(node: NodeInfo) -> Repair:
    c = node.cordon
    return bundled_classes().verdict_of(c.xid) if c is not None and c.xid else Repair.HUMAN


def past_budget(node: NodeInfo, s: Settings, now: datetime) -> tuple[Repair, timedelta] | None:
    """(verdict, age) of the node's guard isolation when it is past its budget."""
    c = node.cordon
    if c is None or c.at is None:
        return None
    found = verdict(node)
    age = budget_of(s).past(found, c.at, now)
    return (found, age) if age is not None else None


def plan_budget(snap: Snapshot, s: Settings) -> tuple[EmitEvent, ...]:
    out = []
    for node in snap.nodes:
        past = past_budget(node, s, snap.now) if not node.unreadable else None
        if past is None or node.cordon is None or node.cordon.at is None:
            continue
        found, age = past
        budget = budget_of(s).of(found)
        if age - budget >= EVENT_WINDOW:
            continue
        at = format_time(node.cordon.at)
        message = (
            f"isolated since {at} ({node.cordon.reason}, verdict {found.value}): past its "
            f"quarantine budget of {_hours(budget)}; check the repair ticket, or hold the node "
            "with a reason"
        )
        event = EmitEvent(node.name, Decision.PAST_BUDGET, "Warning", EVENT_REASON, message, at)
        if all(e.name != event.name for e in snap.events):
            out.append(event)
    return tuple(out)


def _hours(d: timedelta) -> str:
    h = d / timedelta(hours=1)
    return f"{h:g} h" if h < 48 else f"{h / 24:g} days"
