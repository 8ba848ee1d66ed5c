"""The time each tier took (setup, call and teardown of its tests), one line at the end of a run,
so CI's log says where its minutes go (`.ci/run` prints each build's beside it); and the apiserver
tier's closing lines (`tests.apiserver.tally`), gathered from every pytest-xdist worker."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tests.apiserver import tally

_SPENT: defaultdict[str, float] = defaultdict(float)
# Each tier's first start and last end (epoch seconds): with workers side by side, its wall time.
_SPAN: dict[str, tuple[float, float]] = {}


def tier_of(nodeid: str) -> str:
    """`tests/<tier>/…` → the tier; the package's doctests (`guard/…`) → `doctests`.

    >>> tier_of("tests/apiserver/test_rbac.py::test_x"), tier_of("guard/ledger.py::guard.ledger")
    ('apiserver', 'doctests')
    """
    parts = nodeid.split("/")
    return parts[1] if parts[0] == "tests" and len(parts) > 2 else "doctests"


# Files that take minutes (a cron slot, a watch, many control-plane round trips, promtool's rule
# tests), started first: with pytest-xdist (`make test`) a file runs on one worker, and one
# started last would keep the run waiting after the others are done (docs/benchmarks.md, CI time).
SLOW_FILES_FIRST = (
    "tests/prometheus/test_alert_engines.py",  # `promtool test rules`: minutes of one core
    "tests/unit/test_alerts.py",  # the same, on the rule variants
    "tests/apiserver/test_watch_e2e.py",
    "tests/apiserver/test_blast_radius.py",
    "tests/apiserver/test_appliers.py",
    "tests/apiserver/test_transplant_routes.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        return SLOW_FILES_FIRST.index(path) if path in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)

    items.sort(key=rank)  # stable: every file's tests keep their order and stay together


def pytest_runtest_logreport(report: Any) -> None:
    tier = tier_of(report.nodeid)
    _SPENT[tier] += report.duration
    first, last = _SPAN.get(tier, (report.start, report.stop))
    _SPAN[tier] = (min(first, report.start), max(last, report.stop))


def pytest_sessionfinish(session: pytest.Session) -> None:
    # On an xdist worker: its own figures travel to the controller, which prints them.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["apiserver-tally"] = tally.to_controller()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    sent = getattr(node, "workeroutput", {}).get("apiserver-tally")
    if sent is not None:  # None: the worker died before its session finished
        tally.from_worker(sent)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in tally.lines():
        terminalreporter.write_line(f"apiserver tier: {line}")
    if not _SPENT:
        return
    spent = sorted(_SPENT.items(), key=lambda item: -item[1])
    workers = terminalreporter.config.getoption("numprocesses", None)
    terminalreporter.write_line(
        "time per tier"
        + (f" (test seconds, summed over {workers} workers)" if workers else "")
        + ": "
        + ", ".join(f"{tier} {s:.0f} s" for tier, s in spent)
    )
    if workers:
        begin = min(first for first, _ in _SPAN.values())
        spans = sorted(_SPAN.items(), key=lambda item: -(item[1][1] - item[1][0]))
        terminalreporter.write_line(
            "wall time per tier (its first test's start to its last test's end, from the run's "
            "start): "
            + ", ".join(
                f"{tier} {last - first:.0f} s ({first - begin:.0f}–{last - begin:.0f})"
                for tier, (first, last) in spans
            )
        )
