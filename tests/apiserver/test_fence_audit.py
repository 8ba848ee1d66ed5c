"""A fence Job the guard did not make (guard/plan/fence_audit.py) on a cluster as clusters run
(`cluster`: ServiceAccount admission, the fence-Job policy): only the guard's ServiceAccount may
create one, so a stolen guard token makes an in-shape `fence set` for a healthy GPU node; the next
guard cycle says so once (a WARN line and a Warning Event on the node), the cycle after it not
again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from guard.example.promserver import LocalPrometheus
from tests.apiserver.guard_run import (
    CYCLE,
    ISOLATE_AT,
    guard_token,
    healthy,
    mine,
    node_events,
    one_gpu_node,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import ControlPlane, create, guard_job

pytestmark = pytest.mark.apiserver

NODE = "fa-healthy"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(healthy(NODE)) as server:
        yield server


@pytest.fixture(scope="module")
def kubeconfig(cluster: ControlPlane) -> Path:
    return guard_token(cluster)  # as the CronJob runs (and as it is stolen)


@pytest.fixture
def admin(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    with one_gpu_node(cluster, NODE, allocatable=8) as api:
        yield api


def test_a_fence_job_made_with_the_guards_token_for_a_healthy_node_is_said_once(
    admin: client.ApiClient, prom: LocalPrometheus, kubeconfig: Path
) -> None:
    assert "fence-job-foreign" not in [
        r for _, r in mine(run_guard(prom, kubeconfig, ISOLATE_AT).plan, NODE)
    ]
    stolen = config.new_client_from_config(config_file=str(kubeconfig))
    job = guard_job("fence", NODE, uuid.uuid4().hex)
    create(stolen, job)  # admitted: the guard's token, in shape
    name = job["metadata"]["name"]
    said = mine(run_guard(prom, kubeconfig, ISOLATE_AT + CYCLE).plan, NODE)
    assert said.count(("skip", "fence-job-foreign")) == 1, said
    (event,) = [e for e in node_events(admin, NODE) if e["reason"] == "GuardForeignJob"]
    assert event["type"] == "Warning" and f"job/{name}" in event["note"]
    again = mine(run_guard(prom, kubeconfig, ISOLATE_AT + 2 * CYCLE).plan, NODE)
    assert "fence-job-foreign" not in [r for _, r in again], again
