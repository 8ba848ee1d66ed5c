"""The fence Job on a cluster as clusters run (`cluster`: ServiceAccount admission,
NodeRestriction and the real Job controller): `gpu-node-guard run --fence-gpu` with its own
token creates the fence Job, the real controller makes its Pod and the fence Pod policy admits
it; with the Pod's summary (the test plays only the kubelet) the next cycle records the fence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.wire import FenceSummary, render_fence_summary
from tests.apiserver.controllers import controller_pod, run_to_the_end
from tests.apiserver.guard_run import (
    CYCLE,
    EVIDENCE,
    ISOLATE_AT,
    KEYS,
    faulted,
    guard_jobs,
    guard_token,
    mine,
    one_gpu_node,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import ControlPlane

pytestmark = pytest.mark.apiserver

NODE = "fc-fenced"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(faulted(NODE)) as server:
        yield server


@pytest.fixture(scope="module")
def kubeconfig(cluster: ControlPlane) -> Path:
    return guard_token(cluster)


@pytest.fixture
def admin(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    with one_gpu_node(cluster, NODE, allocatable=7) as api:
        yield api


def _job(admin: client.ApiClient, kind: str) -> dict[str, object]:
    (job,) = [
        j
        for j in guard_jobs(admin, NODE)
        if j.metadata.labels["app.kubernetes.io/component"] == kind
    ]
    return dict(admin.sanitize_for_serialization(job))


def test_the_job_controllers_fence_pod_is_admitted_and_its_summary_recorded(
    cluster: ControlPlane, admin: client.ApiClient, prom: LocalPrometheus, kubeconfig: Path
) -> None:
    cordon = mine(run_guard(prom, kubeconfig, ISOLATE_AT, "--fence-gpu").plan, NODE)
    assert cordon[0] == ("cordon", "xid-79") and ("create-job", "fence-set") in cordon
    job = _job(admin, "fence")
    pod = controller_pod(cluster, job)  # made by the real controller, admitted by its policy
    assert pod["spec"]["containers"][0]["command"][:3] == ["gpu-node-guard", "fence", "set"]
    assert pod["spec"]["hostPID"] is True and pod["spec"]["nodeName"] == NODE
    run_to_the_end(cluster, admin, _job(admin, "evidence"), EVIDENCE, ok=True)
    uuid = pod["spec"]["containers"][0]["command"][6]
    fenced = render_fence_summary(FenceSummary("set", "0000:58:00.0", uuid, "fenced", "Prohibited"))
    run_to_the_end(cluster, admin, job, fenced, ok=True)

    recorded = mine(run_guard(prom, kubeconfig, ISOLATE_AT + CYCLE, "--fence-gpu").plan, NODE)
    assert ("annotate", "fenced") in recorded
    notes = client.CoreV1Api(admin).read_node(NODE).metadata.annotations
    assert notes[KEYS.fence].startswith("fenced boot-1 ")
