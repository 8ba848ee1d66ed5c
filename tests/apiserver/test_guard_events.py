"""The guard's Events as on-call reads them: a real kube-apiserver and a real kubectl v1.34.4.

`kubectl describe node` matches Events by the node's uid; `kubectl events --for node/N` and
`kubectl get events` read eventTime and series. A condition seen every cycle is one Event whose
series counts up; a cordon Event lost on the way is written by the next cycle.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from tests.apiserver.guard_run import (
    CYCLE,
    ISOLATE_AT,
    T0,
    faulted,
    guard_cordoned,
    mine,
    node_events,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kubectl import run_kubectl

pytestmark = pytest.mark.apiserver


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(*(faulted(n) for n in ("ev-cordon", "ev-breaker", "ev-lost"))) as p:
        yield p


def described_events(kubectl: Path, kubeconfig: Path, node: str) -> list[str]:
    """The rows under ``Events:`` of `kubectl describe node`, header and rule left out."""
    describe = run_kubectl(kubectl, kubeconfig, "describe", "node", node)
    rows = describe.split("\nEvents:", 1)[1].splitlines()
    return [r.strip() for r in rows if r.strip() and not r.strip().startswith(("Type", "----"))]


def test_kubectl_describe_node_and_kubectl_events_show_the_cordon(
    prom, guard_kubeconfig, gpu_node, admin, deployed, kubectl_binary
):
    node = gpu_node("ev-cordon")
    run_guard(prom, guard_kubeconfig, ISOLATE_AT)
    (event,) = node_events(admin, node)
    assert event["regarding"]["uid"] == client.CoreV1Api(admin).read_node(node).metadata.uid

    rows = described_events(kubectl_binary, deployed.kubeconfig, node)
    assert len(rows) == 1, rows
    expected = (
        r"Warning\s+GuardCordoned\s+\S+\s+gpu-node-guard\.io/gpu-node-guard\s+"
        r"cordoned by gpu-node-guard: Xid 79 on GPU 4 \(0000:58:00\.0 GPU-"
    )
    assert re.match(expected, rows[0]), rows

    listed = run_kubectl(kubectl_binary, deployed.kubeconfig, "events", "--for", f"node/{node}")
    (row,) = [r for r in listed.splitlines()[1:] if r.strip()]
    assert re.match(r"\S+\s+Warning\s+GuardCordoned\s+Node/ev-cordon\s+cordoned by", row), row
    table = run_kubectl(
        kubectl_binary,
        deployed.kubeconfig,
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        f"involvedObject.name={node}",
    )
    assert "<unknown>" not in table and "GuardCordoned" in table


def test_a_condition_seen_every_cycle_is_one_event_whose_series_counts_up(
    prom, guard_kubeconfig, gpu_node, admin, deployed, kubectl_binary
):
    # One node already carries the guard's cordon (an hour ago): with a limit of one the breaker
    # is open, and the faulted neighbour's GuardBreakerOpen Event repeats every cycle.
    gpu_node("ev-held", allocatable=8, annotations=guard_cordoned(T0 - timedelta(hours=1)))
    node = gpu_node("ev-breaker")
    cycles = [ISOLATE_AT + n * CYCLE for n in range(3)]
    for at in [*cycles, cycles[-1]]:  # the last instant twice: a second run at the same time
        plan = run_guard(prom, guard_kubeconfig, at, "--breaker-max-nodes", "1").plan
        assert mine(plan, node) == [("skip", "breaker-open"), ("event", "breaker-open")]
    (event,) = node_events(admin, node)
    assert event["reason"] == "GuardBreakerOpen" and event["action"] == "SkipCordon"
    assert event["series"]["count"] == 3
    assert event["series"]["lastObservedTime"] == cycles[-1].strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    assert event["eventTime"] == cycles[0].strftime("%Y-%m-%dT%H:%M:%S.000000Z")

    rows = described_events(kubectl_binary, deployed.kubeconfig, node)
    (row,) = rows
    assert re.match(r"Warning\s+GuardBreakerOpen\s+\S+ \(x3 over \S+\)\s+gpu-node-guard", row), row


def test_a_lost_cordon_event_is_written_again_by_the_next_cycle(
    prom, guard_kubeconfig, gpu_node, admin, deployed, kubectl_binary
):
    node = gpu_node("ev-lost")
    run_guard(prom, guard_kubeconfig, ISOLATE_AT)
    (lost,) = node_events(admin, node)
    client.EventsV1Api(admin).delete_namespaced_event(lost["metadata"]["name"], "default")

    plan = run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE).plan
    assert ("event", "repair-event") in mine(plan, node)
    # Beside it, the return check's own Event: the cordoned node waits for a power cycle.
    (again,) = cordon_events(admin, node)
    assert again["metadata"]["name"] == lost["metadata"]["name"]  # the same incident's Event
    assert "written late" in again["note"]
    rows = described_events(kubectl_binary, deployed.kubeconfig, node)
    assert sorted(r.split()[1] for r in rows) == ["GuardCordoned", "GuardWaitingPowerCycle"]

    later = run_guard(prom, guard_kubeconfig, ISOLATE_AT + 2 * CYCLE).plan
    assert ("event", "repair-event") not in mine(later, node)
    assert len(cordon_events(admin, node)) == 1
    assert sorted(e["reason"] for e in node_events(admin, node)) == [
        "GuardCordoned",
        "GuardWaitingPowerCycle",
    ]


def cordon_events(admin: client.ApiClient, node: str) -> list[dict[str, Any]]:
    return [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
