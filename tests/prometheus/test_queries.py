"""The exact PromQL of guard/codec/queries.py on every engine, read the way the guard reads it.

Each test runs once per engine (Prometheus 2 and 3, VictoriaMetrics, Thanos Query); the last one
compares the whole view the guard builds across engines at many instants.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from guard.codec.queries import hold_queries, return_queries, watch_poll
from guard.doors.prom import PromClient, PromError
from guard.model import GpuPod, NodeInfo, PromView
from guard.plan import return_rule
from guard.plan.hold import candidates, loss_held_s
from guard.plan.watch import fine
from guard.read.prom_view import JoinError, check_join, read_prom
from guard.settings import Settings
from tests.prometheus.conftest import (
    JOBS_NS,
    NODE_NAMES,
    ONSET,
    SCENARIO_NODES,
    T0,
    assert_held_at_every_second,
    minutes,
)
from tests.scenario_build import PodTimeline

pytestmark = pytest.mark.prometheus
S = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS)
HOLD, FAST = S.hold_window_s, S.fast_hold_window_s


def view(prom, at: datetime, s: Settings = S) -> PromView:
    return read_prom(PromClient(prom.url), s, at, NODE_NAMES)


def selected(prom, at: datetime, s: Settings = S) -> set[str]:
    return {c.node for c in candidates(view(prom, at, s), at, s)}


@pytest.mark.parametrize(
    ("node", "after", "expected"),
    [
        pytest.param("fast79", 2.5, True, id="xid79-loss-2m-selected"),
        pytest.param("fast79", 1, False, id="xid79-loss-1m-not-yet"),
        pytest.param("slow48", 5, False, id="xid48-loss-5m-not-yet"),
        pytest.param("slow48", 11, True, id="xid48-loss-11m-selected"),
        pytest.param("dip48", 11, False, id="dip-recovering-in-window-never"),
        pytest.param("dip48", 30, False, id="dip-recovered-never"),
        pytest.param("dip79", 3, False, id="xid79-short-dip-never"),
        pytest.param("user13", 30, False, id="user-code-xid-never"),
        pytest.param("cordoned79", 30, False, id="already-cordoned-never"),
        pytest.param("lower79", 3, True, id="hostname-label-works"),
        pytest.param("healthy", 30, False, id="healthy-never"),
        pytest.param("young48", 0.6, False, id="young-series-35s-not-a-candidate"),
        pytest.param("young48", 9.9, False, id="young-series-not-before-the-window"),
        pytest.param("young48", 10, True, id="young-series-after-the-whole-window"),
        pytest.param("young79", 1.9, False, id="young-series-fast-path-waits-too"),
        pytest.param("young79", 2, True, id="young-series-fast-path-after-its-window"),
        pytest.param("hidden48", 11, True, id="counted-xid-48-under-a-later-13"),
        pytest.param("counted13", 30, False, id="counted-user-code-xid-never"),
        pytest.param("relabel79", 3, True, id="relabelled-node-label-joins"),
        pytest.param("dra79", 1, False, id="dra-node-xid79-1m-not-yet"),
        pytest.param("dra79", 2.5, True, id="dra-node-xid79-held-is-the-loss"),
        pytest.param("dra94", 30, False, id="dra-node-reset-class-xid-never"),
    ],
)
def test_isolation_decision(prom, node, after, expected):
    assert (node in selected(prom, minutes(after))) is expected


# (node, first scrape that showed the loss): scraped off the minute, and a loss that began
# between two scrapes; instants at every second past the minute around the hold's end.
OFF_GRID = [
    pytest.param("offgrid79", ONSET + timedelta(seconds=48), id="loss-scraped-at-48s"),
    pytest.param("between79", ONSET + timedelta(seconds=60), id="loss-began-between-scrapes"),
]


@pytest.mark.parametrize(("node", "first_seen"), OFF_GRID)
def test_hold_is_never_shorter_than_the_setting_at_any_second(prom, node, first_seen):
    s = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS, hold_window_s=600)
    assert_held_at_every_second(
        lambda at: node in selected(prom, at, s), first_seen, FAST, s.query_step_s
    )


@pytest.mark.parametrize(("node", "first_seen"), OFF_GRID)
def test_the_watchs_re_read_on_the_scrape_grid_never_decides_before_the_hold(
    prom, node, first_seen
):
    """The watch re-reads one node's loss history at the scrape step (guard.plan.watch.fine):
    at every second never before the hold really passed, and within one scrape of it."""
    s = fine(S)
    client = PromClient(prom.url)

    def selected_now(at: datetime) -> bool:
        one = read_prom(client, s, at, NODE_NAMES, hold_queries(s, node))
        return node in {c.node for c in candidates(one, at, s)}

    assert_held_at_every_second(selected_now, first_seen, FAST, S.scrape_interval_s)


def test_candidates_carry_gpu_identity(prom):
    found = [c for c in candidates(view(prom, minutes(3)), minutes(3), S) if c.node == "fast79"]
    assert [(c.gpu, c.pci, c.value) for c in found] == [("4", "0000:58:00.0", 79)]
    assert found[0].uuid.startswith("GPU-")


def test_read_prom_builds_the_view(prom):
    v = view(prom, minutes(12))
    assert {c.node for c in candidates(v, minutes(12), S)} == {
        "fast79",
        "slow48",
        "lower79",
        "young48",
        "young79",
        "offgrid79",
        "between79",
        "hidden48",
        "relabel79",
        "dra79",
    }
    assert "dra94" in {g.node for g in v.hardware_xids}  # seen, but a reset-class Xid is no loss
    assert {g.node for g in v.hardware_xids} >= {"fast79", "slow48", "dip48", "cordoned79"}
    assert not {"user13", "counted13"} & {g.node for g in v.hardware_xids}
    # loss began at the onset scrape, which is on the minute: held 12 minutes exactly
    assert loss_held_s(v, "slow48", minutes(12)) == 12 * 60
    assert loss_held_s(v, "dip48", minutes(12)) == 0
    assert v.cordoned == ("cordoned79",)
    assert v.row_remap == ()


def test_held_is_capped_the_same_way_on_every_engine(prom):
    # the loss is older than the 30-minute history: reported as 29 minutes on every engine
    assert loss_held_s(view(prom, minutes(45)), "slow48", minutes(45)) == 29 * 60


def test_counted_xid_is_reported_beside_the_gauge(prom):
    hidden = [
        (g.value, g.gpu) for g in view(prom, minutes(11)).hardware_xids if g.node == "hidden48"
    ]
    assert hidden == [(48, "4")]  # the gauge says 13 (user code); the counter kept the 48


def test_node_label_wins_only_when_it_names_a_node(prom):
    v = read_prom(PromClient(prom.url), S, minutes(3), NODE_NAMES)
    relabel = [g for g in candidates(v, minutes(3), S) if g.gpu == "4" and "relabel" in g.node]
    assert [g.node for g in relabel] == ["relabel79"]
    # with the Node named differently, the host label is tried next (the exporter's pod name)
    other = read_prom(PromClient(prom.url), S, minutes(3), NODE_NAMES - {"relabel79"})
    assert "relabel79" in {g.node for g in other.hardware_xids}  # first value when none matches


def test_gpu_pods_come_from_kube_state_metrics(prom):
    # only Running pods requesting GPUs, on unschedulable nodes (the return) or nodes with GPU
    # loss (the pods an isolation tells; fabric and rejecting nodes: test_fabric_trigger.py),
    # outside the guard's namespace; with their uid
    train0, train1 = (PodTimeline("research", f"train-{i}", "") for i in (0, 1))
    assert view(prom, minutes(12)).gpu_pods == (
        GpuPod("research", "train-0", "cordoned79", 2, train0.uid),
        GpuPod("research", "train-1", "fast79", 8, train1.uid),
    )
    # before the loss began, fast79's pod is not asked (done-0 on cordoned79 still runs)
    assert [p.name for p in view(prom, minutes(-1)).gpu_pods] == ["done-0", "train-0"]


def _node_infos() -> tuple[NodeInfo, ...]:
    return tuple(NodeInfo(n.name, "1", False, True, "b", n.gpus, n.gpus) for n in SCENARIO_NODES)


def test_gpu_nodes_without_exporter_series_are_named(prom):
    assert check_join(view(prom, minutes(12)), _node_infos()) == ("no-exporter",)


def test_missing_dcgm_series_is_abnormal(prom_misconfigured):
    with pytest.raises(PromError, match="DCGM_FI_DEV_XID_ERRORS has no series"):
        read_prom(PromClient(prom_misconfigured.url), S, T0 + timedelta(minutes=10))


def test_a_dra_only_cluster_is_read_where_the_dra_driver_publishes_gpus(prom_dra_only):
    client, at, names = PromClient(prom_dra_only.url), minutes(5), {"dra79", "dra-healthy"}
    v = read_prom(client, S, at, names, dra_gpus=True)
    assert {c.node for c in candidates(v, at, S)} == {"dra79"}
    # without a ResourceSlice publishing a GPU, no capacity series is a broken scrape
    with pytest.raises(PromError) as err:
        read_prom(client, S, at, names)
    assert str(err.value) == (
        "input metric kube_node_status_capacity{resource=nvidia_com_gpu} has no series and no"
        " gpu.nvidia.com ResourceSlice publishes a GPU: check the exporter and scrape"
    )


def test_xid_series_naming_no_node_abort_with_the_fix(prom_misconfigured):
    names = {"cpu-only", "gpu-a"}
    v = read_prom(PromClient(prom_misconfigured.url), S, T0 + timedelta(minutes=50), names)
    nodes = (NodeInfo("gpu-a", "1", False, True, "b", 8, 8),)
    with pytest.raises(JoinError) as err:
        check_join(v, nodes)
    assert 'Hostname="nvidia-dcgm-exporter-cwbcm"' in str(err.value)
    assert "NODE_NAME" in str(err.value)


@pytest.mark.parametrize(
    ("changes", "node", "after", "expected"),
    [
        pytest.param({}, "fast79", 2.5, True, id="defaults-fast-path"),
        pytest.param({"fast_path_xids": ()}, "fast79", 2.5, False, id="no-fast-path-full-hold"),
        pytest.param({"fast_path_xids": ()}, "fast79", 10, True, id="no-fast-path-after-hold"),
        pytest.param({"user_code_xids": ()}, "user13", 10, True, id="no-user-code-xids"),
        pytest.param(
            {"fast_path_xids": (79, 48), "reset_class_xids": (94, 95, 119, 120)},
            "slow48",
            2.5,
            True,
            id="two-fast-xids",
        ),
        pytest.param({"dcgm_node_labels": "hostname"}, "fast79", 3, False, id="label-choice"),
    ],
)
def test_settings_shape_the_queries(prom, changes, node, after, expected):
    s = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS, **changes)
    assert (node in selected(prom, minutes(after), s)) is expected


def test_every_engine_gives_the_same_view(every_engine):
    """The guard's whole input, compared at on- and off-minute instants through the faults."""
    reference = every_engine["prometheus2"]
    instants = [ONSET + timedelta(seconds=s) for s in range(-60, 20 * 60, 53)]
    for at in instants:
        want = view(reference, at)
        for engine, server in every_engine.items():
            assert view(server, at) == want, f"{engine} differs from prometheus2 at {at:%H:%M:%S}"


def run_guard(prom, nodes: list[tuple[str, int]], at: datetime, tmp_path):
    items = [
        {
            "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "1"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"nvidia.com/gpu": str(gpus)},
                "allocatable": {"nvidia.com/gpu": str(gpus)},
            },
        }
        for name, gpus in nodes
    ]
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"kind": "List", "items": items}))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            prom.url,
            "--cluster-snapshot",
            str(cluster),
            "--at",
            at.isoformat(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_run_warns_once_about_gpu_nodes_without_an_exporter(prom, tmp_path):
    proc = run_guard(prom, [(n.name, n.gpus) for n in SCENARIO_NODES], minutes(12), tmp_path)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if " dcgm-missing " in line]
    assert len(warned) == 1
    assert "WARN dcgm-missing missing=1 nodes=no-exporter" in warned[0]


def test_a_run_whose_xid_series_name_no_node_aborts(prom_misconfigured, tmp_path):
    proc = run_guard(prom_misconfigured, [("gpu-a", 8)], T0 + timedelta(minutes=50), tmp_path)
    assert proc.returncode == 1
    (abort,) = [line for line in proc.stderr.splitlines() if " abort " in line]
    assert 'e.g. {Hostname=\\"nvidia-dcgm-exporter-cwbcm\\"}, none of 1 Nodes' in abort
    assert "set NODE_NAME in dcgm-exporter" in abort


# ---- the in-run watch's queries (guard.codec.queries.watch_poll, hold_queries) ----------------


@pytest.mark.parametrize("after", [3, 12])
def test_the_watch_reads_one_node_as_the_cycle_does(prom, after):
    """A watch decision's narrowed queries give that node's facts exactly as the cycle's whole
    read does: its Xids (gauge and counter), when its loss began, its cordon."""
    at = minutes(after)
    full, client = view(prom, at), PromClient(prom.url)
    names = sorted({g.node for g in full.hardware_xids} | {n for n, _ in full.loss_since})
    assert names
    for name in names:
        one = read_prom(client, S, at, NODE_NAMES, hold_queries(S, name))
        assert one.hardware_xids == tuple(g for g in full.hardware_xids if g.node == name), name
        assert dict(one.loss_since).get(name) == dict(full.loss_since).get(name), name
        assert (name in one.cordoned) == (name in full.cordoned), name


def _facts(v: PromView, name: str) -> tuple[object, ...]:
    """What a watch decision takes of a view for one node (guard.plan.watch.decision_snapshot)."""
    return (
        tuple(g for g in v.hardware_xids if g.node == name),
        tuple(x for x in v.loss_since if x[0] == name),
        name in v.cordoned,
        tuple(p for p in v.unreadable if p.node == name),
    )


@pytest.mark.parametrize("after", [3, 12])
def test_the_watch_reads_many_nodes_in_one_request_per_query_as_one_by_one(prom, after):
    """The nodes the watch decides at one instant are re-read together (a regex of their names):
    each node's facts are exactly those of its own narrowed read, whichever label names it; a dot
    in a name is a dot, not any character (``fast.9`` is not ``fast79``)."""
    at, s, client = minutes(after), fine(S), PromClient(prom.url)
    names = sorted(NODE_NAMES)
    together = read_prom(client, s, at, NODE_NAMES, hold_queries(s, *names))
    assert together.hardware_xids and together.loss_since
    for name in names:
        alone = read_prom(client, s, at, NODE_NAMES, hold_queries(s, name))
        assert _facts(together, name) == _facts(alone, name), name
    dotted = read_prom(client, s, at, NODE_NAMES, hold_queries(s, "fast.9", "healthy"))
    assert _facts(dotted, "fast79") == ((), (), False, ())


def test_the_watch_poll_names_each_node_with_a_hardware_xid_and_loss_now(prom):
    at = minutes(12)
    full = view(prom, at)
    poll = watch_poll(S)
    answer = PromClient(prom.url).checked(poll.name, poll.promql, at, poll.required)
    lost = {n for n, _ in full.loss_since}
    expected = {g.node for g in full.hardware_xids if g.node in lost} - set(full.cordoned)
    assert {x.label("node") for x in answer.good} >= expected


def _return_facts(v: PromView, name: str) -> tuple[object, ...]:
    """What the return table's Prometheus rows read of a view for one node
    (guard.plan.return_rule: xid-present, row-remap, gpu-pods-running, nvml-mismatch,
    admission-rejected, fabric, service-network)."""
    return (
        tuple(g for g in v.hardware_xids if g.node == name),
        tuple(g for g in v.row_remap if g.node == name),
        tuple(p for p in v.gpu_pods if p.node == name),
        tuple(a for a in v.nvml_status if a.node == name),
        dict(v.admission_now).get(name),
        name in v.fabric_not_success,
        tuple(p for p in v.service_pods if p.node == name),
        v.service_seen,
    )


@pytest.mark.parametrize("after", [3, 12, 30])
def test_the_returns_re_read_narrowed_to_the_held_nodes_gives_their_facts_as_the_cycle(prom, after):
    """The run's scrape-grid re-read of the returns a Prometheus row holds (guard/returns.py):
    every row's queries narrowed to the held nodes, one request each, give each of them the
    facts the cycle's whole read gives."""
    at, client, names = minutes(after), PromClient(prom.url), sorted(NODE_NAMES)
    reads = {q for row in return_rule.TABLE for q in row.reads}
    sent = return_queries(S, reads, *names)
    assert len(sent) == len(reads)
    together = read_prom(client, S, at, NODE_NAMES, sent)
    full = view(prom, at)
    assert any(_return_facts(full, n)[:3] != ((), (), ()) for n in names)  # something to compare
    for name in names:
        assert _return_facts(together, name) == _return_facts(full, name), name
