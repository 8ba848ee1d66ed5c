"""The pushed metrics: valid, unique names, and docs/metrics.md lists each with its labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guard import metric_names, runbook
from guard.metric_names import PUSHED, PushedMetric

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
NODE_STATES = [s for s in runbook.Section if s not in runbook.CYCLE_CONDITIONS]


def _docs_row(name: str) -> list[str]:
    """The cells of the metrics table row for `name`."""
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"| `{name}` |"):
            return [cell.strip() for cell in line.strip("|").split("|")]
    raise AssertionError(f"{DOCS.name} has no table row for {name}")


def test_names_are_unique_prometheus_gauge_names_of_the_guard() -> None:
    names = [m.name for m in PUSHED]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"gpu_node_guard_[a-z0-9_]+", name), name
        assert not name.endswith("_total"), f"{name}: per-run values are gauges"


@pytest.mark.parametrize("metric", PUSHED, ids=lambda m: m.name)
def test_docs_list_the_metric_with_its_labels(metric: PushedMetric) -> None:
    _, labels, _ = _docs_row(metric.name)
    documented = tuple(re.findall(r"`(\w+)`", labels))
    assert documented == metric.labels


def test_docs_list_every_node_state_as_a_state_value() -> None:
    row = next(
        line
        for line in DOCS.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `state` |")
    )
    assert re.findall(r"`([a-z0-9-]+)`", row.split("|")[2]) == [s.value for s in NODE_STATES]


def test_the_alert_reads_the_pushed_names() -> None:
    assert metric_names.LAST_SUCCESS in PUSHED and metric_names.LAST_RUN in PUSHED
    assert metric_names.GROUPING_LABEL == "namespace"
