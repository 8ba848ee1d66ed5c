"""The time each tier took (setup, call and teardown of its tests), one line at the end of a run,
so CI's log says where its minutes go (`.ci/run` prints each build's beside it)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

_SPENT: defaultdict[str, float] = defaultdict(float)


def tier_of(nodeid: str) -> str:
    """`tests/<tier>/…` → the tier; the package's doctests (`guard/…`) → `doctests`.

    >>> tier_of("tests/apiserver/test_rbac.py::test_x"), tier_of("guard/ledger.py::guard.ledger")
    ('apiserver', 'doctests')
    """
    parts = nodeid.split("/")
    return parts[1] if parts[0] == "tests" and len(parts) > 2 else "doctests"


def pytest_runtest_logreport(report: Any) -> None:
    _SPENT[tier_of(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SPENT:
        spent = sorted(_SPENT.items(), key=lambda item: -item[1])
        terminalreporter.write_line(
            "time per tier: " + ", ".join(f"{tier} {s:.0f} s" for tier, s in spent)
        )
