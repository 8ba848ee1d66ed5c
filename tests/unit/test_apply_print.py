"""The dry-run executor: the real run's lines as ``dry-run would …``, outcomes that say so."""

from __future__ import annotations

import io
import json

from guard.apply import PrintExecutor
from guard.apply.outcome import tally
from guard.log import Log
from guard.plan import plan_cycle
from tests.builders import HELD_S, NOW, TEMPLATES, gpu, node, settings, snapshot


def plan():
    snap = snapshot(node("a"), node("b", allocatable=7), candidates=(gpu("b", 79), gpu("a", 48)))
    return plan_cycle(snap, settings(), TEMPLATES)


def test_dry_run_prints_would_lines_and_counts_nothing_as_applied():
    out = io.StringIO()
    printer = PrintExecutor(Log("text", out, NOW), show_manifests=True)
    outcomes = [printer.apply(a) for a in plan()]
    text = out.getvalue().splitlines()
    lines = [t.split(" ", 2)[2] for t in text if t.startswith("2026-")]
    assert [line.split(" node=")[0] for line in lines] == [
        "dry-run would cordon",
        "dry-run would event",
        "dry-run would append-ledger",
        "dry-run would create-job",
        "skip",
    ]
    assert "    kind: Job" in text, "the Job's manifest follows its line"
    counts = tally(outcomes)
    assert (counts["applied"], counts["would_apply"], counts["decisions"]) == (0, 4, 1)
    assert counts["would_apply_cordon"] == 1
    assert [o.action for o in printer.outcomes] == list(plan())


def test_dry_run_json_lines_carry_the_event_and_a_dry_run_flag():
    out = io.StringIO()
    printer = PrintExecutor(Log("json", out, NOW), show_manifests=False)
    for action in plan():
        printer.apply(action)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["event"], r.get("dry_run", False)) for r in records] == [
        ("cordon", True),
        ("event", True),
        ("append-ledger", True),
        ("create-job", True),
        ("skip", False),
    ]
    event = records[1]
    assert event["event_reason"] == "GuardCordoned" and event["type"] == "Warning"
    assert records[0]["held_s"] == HELD_S and isinstance(records[0]["held_s"], int)
