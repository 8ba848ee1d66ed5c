"""A whole cycle of the guard on a real node: `gpu-node-guard run` (the CronJob's command, with the
guard's ServiceAccount token) reads an Xid 79 from a scenario Prometheus, cordons the node the
kubelet runs and creates the evidence Job; the real Job controller and kubelet run it; the next
cycle reads its result."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.settings import Settings
from tests.apiserver.guard_run import (
    CYCLE,
    ISOLATE_AT,
    KEYS,
    NO_CF,
    RETURN_AT,
    faulted,
    guard_kube,
    mine,
    node_events,
    read_and_plan,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import JOBS_NS, MERGE_PATCH
from tests.node.jobs import MEASURED, wait_for
from tests.node.node import Node

pytestmark = pytest.mark.node
EVIDENCE = "app.kubernetes.io/component=evidence"
LOADTEST = "app.kubernetes.io/component=loadtest"


@pytest.fixture
def prom(node: Node) -> Iterator[LocalPrometheus]:
    with scenario_prometheus(faulted(node.name)) as server:
        yield server


def test_a_cycle_cordons_the_node_and_the_next_reads_its_evidence(
    prom: LocalPrometheus, gpu_node: str, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """The first cycle cordons the node for its Xid 79 and creates the evidence Job; that Job
    runs on the node to its end; the next cycle's snapshot holds its result, read, and the node
    waits for its power cycle (the kubelet reports the same boot ID)."""
    began = time.monotonic()
    first = run_guard(prom, guard_kubeconfig, ISOLATE_AT)
    assert mine(first.plan, gpu_node) == [
        ("cordon", "xid-79"),
        ("event", "xid-79"),
        ("append-ledger", "xid-79"),
        ("create-job", "xid-79"),
    ]
    core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
    assert core.read_node(gpu_node).spec.unschedulable is True
    (made,) = batch.list_namespaced_job(JOBS_NS, label_selector=EVIDENCE).items

    wait_for(f"job/{made.metadata.name} ended", lambda: _ended(batch, made.metadata.name))
    MEASURED.append(("cycle", {"cordon → evidence Job ended": time.monotonic() - began}))
    later = ISOLATE_AT + CYCLE
    snap, _plan = read_and_plan(
        guard_kube(guard_kubeconfig), prom, later, Settings(prometheus_url=prom.url)
    )
    (job,) = [j for j in snap.jobs if j.name == made.metadata.name]
    assert (job.kind, job.node, job.status) == ("evidence", gpu_node, "succeeded")
    assert job.result is not None and job.result.state == "read", job.result
    second = run_guard(prom, guard_kubeconfig, later)
    assert mine(second.plan, gpu_node) == [
        ("skip", "same-boot"),
        ("event", "same-boot"),
        ("skip", "already-cordoned"),
    ]


def test_a_load_test_the_node_refuses_keeps_the_returning_node_cordoned(
    prom: LocalPrometheus, gpu_node: str, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """The return of a power-cycled node on a node short of CPU: the guard's load-test Job is
    refused by the kubelet (OutOfcpu), and the next cycle reads that as `job-rejected` (a
    Warning Event, no load-test failure recorded) with the node kept cordoned."""
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, gpu_node)[0] == (
        "cordon",
        "xid-79",
    )
    core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
    (evidence,) = batch.list_namespaced_job(JOBS_NS, label_selector=EVIDENCE).items
    wait_for("the evidence Job ended", lambda: _ended(batch, evidence.metadata.name))
    # The power cycle: the kubelet reports this machine's boot ID, so the cordon's is made older.
    power_cycled = {"metadata": {"annotations": {KEYS.boot_id: "boot-before-the-power-cycle"}}}
    core.patch_node(gpu_node, power_cycled, _content_type=MERGE_PATCH)
    created = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert ("create-job", "conditions-met") in mine(created, gpu_node)
    (loadtest,) = batch.list_namespaced_job(JOBS_NS, label_selector=LOADTEST).items
    wait_for("the load-test Job ended", lambda: _ended(batch, loadtest.metadata.name))
    run = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE, NO_CF)
    assert mine(run.plan, gpu_node) == [("skip", "job-rejected"), ("event", "job-rejected")]
    assert core.read_node(gpu_node).spec.unschedulable is True
    (line,) = [x for x in run.lines("skip") if x.get("node") == gpu_node]
    assert "OutOfcpu" in line["detail"] or "Pod was rejected" in line["detail"], line
    (event,) = [e for e in node_events(admin, gpu_node) if e["reason"] == "GuardJobRejected"]
    assert f"job/{loadtest.metadata.name} could not run" in event["note"]


def _ended(batch: client.BatchV1Api, name: str) -> bool:
    status = batch.read_namespaced_job(name, JOBS_NS).status
    return bool(status.succeeded or status.failed)
