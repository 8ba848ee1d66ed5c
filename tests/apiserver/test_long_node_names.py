"""Node names of 92 and 253 characters through whole guard cycles on a real kube-apiserver: the
cordon, its evidence Job, the return's load-test Job and the uncordon are all admitted by the
shipped policies (the Jobs' node label is guard.jobs.node_label of the name, the full name in
nodeName and the node annotation). Before, such a node was cordoned and never got its Jobs."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.jobs import node_label
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    NO_CF,
    RETURN_AT,
    faulted,
    finish,
    guard_jobs,
    mine,
    outcomes,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import JOBS_NS
from tests.apiserver.test_guard_e2e import LOADTEST_PASS, complete

pytestmark = pytest.mark.apiserver


def long_name(length: int) -> str:
    name = ("long" + "n" * 55 + ".") * 5  # DNS labels of 59 characters
    return name[: length - 1] + "z"


NODES = {length: long_name(length) for length in (92, 253)}


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(*(faulted(n) for n in NODES.values())) as server:
        yield server


@pytest.mark.parametrize("length", sorted(NODES))
def test_a_long_named_node_is_cordoned_gets_its_jobs_and_returns(
    length, prom, guard_kubeconfig, gpu_node, core, admin, deployed
):
    node = gpu_node(NODES[length], boot="boot-1")
    assert len(node) == length
    cordoned = run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan  # exit 0, nothing failed
    assert mine(cordoned, node)[0] == ("cordon", "xid-79")
    assert ("create-job", "applied") in outcomes(cordoned, node)
    (evidence,) = guard_jobs(admin, node)
    assert evidence.metadata.labels["gpu-node-guard.io/node"] == node_label(node)
    assert evidence.spec.template.spec.node_name == node

    set_status(core, node, boot="boot-2", allocatable=8)  # power cycled, all GPUs back
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan, node) == [
        ("create-job", "conditions-met")
    ]
    (loadtest,) = [
        j
        for j in guard_jobs(admin, node)
        if j.metadata.labels["app.kubernetes.io/component"] == "loadtest"
    ]
    assert len(loadtest.metadata.name) <= 57
    complete(admin, loadtest.metadata.name)
    stored = client.BatchV1Api(admin).read_namespaced_job(
        loadtest.metadata.name, JOBS_NS, _preload_content=False
    )
    finish(deployed, admin, json.loads(stored.data), LOADTEST_PASS, ok=True, mark_job=False)
    done = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert mine(done, node) == [("uncordon", "loadtest-passed"), ("event", "returned")]
    assert not core.read_node(node).spec.unschedulable
