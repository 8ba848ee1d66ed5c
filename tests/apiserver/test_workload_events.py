"""Telling the workload and domain incidents end to end: a real kube-apiserver with the guard's
RBAC and admission policies, a real Prometheus with dcgm-exporter's series (its pod mapping on
the faulted GPU) and kube-state-metrics' pods, the guard run as its own ServiceAccount.

The pods on the GPU the guard isolates get one Warning Event each, in their own namespaces (the
guard may create Events there, and only those: the RBAC and guard-scope refusals below); three
nodes of one rack failing together are one domain incident.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.example.promserver import LocalPrometheus
from guard.generate import alert_queries
from guard.names import REPORTING_CONTROLLER
from tests.alerting.conftest import push_stack_in
from tests.alerting.servers import query, wait_until
from tests.apiserver.conftest import refused_by
from tests.apiserver.guard_run import (
    CYCLE,
    ISOLATE_AT,
    faulted,
    mine,
    node_events,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import MERGE_PATCH, create, refusal
from tests.scenario_build import NodeTimeline, PodTimeline

pytestmark = pytest.mark.apiserver

TOLD, FALLBACK = "wl-told", "wl-fallback"
RACK_NODES = ("wl-rack-a", "wl-rack-b", "wl-rack-c")
RACK = "example.com/rack"
# The namespaces of the workload; made once (no namespace controller deletes them here).
TEAMS = ("wl-team-a", "wl-team-b", "wl-team-c", "wl-team-d")
TRAIN = PodTimeline(TEAMS[0], "train-0", TOLD, gpus=1)
OTHER_GPU = PodTimeline(TEAMS[2], "infer-0", TOLD, gpus=1)  # on another GPU of the node
FALLBACK_POD = PodTimeline(TEAMS[3], "batch-0", FALLBACK, gpus=8)
SCOPE = "gpu-node-guard-guard-scope"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    # GPU 4 of TOLD is the faulted one (`faulted`): dcgm-exporter names the pod on it, and
    # another pod on GPU 2.
    xid = faulted(TOLD)
    held = ((4, TEAMS[0], "train-0"), (2, TEAMS[2], "infer-0"))
    told = NodeTimeline(TOLD, xids=xid.xids, allocatable=xid.allocatable, gpu_pods=held)
    nodes = (told, faulted(FALLBACK), *(faulted(n) for n in RACK_NODES))
    with scenario_prometheus(*nodes, pods=(TRAIN, OTHER_GPU, FALLBACK_POD)) as server:
        yield server


@pytest.fixture(scope="module")
def teams(admin: client.ApiClient) -> tuple[str, ...]:
    core = client.CoreV1Api(admin)
    for name in TEAMS:
        try:
            core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
    return TEAMS


def pod_events(admin: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    answer = client.EventsV1Api(admin).list_namespaced_event(
        namespace, label_selector="app.kubernetes.io/name=gpu-node-guard", _preload_content=False
    )
    return list(json.loads(answer.data)["items"])


def test_the_pods_on_the_faulted_gpu_are_told_once_in_their_own_namespace(
    prom: LocalPrometheus,
    guard_kubeconfig: Any,
    gpu_node: Callable[..., str],
    admin: client.ApiClient,
    teams: tuple[str, ...],
) -> None:
    gpu_node(TOLD)
    first = run_guard(prom, guard_kubeconfig, ISOLATE_AT)
    assert ("cordon", "xid-79") in mine(first.plan, TOLD)
    assert [a["pod"] for a in first.plan["actions"] if a.get("pod")] == [f"{TEAMS[0]}/train-0"]
    (told,) = pod_events(admin, TEAMS[0])
    assert told["type"] == "Warning" and told["reason"] == "GuardGpuIsolated"
    assert told["reportingController"] == REPORTING_CONTROLLER
    assert told["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": TEAMS[0],
        "name": "train-0",
        "uid": TRAIN.uid,  # kube-state-metrics' uid: kubectl describe pod shows it
    }
    assert "xid-79" in told["note"] and f"on node {TOLD}" in told["note"]
    assert "cordoned the node" in told["note"] and "not evicted" in told["note"]
    assert "holds the GPU (dcgm-exporter)" in told["note"]
    assert pod_events(admin, TEAMS[2]) == []  # a pod on another GPU of the node
    # The next cycle finds the node cordoned: no second Event.
    run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE)
    assert len(pod_events(admin, TEAMS[0])) == 1


def test_without_the_exporters_pod_labels_the_nodes_gpu_pods_are_told(
    prom: LocalPrometheus,
    guard_kubeconfig: Any,
    gpu_node: Callable[..., str],
    admin: client.ApiClient,
    teams: tuple[str, ...],
) -> None:
    gpu_node(FALLBACK)
    run_guard(prom, guard_kubeconfig, ISOLATE_AT)
    (told,) = pod_events(admin, TEAMS[3])
    assert told["regarding"]["name"] == "batch-0" and told["regarding"]["uid"] == FALLBACK_POD.uid
    assert f"on node {FALLBACK}" in told["note"] and "holds GPUs of the node" in told["note"]


def pod_event(namespace: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"x.{uuid.uuid4().hex[:8]}", "namespace": namespace},
        "eventTime": "2026-09-21T05:33:00.000000Z",
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": "gpu-node-guard-1",
        "action": "NotifyPod",
        "reason": "GuardGpuIsolated",
        "type": "Warning",
        "note": "GPU 4 on node x: xid-79",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "p"},
    }
    body.update(fields)
    return body


def sent(api: client.ApiClient, body: dict[str, Any]) -> Callable[[], object]:
    return lambda: create(api, body)


def test_the_guard_may_not_write_other_pod_events(
    guard: client.ApiClient, admin: client.ApiClient, teams: tuple[str, ...]
) -> None:
    ns, other = TEAMS[0], TEAMS[1]
    assert create(guard, pod_event(ns)) is not None  # its own: admitted
    node_ref = {"apiVersion": "v1", "kind": "Node", "name": "x"}
    by_policy = {
        "normal": pod_event(ns, type="Normal"),
        "another-reason": pod_event(ns, reason="Killing"),
        "pod-of-another-namespace": pod_event(
            ns, regarding={"apiVersion": "v1", "kind": "Pod", "namespace": other, "name": "p"}
        ),
        "a-configmap": pod_event(
            ns, regarding={"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": "c"}
        ),
        "as-another-controller": pod_event(ns, reportingController="example.com/x"),
    }
    admitted = [k for k, body in by_policy.items() if not refused_by(SCOPE, sent(guard, body))]
    assert admitted == []
    # A Node's Event outside `default`: the API's own validation refuses it before any policy.
    status, message = refusal(sent(guard, pod_event(ns, regarding=node_ref)))
    assert status == 422 and "does not match event.namespace" in message, message
    # RBAC: create only; no read, patch or delete of Events outside `default`, no core Events.
    events = client.EventsV1Api(guard)
    for call in (
        lambda: events.list_namespaced_event(ns),
        lambda: events.patch_namespaced_event(
            "x", ns, {"series": {"count": 2}}, _content_type=MERGE_PATCH
        ),
        lambda: events.delete_namespaced_event("x", ns),
        lambda: client.CoreV1Api(guard).create_namespaced_event(
            ns, {"metadata": {"generateName": "x-"}, "involvedObject": {"kind": "Pod", "name": "p"}}
        ),
    ):
        status, message = refusal(call)
        assert status == 403 and "cannot" in message, message
    # Other users' Events are not the guard's policy's business.
    for body in by_policy.values():
        mine_not = {**body, "reportingController": "example.com/x"}
        assert create(admin, mine_not) is not None


def test_three_nodes_of_one_rack_are_one_domain_incident(
    prom: LocalPrometheus,
    guard_kubeconfig: Any,
    gpu_node: Callable[..., str],
    core: client.CoreV1Api,
    admin: client.ApiClient,
    tmp_path: Path,
) -> None:
    for name in RACK_NODES:
        gpu_node(name)
        core.patch_node(name, {"metadata": {"labels": {RACK: "r7"}}}, _content_type=MERGE_PATCH)
    flags = ("--topology-label", RACK, "--breaker-max-nodes", "1")
    with push_stack_in(tmp_path) as stack:
        first = run_guard(
            prom, guard_kubeconfig, ISOLATE_AT, *flags, "--pushgateway-url", stack.pushgateway_url
        )
        # The alert's expression on what the run pushed, through Prometheus scraping the gateway.
        alert = alert_queries.alert_domain_incident()
        (firing,) = wait_until(lambda: query(stack.prometheus_url, alert) or None, 30, "no alert")
        assert firing["metric"]["domain"] == f"{RACK}=r7" and firing["value"][1] == "3"
    (request,) = [line for line in first.lines("skip") if line.get("reason") == "domain-incident"]
    assert request["level"] == "WARN"
    assert request["detail"].startswith(f"domain incident {RACK}=r7: 3 nodes")
    assert request["detail"].endswith("nodes: " + " ".join(RACK_NODES))
    cordoned = [n for n in RACK_NODES if ("cordon", "xid-79") in mine(first.plan, n)]
    assert cordoned == [RACK_NODES[0]]  # still one isolation per cycle
    for name in RACK_NODES:
        (shared,) = [e for e in node_events(admin, name) if e["reason"] == "GuardDomainIncident"]
        others = [n for n in RACK_NODES if n != name]
        assert f"{RACK}=r7" in shared["note"] and ", ".join(others) in shared["note"]
    # The next cycle: the breaker (limit 1) holds the other two and names their domain.
    second = run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE, *flags)
    held = {
        line["node"]: line["detail"]
        for line in second.lines("skip")
        if line.get("reason") == "breaker-open"
    }
    assert sorted(held) == list(RACK_NODES[1:])
    assert f"domain incident {RACK}=r7 with {RACK_NODES[0]}, {RACK_NODES[2]}" in held[RACK_NODES[1]]
    for name in RACK_NODES[1:]:
        (breaker,) = [e for e in node_events(admin, name) if e["reason"] == "GuardBreakerOpen"]
        assert f"domain incident {RACK}=r7 with " in breaker["note"]
    # Each node's domain Event stays one Event (its series counts the cycles), never a second.
    for name in RACK_NODES:
        assert [e["reason"] for e in node_events(admin, name)].count("GuardDomainIncident") == 1
