"""The node signals' PromQL on every engine: the agent's nvidia-match hold and status, the
kube-proxy and CNI pods of a node, and a guard run that isolates a driver mismatch without a
reboot while its alert fires.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from guard.codec.queries import hold_queries, mismatch_queries
from guard.generate import alert_queries, alerts
from guard.model import AgentCheck, PromView, ServicePod
from guard.plan.hold import nvml_candidates, nvml_held_s
from guard.plan.watch import fine
from guard.read.prom_view import read_prom
from guard.settings import Settings
from tests.prom_client import PromClient
from tests.prometheus.conftest import (
    GAP_BACK_S,
    JOBS_NS,
    ONSET,
    ONSET_S,
    PROXY_DOWN_S,
    SIGNAL_NODE_NAMES,
    SIGNAL_NODES,
    T0,
    assert_held_at_every_second,
    minutes,
)
from tests.scenario_build import AGENT_DETAIL, AGENT_FAIL, AGENT_PASS, AGENT_UNKNOWN

pytestmark = pytest.mark.prometheus
S = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS)
HOLD = S.nvml_hold_s


def held(prom, at: datetime, s: Settings = S) -> tuple[str, ...]:
    return nvml_candidates(view(prom, at, s), at, s)


def view(prom, at: datetime, s: Settings = S) -> PromView:
    return read_prom(PromClient(prom.url), s, at, SIGNAL_NODE_NAMES)


def agent(node: str, state: int) -> AgentCheck:
    status, detail = AGENT_DETAIL[state]
    return AgentCheck(node, status, detail)


# ---- the mismatch hold -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "after", "expected"),
    [
        pytest.param("drv-mismatch", 9.9, False, id="mismatch-9m54s-not-yet"),
        pytest.param("drv-mismatch", 10, True, id="mismatch-held-for-the-window"),
        pytest.param("drv-mismatch", 45, True, id="mismatch-held-long"),
        pytest.param("drv-young", 9.9, False, id="young-series-not-before-the-window"),
        pytest.param("drv-young", 10, True, id="young-series-after-the-whole-window"),
        pytest.param("drv-gap", 22, False, id="gap-node-failing-2m"),
        pytest.param("drv-gap", 30, False, id="agent-gone-is-no-mismatch"),
        pytest.param("drv-gap", 40.9, False, id="held-again-only-since-the-agent-came-back"),
        pytest.param("drv-gap", 41, True, id="held-a-whole-window-after-the-gap"),
        pytest.param("drv-fixed", 5, False, id="fixed-driver-never"),
        pytest.param("drv-cordoned", 30, False, id="already-cordoned-never"),
        pytest.param("drv-unknown", 30, False, id="unknown-is-no-mismatch"),
        pytest.param("no-agent", 30, False, id="no-agent-is-no-mismatch"),
    ],
)
def test_mismatch_decision(prom_signals, node, after, expected):
    assert (node in held(prom_signals, minutes(after))) is expected


def test_mismatch_hold_is_never_shorter_than_the_setting_at_any_second(prom_signals):
    """Scraped 3 s past the minute, first seen failing at ONSET + 48 s: every instant around
    the hold's end, on the minute and off it."""
    assert_held_at_every_second(
        lambda at: "drv-offgrid" in held(prom_signals, at),
        ONSET + timedelta(seconds=48),
        HOLD,
        S.query_step_s,
    )


def test_the_watchs_mismatch_re_read_on_the_scrape_grid_never_decides_before_the_hold(
    prom_signals,
):
    """The watch re-reads one node's nvidia-match history and status at the scrape step
    (guard.codec.queries.mismatch_queries): never held before the hold really passed, within one
    scrape of it, and the status the cycle's read gives that node."""
    s, client = fine(S), PromClient(prom_signals.url)

    def one(at: datetime) -> PromView:
        sent = hold_queries(s, "drv-offgrid") + mismatch_queries(s, "drv-offgrid")
        return read_prom(client, s, at, SIGNAL_NODE_NAMES, sent)

    assert_held_at_every_second(
        lambda at: "drv-offgrid" in nvml_candidates(one(at), at, s),
        ONSET + timedelta(seconds=48),
        HOLD,
        S.scrape_interval_s,
    )
    at = minutes(12)
    full = view(prom_signals, at)
    assert one(at).nvml_status == full.agent("drv-offgrid")


def test_the_watch_reads_many_mismatch_nodes_in_one_request_per_query_as_one_by_one(
    prom_signals,
):
    """The mismatch holds due at one instant are re-read together: each node's nvidia-match
    facts are exactly those of its own narrowed read."""
    s, client, at = fine(S), PromClient(prom_signals.url), minutes(12)
    names = sorted(SIGNAL_NODE_NAMES)

    def facts(v: PromView, name: str) -> tuple[object, ...]:
        return (
            tuple(x for x in v.nvml_since if x[0] == name),
            tuple(a for a in v.nvml_status if a.node == name),
            tuple(p for p in v.unreadable if p.node == name),
        )

    together = read_prom(client, s, at, SIGNAL_NODE_NAMES, mismatch_queries(s, *names))
    assert together.nvml_since and together.nvml_status
    for name in names:
        alone = read_prom(client, s, at, SIGNAL_NODE_NAMES, mismatch_queries(s, name))
        assert facts(together, name) == facts(alone, name), name


@pytest.mark.parametrize(
    ("changes", "after", "expected"),
    [
        pytest.param({"nvml_mismatch_hold_s": 300}, 4.9, False, id="own-hold-not-yet"),
        pytest.param({"nvml_mismatch_hold_s": 300}, 5, True, id="own-hold-reached"),
        pytest.param({"nvml_mismatch_hold_s": 2400}, 39.9, False, id="hold-past-the-30m-history"),
        pytest.param({"nvml_mismatch_hold_s": 2400}, 40, True, id="history-grows-with-the-hold"),
        pytest.param({"hold_window_s": 900}, 14.9, False, id="default-follows-the-hold-window"),
        pytest.param({"hold_window_s": 900}, 15, True, id="default-hold-window-reached"),
    ],
)
def test_settings_shape_the_mismatch_hold(prom_signals, changes, after, expected):
    s = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS, **changes)
    assert ("drv-mismatch" in held(prom_signals, minutes(after), s)) is expected


def test_mismatch_held_seconds_and_status(prom_signals):
    v = view(prom_signals, minutes(12))
    assert nvml_held_s(v, "drv-mismatch", minutes(12)) == 12 * 60
    assert "drv-fixed" not in dict(v.nvml_since)
    # the agent's word now, on failing or unschedulable nodes only: a detail for the cordon and
    # "PASS again" for the return; a node without an agent has none
    assert v.nvml_status == (
        agent("drv-cordoned", AGENT_FAIL),
        agent("drv-mismatch", AGENT_FAIL),
        agent("drv-offgrid", AGENT_FAIL),
        agent("drv-passed", AGENT_PASS),
        agent("drv-unknown", AGENT_FAIL),
        agent("drv-young", AGENT_FAIL),
    )


def test_agent_status_when_the_series_go_away(prom_signals):
    """30 minutes in: drv-unknown's agent says UNKNOWN (no check_ok), drv-gap's agent is gone."""
    v = view(prom_signals, minutes(30))
    assert v.agent("drv-unknown") == (agent("drv-unknown", AGENT_UNKNOWN),)
    assert "drv-unknown" not in dict(v.nvml_since)
    assert v.agent("drv-gap") == () and "drv-gap" not in dict(v.nvml_since)
    assert v.agent("no-agent") == ()
    back = view(prom_signals, T0 + timedelta(seconds=GAP_BACK_S + 60))
    assert back.agent("drv-gap") == (agent("drv-gap", AGENT_FAIL),)
    assert nvml_held_s(back, "drv-gap", T0 + timedelta(seconds=GAP_BACK_S + 60)) == 60


# ---- the service network ---------------------------------------------------------------------


def pod(selector: str, namespace: str, name: str, node: str, ready: bool = True) -> ServicePod:
    return ServicePod(selector, namespace, name, node, ready)


NET_OK = (
    pod("cni", "calico-system", "calico-node-h2k9d", "net-ok"),
    pod("cni", "kube-system", "rke2-canal-q7x2m", "net-ok"),
    pod("kube-proxy", "kube-system", "kube-proxy-net-ok", "net-ok"),
)


def test_service_network_pods_of_unschedulable_nodes(prom_signals):
    v = view(prom_signals, minutes(10))
    assert v.service_pods == (
        pod("kube-proxy", "kube-system", "kube-proxy-net-no-cni", "net-no-cni"),
        *NET_OK,
        pod("cni", "kube-system", "rke2-canal-p3v8n", "net-proxy-down"),
        pod("kube-proxy", "kube-system", "kube-proxy-net-proxy-down", "net-proxy-down", False),
    )
    # the whole cluster counts, schedulable nodes too; coredns is no selected DaemonSet
    assert v.service_seen == (("cni", 4), ("kube-proxy", 4))


@pytest.mark.parametrize(
    ("second", "ready"),
    [
        pytest.param(PROXY_DOWN_S - ONSET_S - 1, True, id="before-the-change"),
        pytest.param(29, True, id="changed-but-not-yet-scraped"),
        pytest.param(30, False, id="first-scrape-after-the-change"),
        pytest.param(47, False, id="off-minute-later"),
    ],
)
def test_readiness_follows_the_scrapes_off_the_minute(prom_signals, second, ready):
    at = ONSET + timedelta(seconds=second)
    (proxy,) = (
        p for p in view(prom_signals, at).service_pods if p.name == "kube-proxy-net-proxy-down"
    )
    assert proxy.ready is ready


@pytest.mark.parametrize(
    ("changes", "seen", "names"),
    [
        pytest.param(
            {"service_network_kube_proxy_pods": "kube-proxy-nowhere-.+"},
            (("cni", 4),),
            {"calico-node-h2k9d", "rke2-canal-q7x2m", "rke2-canal-p3v8n"},
            id="kube-proxy-matching-nothing-does-not-apply",
        ),
        pytest.param(
            {"service_network_cni_namespace": "calico-system"},
            (("cni", 1), ("kube-proxy", 4)),
            {
                "calico-node-h2k9d",
                *(f"kube-proxy-{n}" for n in ("net-ok", "net-proxy-down", "net-no-cni")),
            },
            id="cni-namespace",
        ),
        pytest.param(
            {"service_network_cni_daemonsets": "", "service_network_kube_proxy_namespace": ""},
            (("kube-proxy", 4),),
            {f"kube-proxy-{n}" for n in ("net-ok", "net-proxy-down", "net-no-cni")},
            id="cni-off-kube-proxy-any-namespace",
        ),
    ],
)
def test_selectors_are_settings(prom_signals, changes, seen, names):
    s = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS, **changes)
    v = view(prom_signals, minutes(10), s)
    assert v.service_seen == seen
    assert {p.name for p in v.service_pods} == names


# ---- every engine the same --------------------------------------------------------------------


def test_every_engine_gives_the_same_signals(every_engine_signals):
    """On- and off-minute instants through the mismatch, the gap and the readiness change; not
    within 6 minutes after an agent series stopped (docs/engines.md: backfilled data carry no
    staleness markers)."""
    reference = every_engine_signals["prometheus2"]
    stops = [ONSET + timedelta(minutes=m) for m in (20, 23)]  # drv-unknown, drv-gap
    instants = [ONSET + timedelta(seconds=s) for s in range(-60, 50 * 60, 53)]
    for at in instants:
        if any(stop <= at < stop + timedelta(minutes=6) for stop in stops):
            continue
        want = view(reference, at)
        for engine, server in every_engine_signals.items():
            assert view(server, at) == want, f"{engine} differs from prometheus2 at {at:%H:%M:%S}"


# ---- a real run: isolates without a reboot, while the alert fires ------------------------------


def node_object(
    name: str, boot: str, notes: dict[str, str] | None = None, *, checked: bool = False
) -> dict[str, Any]:
    """`checked`: the boot passed its after-reboot conformance check (no Job for it now)."""
    records = {"gpu-node-guard.io/checked-boot": f"{boot} 2026-09-14T03:00:00Z job/gng-cf-{name}-0"}
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": (notes or {}) | (records if checked else {}),
        },
        "spec": {"unschedulable": bool(notes)},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": boot},
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
        },
    }


def cordoned_by_guard(reason: str) -> dict[str, str]:
    p = "gpu-node-guard.io/"
    notes = {
        f"{p}auto-cordon-reason": reason,
        f"{p}auto-cordon-at": "2026-09-20T23:00:00Z",
        f"{p}auto-cordon-boot-id": "boot-0",
        f"{p}auto-cordon-gpu-capacity": "8",
    }
    if reason.startswith("xid-"):
        notes[f"{p}auto-cordon-gpu"] = "0000:58:00.0 GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    return notes


def run_guard(prom, objects: list[dict[str, Any]], at: datetime, tmp_path: Path) -> dict[str, Any]:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"kind": "List", "items": objects}))
    proc = subprocess.run(
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
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_a_driver_mismatch_alerts_and_isolates_without_a_reboot(prom_signals, tmp_path):
    rule = {r.alert: r for r in alerts.node_rules(S)}["GPUNodeDriverMismatch"]
    client = PromClient(prom_signals.url)
    # the alert's expression holds at every evaluation from the onset on: with its `for`, the
    # alert fires 10 minutes after the driver changed on disk, on the node that never rebooted
    assert rule.expr == alert_queries.alert_agent_check_failed("nvidia-match", False)
    for second in range(30, rule.for_s + 1, 30):
        firing = client.vector("alert", rule.expr, ONSET + timedelta(seconds=second))
        assert "drv-mismatch" in {x.label("node") for x in firing}, second
    # the guard's cycle at that minute, on the same data, cordons the same node in its boot
    # every node's boot was checked after its last reboot: the plan is the mismatch's alone
    objects = [
        node_object(n.name, "boot-1", checked=True) for n in SIGNAL_NODES if not n.unschedulable
    ]
    plan = run_guard(prom_signals, objects, ONSET + timedelta(seconds=rule.for_s), tmp_path)
    (cordon,) = [a for a in plan["actions"] if a["type"] == "cordon"]
    assert (cordon["node"], cordon["reason"]) == ("drv-mismatch", "nvml-mismatch")
    assert cordon["annotations"]["gpu-node-guard.io/auto-cordon-boot-id"] == "boot-1"
    assert cordon["detail"] == AGENT_DETAIL[AGENT_FAIL][1]
    assert "reboot it into the installed driver" in cordon["log"]
    waiting = [(a["node"], a["reason"]) for a in plan["actions"] if a["type"] == "skip"]
    assert ("drv-young", "one-per-cycle") in waiting
    assert not [a for a in plan["actions"] if a["type"] in ("append-ledger", "create-job")]


def test_returns_read_the_agent_and_the_service_network(prom_signals, tmp_path):
    """Guard-cordoned nodes after their reboot (boot-1 ≠ the cordon's boot-0), 30 minutes in."""
    objects = [
        node_object("drv-passed", "boot-1", cordoned_by_guard("nvml-mismatch")),
        node_object("drv-unknown", "boot-1", cordoned_by_guard("nvml-mismatch")),
        node_object("drv-cordoned", "boot-1", cordoned_by_guard("xid-79")),
        node_object("no-agent", "boot-1", cordoned_by_guard("xid-79")),
        node_object("net-ok", "boot-1", cordoned_by_guard("xid-79")),
        node_object("net-proxy-down", "boot-1", cordoned_by_guard("xid-79")),
        node_object("net-no-cni", "boot-1", cordoned_by_guard("xid-79")),
    ]
    plan = run_guard(prom_signals, objects, minutes(30), tmp_path)
    names = {o["metadata"]["name"] for o in objects}
    decided = {
        a["node"]: (a["reason"], a.get("detail", "")) for a in plan["actions"] if a["node"] in names
    }
    failed = AGENT_DETAIL[AGENT_FAIL][1]
    assert decided == {
        "drv-passed": (
            "service-network-not-ready",
            "no kube-proxy pod on the node (4 in the"
            " cluster); no cni pod on the node (4 in the cluster)",
        ),
        "drv-unknown": (
            "nvml-unconfirmed",
            "node agent: UNKNOWN; an nvml-mismatch cordon returns once the agent reports PASS",
        ),
        "drv-cordoned": ("nvml-mismatch", f"node agent: nvidia-match FAIL ({failed})"),
        "no-agent": (
            "service-network-not-ready",
            "no kube-proxy pod on the node (4 in the"
            " cluster); no cni pod on the node (4 in the cluster)",
        ),
        "net-ok": ("conditions-met", ""),
        "net-proxy-down": (
            "service-network-not-ready",
            "kube-proxy pod kube-system/kube-proxy-net-proxy-down not Ready",
        ),
        "net-no-cni": ("service-network-not-ready", "no cni pod on the node (4 in the cluster)"),
    }
