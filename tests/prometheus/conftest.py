"""Session fixtures: every query engine, each serving the same scenarios.

Every engine in `tests.engines.ENGINES` that is installed or built is started once per
session over each scenario; a test asks for `prom` (parametrised by engine) and is skipped for
an engine that is missing (a failure under CI=true, `tests.tiers.require_engine`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from tests.engines import (
    ENGINES,
    Engine,
    LocalPrometheus,
    PrometheusUnavailable,
    binaries,
    scenario_server,
)
from tests.scenario_build import (
    AGENT_FAIL,
    AGENT_GONE,
    AGENT_PASS,
    AGENT_UNKNOWN,
    KSM_POD,
    NodeTimeline,
    PodTimeline,
    Scenario,
    Steps,
)
from tests.tiers import require_engine

T0 = datetime(2026, 9, 21, 0, 0, 0, tzinfo=UTC)
ONSET_S = 30 * 60  # every fault starts 30 minutes in
ONSET = T0 + timedelta(seconds=ONSET_S)
JOBS_NS = "gpu-node-guard-jobs"


def minutes(m: float) -> datetime:
    """`m` minutes after the faults' onset, to the second."""
    return ONSET + timedelta(seconds=round(m * 60))


def assert_held_at_every_second(
    selected: Callable[[datetime], bool], first_seen: datetime, hold_s: int, step_s: int
) -> None:
    """Every second from 30 s before the hold's end to 30 s after one query step past it: the
    node is never `selected` before it was seen for `hold_s`, and from its first selection (held
    back by at most one query step) at every instant."""
    seen = []
    for offset in range(hold_s - 30, hold_s + step_s + 31):
        if selected(first_seen + timedelta(seconds=offset)):
            seen.append(offset)
            assert offset >= hold_s, f"cordon after {offset}s"
    assert seen and seen[0] <= hold_s + step_s
    assert seen == list(range(seen[0], hold_s + step_s + 31))


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


HIDDEN_COUNTS = (
    (ONSET_S, 4, 48, 1),
    (ONSET_S + 300, 4, 48, 0),
    (ONSET_S + 60, 4, 13, 1),
    (ONSET_S + 360, 4, 13, 0),
)
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
    # GPUs published by the DRA driver only (no nvidia.com/gpu resource): a held isolating Xid
    # is the loss; a reset-class one (94) is not
    NodeTimeline("dra79", xids=((ONSET_S, 4, 79),), dra=True),
    NodeTimeline("dra94", xids=((ONSET_S, 4, 94),), dra=True),
    NodeTimeline("healthy", gpus=8),
    NodeTimeline("temp-only", gpus=8, xid_gauge=False, gpu_temp=True),
    NodeTimeline("no-exporter", gpus=8, xid_gauge=False),
)
NODE_NAMES = frozenset(n.name for n in SCENARIO_NODES)
PODS = (
    KSM_POD,
    PodTimeline("research", "train-0", "cordoned79", gpus=2),
    PodTimeline("research", "train-1", "fast79", gpus=8),  # schedulable, with GPU loss
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
# The node signals: the agent's nvidia-match and the kube-proxy / CNI pods. An agent
# series that stops (gone, UNKNOWN) is seen for 5 more minutes by Prometheus' subquery steps
# and about one step by VictoriaMetrics' in backfilled data (no staleness markers): every gap
# here lasts longer than that, and the engines are compared away from it (docs/engines.md).
GAP_FAIL_S, GAP_STOP_S, GAP_BACK_S = ONSET_S + 20 * 60, ONSET_S + 23 * 60, ONSET_S + 31 * 60
SIGNAL_NODES = (
    NodeTimeline("drv-mismatch", agent=((0, AGENT_PASS), (ONSET_S, AGENT_FAIL))),
    NodeTimeline("drv-young", agent=((0, AGENT_FAIL),), first_s=ONSET_S),  # joined mismatched
    NodeTimeline(
        "drv-offgrid", agent=((0, AGENT_PASS), (ONSET_S + 45, AGENT_FAIL)), scrape_offset_s=3
    ),  # first seen failing at ONSET + 48 s
    NodeTimeline(
        "drv-gap",
        agent=(
            (0, AGENT_PASS),
            (GAP_FAIL_S, AGENT_FAIL),
            (GAP_STOP_S, AGENT_GONE),
            (GAP_BACK_S, AGENT_FAIL),
        ),
    ),
    NodeTimeline("drv-fixed", agent=((0, AGENT_FAIL), (ONSET_S, AGENT_PASS))),
    NodeTimeline("drv-cordoned", agent=((0, AGENT_FAIL),), unschedulable=((0, 1),)),
    NodeTimeline(
        "drv-unknown", agent=((0, AGENT_FAIL), (GAP_FAIL_S, AGENT_UNKNOWN)), unschedulable=((0, 1),)
    ),
    NodeTimeline("drv-passed", agent=((0, AGENT_PASS),), unschedulable=((0, 1),)),
    NodeTimeline("no-agent", unschedulable=((0, 1),)),
    NodeTimeline("net-ok", unschedulable=((0, 1),)),
    NodeTimeline("net-proxy-down", unschedulable=((0, 1),)),
    NodeTimeline("net-no-cni", unschedulable=((0, 1),)),
    NodeTimeline("net-schedulable"),
)
PROXY_DOWN_S = ONSET_S + 20  # kube-proxy's Ready turns false between two scrapes


def _static_proxy(node: str, ready: Steps = ((0, 1),)) -> PodTimeline:
    """RKE2's kube-proxy: a static pod named after its node, owned by the Node."""
    return PodTimeline(
        "kube-system", f"kube-proxy-{node}", node, created_by=("Node", node), ready=ready
    )


def _daemon(namespace: str, daemonset: str, suffix: str, node: str, ready: int = 1) -> PodTimeline:
    return PodTimeline(
        namespace,
        f"{daemonset}-{suffix}",
        node,
        created_by=("DaemonSet", daemonset),
        ready=((0, ready),),
    )


SIGNAL_PODS = (
    KSM_POD,
    _static_proxy("net-ok"),
    _daemon("kube-system", "rke2-canal", "q7x2m", "net-ok"),
    _daemon("calico-system", "calico-node", "h2k9d", "net-ok"),  # any namespace
    _static_proxy("net-proxy-down", ((0, 1), (PROXY_DOWN_S, 0))),
    _daemon("kube-system", "rke2-canal", "p3v8n", "net-proxy-down"),
    _static_proxy("net-no-cni"),
    _static_proxy("net-schedulable", ((0, 0),)),  # not asked: the node is schedulable
    _daemon("kube-system", "rke2-canal", "z9z9z", "net-schedulable", ready=0),
    _daemon("kube-system", "coredns", "c0c0c", "net-ok"),  # not a selected DaemonSet
)
SIGNALS = Scenario(start=T0, duration_s=90 * 60, nodes=SIGNAL_NODES, pods=SIGNAL_PODS)
SIGNAL_NODE_NAMES = frozenset(n.name for n in SIGNAL_NODES)
# One faulted node beside two whose dcgm-exporter labels are not of their format (a UUID with a
# space, a 300-character host name): guard.read.prom_view drops those series and only those nodes.
# Scraped with the default jobs of the GPU Operator and kube-prometheus-stack (the pins' test).
ODD_UUID = "GPU-1a2b3c4d 5e6f-7a8b-9c0d-1e2f3a4b5c6d"
LONG_HOST = "g" * 300
BOUNDARY_NODES = (
    _fault("fault79", 79),
    _fault("odd-uuid", 79),
    _fault("long-host", 48, host_value=LONG_HOST),
)
BOUNDARY = Scenario(
    start=T0,
    duration_s=60 * 60,
    nodes=BOUNDARY_NODES,
    extra_uuids={("odd-uuid", 4): ODD_UUID},
    job_labels=True,
)
# Every GPU node's GPUs published by the DRA driver only: kube-state-metrics has no
# nvidia_com_gpu capacity series in the whole cluster (guard.read.prom_view.missing_input).
DRA_ONLY_NODES = (
    NodeTimeline("dra79", xids=((ONSET_S, 4, 79),), dra=True),
    NodeTimeline("dra-healthy", dra=True),
)
DRA_ONLY = Scenario(start=T0, duration_s=60 * 60, nodes=DRA_ONLY_NODES)
SCENARIOS = {
    "scenario": SCENARIO,
    "misconfigured": MISCONFIGURED,
    "signals": SIGNALS,
    "boundary": BOUNDARY,
    "dra-only": DRA_ONLY,
}


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
def prom_boundary(servers: Servers, engine: Engine) -> LocalPrometheus:
    return _server(servers, engine, "boundary")


@pytest.fixture
def prom_signals(servers: Servers, engine: Engine) -> LocalPrometheus:
    return _server(servers, engine, "signals")


@pytest.fixture
def every_engine_signals(servers: Servers) -> dict[Engine, LocalPrometheus]:
    return _every(servers, "signals")


@pytest.fixture
def every_engine(servers: Servers) -> dict[Engine, LocalPrometheus]:
    """The scenario on every engine that is installed or built, for comparing their answers
    (each missing one is skipped, or fails under CI=true)."""
    return _every(servers, "scenario")


def _every(servers: Servers, key: str) -> dict[Engine, LocalPrometheus]:
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
    return {e: _server(servers, e, key) for e in available}


@pytest.fixture
def prom_dra_only(servers: Servers, engine: Engine) -> LocalPrometheus:
    return _server(servers, engine, "dra-only")
