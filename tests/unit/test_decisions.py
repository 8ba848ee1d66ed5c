"""One closed set of decision words (guard.states.Decision): every word the planners write
is one of them, STATES speaks only them, and each action type has one name in logs and JSON."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from guard.actions import TYPE_WORDS, Action
from guard.plan import plan_cycle
from guard.states import JOB_STAGES, STATES, Decision, is_decision
from tests.builders import TEMPLATES, back_node, gpu, node, settings, snapshot

REPO = Path(__file__).resolve().parents[2]
PLANNERS = [
    *sorted((REPO / "guard" / "plan").glob("*.py")),
    REPO / "guard" / "apply" / "__init__.py",
]
ACTIONS = {t.__name__ for t in TYPE_WORDS}
# Helpers that take the decision word as their third argument.
HELPERS = {"create_job", "ledger_append", "job_spec", "skip"}


def reason_args(tree: ast.AST) -> list[ast.expr]:
    """The decision-word arguments in `tree`: an action's second argument (or `reason=`), a
    helper's third, and what an `_ineligible` returns."""
    out: list[ast.expr] = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = getattr(call.func, "id", getattr(call.func, "attr", ""))
        at = 1 if name in ACTIONS else 2 if name in HELPERS else None
        if at is None:
            continue
        if len(call.args) > at:
            out.append(call.args[at])
        out += [k.value for k in call.keywords if k.arg == "reason"]
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if fn.name == "_ineligible":
            out += [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value]
    return out


def unknown_words(path: Path) -> list[str]:
    bad = []
    for arg in reason_args(ast.parse(path.read_text(), str(path))):
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value:
            if not is_decision(arg.value):
                bad.append(f"{path.name}:{arg.lineno}: {arg.value!r}")
        elif isinstance(arg, ast.JoinedStr):  # f"{kind}-running", f"xid-{code}"
            tail = arg.values[-1]
            text = tail.value if isinstance(tail, ast.Constant) else ""
            head = arg.values[0]
            family = isinstance(head, ast.Constant) and head.value in ("xid-", "conformance-")
            if not family and text.lstrip("-") not in JOB_STAGES:
                bad.append(f"{path.name}:{arg.lineno}: {ast.unparse(arg)}")
    return bad


@pytest.mark.parametrize("path", PLANNERS, ids=lambda p: p.name)
def test_every_word_a_planner_writes_is_a_decision(path: Path) -> None:
    assert unknown_words(path) == []


def test_the_scan_finds_a_word_outside_the_set(tmp_path: Path) -> None:
    planner = tmp_path / "planner.py"
    planner.write_text(
        'Skip(node, "same-boot", "", "")\nSkip(node, "waits-a-bit", "", "")\n'
        'create_job(s, node, f"{kind}-sleeping", kind, name, manifest)\n'
    )
    assert unknown_words(planner) == [
        "planner.py:2: 'waits-a-bit'",
        "planner.py:3: f'{kind}-sleeping'",
    ]


def test_states_speak_only_decisions() -> None:
    assert all(isinstance(word, Decision) for word in STATES)


def plans() -> list[tuple[Action, ...]]:
    s = settings()
    guarded = tuple(node(f"g{i}", cordoned=True, guarded_xid=79) for i in range(5))
    return [
        plan_cycle(snapshot(node("a"), candidates=(gpu("a", 79),)), s, TEMPLATES),
        plan_cycle(snapshot(back_node("b")), s, TEMPLATES),
        plan_cycle(snapshot(back_node("b", boot="boot-2")), s, TEMPLATES),
        plan_cycle(snapshot(node("b"), *guarded, candidates=(gpu("b", 79),)), s, TEMPLATES),
        plan_cycle(snapshot(back_node("c"), candidates=(gpu("c", 48),)), s, TEMPLATES),
    ]


def test_every_planned_reason_is_a_decision() -> None:
    found = {a.reason for plan in plans() for a in plan}
    assert "breaker-open" in found and "xid-79" in found
    assert sorted(w for w in found if not is_decision(w)) == []


def test_each_action_type_has_one_name_in_logs_and_json() -> None:
    for plan in plans():
        for action in plan:
            assert action.log_line()[0] == TYPE_WORDS[type(action)], action
