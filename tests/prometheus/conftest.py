"""Session fixture: one real Prometheus over a TSDB holding every isolation scenario."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from guard.example.promserver import (
    LocalPrometheus,
    PrometheusUnavailable,
    binaries,
    scenario_server,
)
from guard.example.scenario import NodeTimeline, Scenario
from tests.tiers import unavailable

T0 = datetime(2026, 9, 21, 0, 0, 0, tzinfo=UTC)
ONSET_S = 30 * 60  # every fault starts 30 minutes in
ONSET = T0 + timedelta(seconds=ONSET_S)


def _fault(
    name: str,
    xid: int,
    *,
    loss: tuple[tuple[int, int], ...] | None = None,
    cordoned: bool = False,
    host_label: str = "Hostname",
) -> NodeTimeline:
    return NodeTimeline(
        name,
        gpus=8,
        host_label=host_label,
        xids=((ONSET_S, 4, xid),),
        allocatable=((ONSET_S, 7),) if loss is None else loss,
        unschedulable=((0, 1),) if cordoned else (),
    )


SCENARIO_NODES = (
    _fault("fast79", 79),
    _fault("slow48", 48),
    _fault("dip48", 48, loss=((ONSET_S, 7), (ONSET_S + 240, 8))),
    _fault("dip79", 79, loss=((ONSET_S, 7), (ONSET_S + 60, 8))),
    _fault("user13", 13),
    _fault("cordoned79", 79, cordoned=True),
    _fault("lower79", 79, host_label="hostname"),
    NodeTimeline("healthy", gpus=8),
    NodeTimeline("remap", gpus=8),
)


@pytest.fixture(scope="session")
def prom() -> Iterator[LocalPrometheus]:
    try:
        binaries()
    except PrometheusUnavailable as exc:
        unavailable("prometheus", str(exc), "install the Debian package `prometheus`")
    scenario = Scenario(start=T0, duration_s=90 * 60, nodes=SCENARIO_NODES, scrape_s=15)
    with scenario_server(scenario) as server:
        yield server


@pytest.fixture(scope="session")
def prom_without_dcgm() -> Iterator[LocalPrometheus]:
    """kube-state-metrics present, dcgm-exporter never scraped: a broken input, not a calm day."""
    try:
        binaries()
    except PrometheusUnavailable as exc:
        unavailable("prometheus", str(exc), "install the Debian package `prometheus`")
    nodes = (NodeTimeline("cpu-only", gpus=0),)
    with scenario_server(Scenario(start=T0, duration_s=20 * 60, nodes=nodes)) as server:
        yield server
