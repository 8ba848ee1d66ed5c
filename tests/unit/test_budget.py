"""The quarantine budget per verdict: one Warning Event when a guard isolation passes its
budget, and the `isolated-past-its-budget` state in `status`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import EmitEvent
from guard.model import GuardEvent, Snapshot
from guard.plan import plan_cycle
from guard.plan.budget import EVENT_REASON, plan_budget
from guard.status.derive import report
from guard.status.model import Sight
from tests.builders import CORDON_AT, NOW, TEMPLATES, node, settings, snapshot


def budget_events(snap: Snapshot, **changes: object) -> list[EmitEvent]:
    return [a for a in plan_budget(snap, settings(**changes)) if a.event_reason == EVENT_REASON]


@pytest.mark.parametrize(
    ("xid", "field", "verdict"),
    [
        (79, "budget_power_cycle_h", "power-cycle"),
        (48, "budget_reset_h", "reset"),
        (143, "budget_rma_h", "rma"),
        (62, "budget_human_h", "human"),
    ],
)
# The builders' cordon is at 05:00 and the cycle at 05:55: 55 minutes old.


def test_each_verdict_has_its_own_budget(xid: int, field: str, verdict: str) -> None:
    snap = snapshot(node("n", cordoned=True, guarded_xid=xid))
    assert budget_events(snap, **{field: 1.0}) == []  # 55 min < 1 h
    (event,) = budget_events(snap, **{field: 0.5})  # 55 min > 30 min, within the Event window
    assert event.event_type == "Warning" and event.reason == "past-budget"
    assert f"verdict {verdict}" in event.message and f"isolated since {CORDON_AT}" in event.message
    others = {"budget_power_cycle_h", "budget_reset_h", "budget_rma_h", "budget_human_h"} - {field}
    assert budget_events(snap, **dict.fromkeys(others, 0.1)) == []  # another verdict's budget


def test_one_event_per_isolation() -> None:
    snap = snapshot(node("n", cordoned=True, guarded_xid=79))
    (event,) = budget_events(snap, budget_power_cycle_h=0.5)
    listed = replace(snap, events=(GuardEvent(event.name, "n", EVENT_REASON, 1),))
    assert budget_events(listed, budget_power_cycle_h=0.5) == []  # written: not again
    # Past the window (the Event may have expired since): never a second one.
    late = replace(snap, now=NOW + timedelta(hours=2))
    assert budget_events(late, budget_power_cycle_h=0.5) == []
    # The cycle plans it with everything else.
    cycle = plan_cycle(snap, settings(budget_power_cycle_h=0.5), TEMPLATES)
    assert [a for a in cycle if isinstance(a, EmitEvent) and a.event_reason == EVENT_REASON]


def test_status_shows_the_state_with_the_verdict_and_what_the_return_waits_for() -> None:
    snap = snapshot(node("n", cordoned=True, guarded_xid=79))  # same boot: waits for power
    (row,) = report(snap, settings(budget_power_cycle_h=0.5), TEMPLATES, Sight()).nodes
    assert row.state == "isolated-past-its-budget"
    assert row.runbook.endswith("#isolated-past-its-budget")
    assert row.blocked is not None and row.blocked.condition == "past-budget"
    assert row.blocked.observed.startswith(
        "verdict power-cycle, isolated 0.9 h (budget 0.5 h); isolated-waiting-for-power-cycle"
    )
    (within,) = report(snap, settings(), TEMPLATES, Sight()).nodes
    assert within.state == "isolated-waiting-for-power-cycle"
