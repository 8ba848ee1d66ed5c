"""One closed set of decision words (guard.states.Decision): every word the planners write
is one of them, STATES speaks only them, and each action type has one name in logs and JSON."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from guard.actions import TYPE_WORDS, Action
from guard.plan import plan_cycle
from guard.states import STATES, Decision, as_reason
from tests.builders import TEMPLATES, back_node, gpu, node, settings, snapshot

REPO = Path(__file__).resolve().parents[2]
MYPY = str(Path(sys.executable).with_name("mypy"))


def mypy(tmp_path: Path, reason: str) -> subprocess.CompletedProcess[str]:
    """mypy, strict with the project's config, on a planner that skips with `reason`, the way
    the planners call `Skip` (positional) and by keyword."""
    planner = tmp_path / "planner.py"
    planner.write_text(
        "from guard.actions import Skip\n"
        "from guard.states import Decision\n\n"
        f'SKIP = Skip("n", {reason}, "detail", "next")\n'
        f'WARN = Skip(node="n", reason={reason}, detail="detail", next="next", level="WARN")\n'
    )
    cache = tmp_path / "cache"
    return subprocess.run(
        [MYPY, "--config-file", "pyproject.toml", "--cache-dir", str(cache), str(planner)],
        cwd=REPO,
        env={**os.environ, "MYPYPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_mypy_refuses_a_reason_that_is_not_a_decision(tmp_path: Path) -> None:
    """Every action's reason is a `guard.states.Reason`: a word from nowhere is a type error,
    so the closed set holds without a scan of the planners."""
    bad = mypy(tmp_path, '"not-a-word"')
    assert bad.returncode == 1, bad.stdout + bad.stderr
    expected = 'has incompatible type "str"; expected "Decision | FaultReason"  [arg-type]'
    assert f'planner.py:4: error: Argument 2 to "Skip" {expected}' in bad.stdout, bad.stdout
    assert f'planner.py:5: error: Argument "reason" to "Skip" {expected}' in bad.stdout
    assert "Found 2 errors in 1 file" in bad.stdout, bad.stdout
    good = mypy(tmp_path, "Decision.SAME_BOOT")
    assert good.returncode == 0, good.stdout + good.stderr


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
    assert sorted(w for w in found if as_reason(w) is None) == []


def test_each_action_type_has_one_name_in_logs_and_json() -> None:
    for plan in plans():
        for action in plan:
            assert action.log_line()[0] == TYPE_WORDS[type(action)], action
