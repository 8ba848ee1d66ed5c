"""The ledger's archive Event is planned with the append that passes the size bound, so the dry
run shows it and the executor writes nothing the plan did not name."""

from __future__ import annotations

import io
from dataclasses import replace

from guard.actions import AppendLedgerLine, EmitEvent
from guard.apply import PrintExecutor
from guard.log import Log
from guard.plan import plan_cycle
from guard.plan.common import LEDGER_ARCHIVED, with_archive_events
from tests.builders import NOW, TEMPLATES, brief, gpu, node, settings, snapshot

S = settings()


def cordon_plan(ledger_bytes: int):
    snap = replace(snapshot(node("b"), candidates=(gpu("b", 79),)), ledger_bytes=ledger_bytes)
    return plan_cycle(snap, S, TEMPLATES)


def test_a_ledger_below_its_bound_gets_no_archive_event():
    assert ("event", "b", LEDGER_ARCHIVED) not in brief(cordon_plan(0))
    assert ("append-ledger", "b", "xid-79") in brief(cordon_plan(S.ledger_archive_bytes - 200))


def test_the_append_that_passes_the_bound_is_followed_by_the_archive_event():
    plan = cordon_plan(S.ledger_archive_bytes - 10)
    shapes = brief(plan)
    at = shapes.index(("append-ledger", "b", "xid-79"))
    assert shapes[at + 1] == ("event", "b", LEDGER_ARCHIVED)
    (event,) = [a for a in plan if isinstance(a, EmitEvent) and a.reason == LEDGER_ARCHIVED]
    assert event.event_reason == "GuardLedgerArchived"
    assert S.ledger_configmap in event.message


def test_the_dry_run_shows_the_archive_event():
    out = io.StringIO()
    printer = PrintExecutor(Log("text", out, NOW), show_manifests=False)
    for action in cordon_plan(S.ledger_archive_bytes):
        printer.apply(action)
    assert "dry-run would event node=b reason=ledger-archived" in out.getvalue()


def test_one_archive_halves_the_ledger_so_the_next_append_fits():
    line = "2026-09-21T05:00:00Z xid-79 0000:99:00.0 GPU-1 gpu-node-guard"
    appends = [AppendLedgerLine(n, "xid-79", line, "gpu-fault-ledger") for n in ("a", "b")]
    snap = replace(snapshot(), ledger_bytes=S.ledger_archive_bytes)
    planned = with_archive_events(snap, S, appends)
    kinds = [type(a).__name__ for a in planned]
    assert kinds == ["AppendLedgerLine", "EmitEvent", "AppendLedgerLine"]
