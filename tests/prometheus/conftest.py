"""Session fixtures: every query engine, each serving the same scenarios.

Every engine in `guard.example.engines.ENGINES` that is installed or built is started once per
session over each scenario; a test asks for `prom` (parametrised by engine) and is skipped for
an engine that is missing (a failure under CI=true, `tests.tiers.require_engine`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from guard.example.engines import ENGINES, Engine, PrometheusUnavailable, binaries
from guard.example.promserver import LocalPrometheus, scenario_server
from guard.example.scenario import KSM_POD, NodeTimeline, PodTimeline, Scenario
from tests.tiers import require_engine

T0 = datetime(2026, 9, 21, 0, 0, 0, tzinfo=UTC)
ONSET_S = 30 * 60  # every fault starts 30 minutes in
ONSET = T0 + timedelta(seconds=ONSET_S)
JOBS_NS = "gpu-node-guard-jobs"


def _fault(
    name: str,
    xid: int,
    *,
    loss: tuple[tuple[int, int], ...] | None = None,
    cordoned: bool = False,
    host_label: str = "Hostname",
    at_s: int = ONSET_S,
    **more: object,
) -> NodeTimeline:
    return NodeTimeline(
        name,
        gpus=8,
        host_label=host_label,
        xids=((at_s, 4, xid),),
        allocatable=((at_s, 7),) if loss is None else loss,
        unschedulable=((0, 1),) if cordoned else (),
        **more,  # type: ignore[arg-type]
    )


HIDDEN_COUNTS = ((ONSET_S, 4, 48, 1), (ONSET_S + 300, 4, 48, 0),
                 (ONSET_S + 60, 4, 13, 1), (ONSET_S + 360, 4, 13, 0))  # fmt: skip
SCENARIO_NODES = (
    _fault("fast79", 79),
    _fault("slow48", 48),
    _fault("dip48", 48, loss=((ONSET_S, 7), (ONSET_S + 240, 8))),
    _fault("dip79", 79, loss=((ONSET_S, 7), (ONSET_S + 60, 8))),
    _fault("user13", 13),
    _fault("cordoned79", 79, cordoned=True),
    _fault("lower79", 79, host_label="hostname"),
    # joined already faulted: its series are younger than the window
    _fault("young48", 48, first_s=ONSET_S),
    _fault("young79", 79, first_s=ONSET_S),
    # scraped 3 s after the minute: the loss is first seen at ONSET + 48 s
    _fault("offgrid79", 79, at_s=ONSET_S + 45, scrape_offset_s=3),
    # the loss starts between two scrapes (ONSET + 45 s and + 60 s)
    _fault("between79", 79, at_s=ONSET_S + 50),
    # Xid 48, then user code's Xid 13 overwrites the gauge; the windowed counter keeps the 48
    NodeTimeline(
        "hidden48",
        xids=((ONSET_S, 4, 48), (ONSET_S + 60, 4, 13)),
        allocatable=((ONSET_S, 7),),
        xid_counts=HIDDEN_COUNTS,
    ),
    NodeTimeline(
        "counted13",
        xids=((ONSET_S, 4, 13),),
        allocatable=((ONSET_S, 7),),
        xid_counts=((ONSET_S, 4, 13, 2),),
    ),
    # an old exporter names itself; a scrape relabel put the Node's name into `node`
    _fault("relabel79", 79, host_value="nvidia-dcgm-exporter-x7k2p", node_label="relabel79"),
    NodeTimeline("healthy", gpus=8),
    NodeTimeline("temp-only", gpus=8, xid_gauge=False, gpu_temp=True),
    NodeTimeline("no-exporter", gpus=8, xid_gauge=False),
)
NODE_NAMES = frozenset(n.name for n in SCENARIO_NODES)
PODS = (
    KSM_POD,
    PodTimeline("research", "train-0", "cordoned79", gpus=2),
    PodTimeline("research", "train-1", "fast79", gpus=8),  # schedulable node: not asked
    PodTimeline(JOBS_NS, "gng-loadtest-cordoned79", "cordoned79", gpus=8),  # the guard's own
    PodTimeline("research", "done-0", "cordoned79", gpus=1, running=((0, 1), (ONSET_S, 0))),
)
SCENARIO = Scenario(start=T0, duration_s=90 * 60, nodes=SCENARIO_NODES, scrape_s=15, pods=PODS)
# kube-state-metrics from the start, dcgm-exporter only from 30 minutes in, naming its pod.
MISCONFIGURED = Scenario(
    start=T0,
    duration_s=60 * 60,
    nodes=(
        NodeTimeline("cpu-only", gpus=0),
        NodeTimeline("gpu-a", host_value="nvidia-dcgm-exporter-cwbcm", first_s=ONSET_S),
    ),
)
SCENARIOS = {"scenario": SCENARIO, "misconfigured": MISCONFIGURED}

Servers = dict[tuple[Engine, str], "LocalPrometheus | PrometheusUnavailable"]


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    """Every available engine over every scenario, started once for the session."""
    found: Servers = {}
    with ExitStack() as stack:
        for engine in ENGINES:
            for key, scenario in SCENARIOS.items():
                try:
                    binaries(engine)
                    found[engine, key] = stack.enter_context(scenario_server(scenario, engine))
                except PrometheusUnavailable as exc:
                    found[engine, key] = exc
        yield found


def _server(servers: Servers, engine: Engine, key: str) -> LocalPrometheus:
    require_engine(engine)
    server = servers[engine, key]
    if isinstance(server, PrometheusUnavailable):
        pytest.fail(f"{engine} did not start: {server}", pytrace=False)
    return server


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def prom(servers: Servers, engine: Engine) -> LocalPrometheus:
    return _server(servers, engine, "scenario")


@pytest.fixture
def prom_misconfigured(servers: Servers, engine: Engine) -> LocalPrometheus:
    return _server(servers, engine, "misconfigured")


@pytest.fixture
def every_engine(servers: Servers) -> dict[Engine, LocalPrometheus]:
    """The scenario on every engine that is installed or built, for comparing their answers
    (each missing one is skipped, or fails under CI=true)."""
    available = []
    for e in ENGINES:
        try:
            binaries(e)
            available.append(e)
        except PrometheusUnavailable:
            if os.environ.get("CI", "").lower() == "true":
                require_engine(e)
    if "prometheus2" not in available or len(available) < 2:
        require_engine("prometheus2")
        pytest.skip(f"only {available} available: nothing to compare")
    return {e: _server(servers, e, "scenario") for e in available}
