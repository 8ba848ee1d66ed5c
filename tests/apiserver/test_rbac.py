"""RBAC of manifests/ on a real kube-apiserver: every call a guard cycle makes succeeds as the
guard's ServiceAccount, and representative calls it must never make are refused with 403."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.apiserver.kube import (
    GUARD_USER,
    JOB_USER,
    MERGE_PATCH,
    ControlPlane,
    create,
    guard_job,
    refusal,
)

pytestmark = pytest.mark.apiserver

NS = "gpu-node-guard"
LEDGER = "gpu-fault-ledger"
PARAMS = "gpu-node-guard-policy-params"


@dataclass(frozen=True, slots=True)
class Calls:
    """The APIs of one identity, plus the objects a call may name."""

    api: client.ApiClient
    core: client.CoreV1Api
    batch: client.BatchV1Api
    rbac: client.RbacAuthorizationV1Api
    node: str
    other_ns: str


def calls_as(api: client.ApiClient, node: str, other_ns: str) -> Calls:
    core, batch, rbac = (
        client.CoreV1Api(api),
        client.BatchV1Api(api),
        client.RbacAuthorizationV1Api(api),
    )
    return Calls(api, core, batch, rbac, node, other_ns)


@pytest.fixture
def as_guard(guard: client.ApiClient, make_node: Callable[..., str], namespace: str) -> Calls:
    return calls_as(guard, make_node(), namespace)


@pytest.fixture
def ledger_removed(admin: client.ApiClient) -> Iterator[None]:
    """The ledger is shared state of the session's guard namespace: leave none behind."""
    yield
    try:
        client.CoreV1Api(admin).delete_namespaced_config_map(LEDGER, NS)
    except ApiException as exc:
        if exc.status != 404:
            raise


def core_event(c: Calls) -> object:
    return c.core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "gpu-node-guard-"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": c.node},
            "reason": "Cordoned",
            "type": "Warning",
            "message": "xid-79 on 0000:99:00.0",
            "source": {"component": "gpu-node-guard"},
        },
    )


def events_v1_event(c: Calls) -> object:
    return create(
        c.api,
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": "gpu-node-guard-", "namespace": "default"},
            "eventTime": "2026-03-02T04:10:00.000000Z",
            "reportingController": "gpu-node-guard.io/guard",
            "reportingInstance": "gpu-node-guard-1",
            "action": "Cordon",
            "reason": "Xid79",
            "type": "Warning",
            "note": "xid-79 on 0000:99:00.0",
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": c.node},
        },
    )


def cordon(c: Calls) -> object:
    body = {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {"gpu-node-guard.io/auto-cordon-reason": "xid-79"}},
    }
    return c.core.patch_node(c.node, body, _content_type=MERGE_PATCH)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.core.list_node(), id="list-nodes"),
        pytest.param(lambda c: c.core.read_node(c.node), id="get-node"),
        pytest.param(cordon, id="cordon-node"),
        pytest.param(lambda c: c.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={c.node}"), id="list-pods-on-node"),
        pytest.param(core_event, id="create-event"),
        pytest.param(events_v1_event, id="create-events.k8s.io-event"),
        pytest.param(lambda c: create(c.api, guard_job("loadtest", c.node, uuid.uuid4().hex)),
                     id="create-job"),
        pytest.param(lambda c: c.batch.list_namespaced_job(NS), id="list-jobs"),
        pytest.param(lambda c: c.core.list_namespaced_config_map(NS), id="list-configmaps"),
    ],
)  # fmt: skip
def test_guard_may(as_guard: Calls, call: Callable[[Calls], object]) -> None:
    assert call(as_guard) is not None


def test_guard_keeps_its_ledger(as_guard: Calls, ledger_removed: None) -> None:
    """Create, read, update and patch: the ledger writes of a cycle (409-retried by the guard)."""
    c = as_guard
    c.core.create_namespaced_config_map(NS, {"metadata": {"name": LEDGER}, "data": {}})
    ledger = c.core.read_namespaced_config_map(LEDGER, NS)
    ledger.data = {c.node: "2026-03-02T04:10:00Z xid-79 0000:99:00.0 GPU-5f1c gpu-node-guard\n"}
    c.core.replace_namespaced_config_map(LEDGER, NS, ledger)
    line = "2026-03-09T01:00:00Z xid-79 0000:99:00.0 GPU-5f1c gpu-node-guard\n"
    both = ledger.data[c.node] + line
    c.core.patch_namespaced_config_map(
        LEDGER, NS, {"data": {c.node: both}}, _content_type=MERGE_PATCH
    )
    assert c.core.read_namespaced_config_map(LEDGER, NS).data == {c.node: both}


def test_guard_reads_back_its_job(as_guard: Calls) -> None:
    job = guard_job("evidence", as_guard.node, uuid.uuid4().hex)
    create(as_guard.api, job)
    stored = as_guard.batch.read_namespaced_job(job["metadata"]["name"], NS)
    assert stored.metadata.labels["app.kubernetes.io/component"] == "evidence"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.core.delete_node(c.node), id="delete-node"),
        pytest.param(lambda c: c.core.create_node({"metadata": {"name": "x"}}), id="create-node"),
        pytest.param(lambda c: c.core.patch_node_status(
            c.node, {"status": {"phase": "x"}}, _content_type=MERGE_PATCH), id="patch-node-status"),
        pytest.param(lambda c: c.core.list_secret_for_all_namespaces(), id="list-secrets"),
        pytest.param(lambda c: c.core.read_namespaced_secret("any", NS), id="read-secret"),
        pytest.param(lambda c: c.core.create_namespaced_pod(
            NS, {"metadata": {"name": "x"}, "spec": {"containers": []}}), id="create-pod"),
        pytest.param(lambda c: c.core.create_namespaced_pod_eviction(
            "x", "default", {"metadata": {"name": "x"}}), id="evict-pod"),
        pytest.param(lambda c: c.core.patch_namespaced_config_map(
            "x", c.other_ns, {"data": {}}, _content_type=MERGE_PATCH),
            id="patch-configmap-elsewhere"),
        pytest.param(lambda c: c.core.patch_namespaced_config_map(
            PARAMS, NS, {"data": {}}, _content_type=MERGE_PATCH), id="patch-policy-params"),
        pytest.param(lambda c: c.core.delete_namespaced_config_map(LEDGER, NS), id="delete-ledger"),
        pytest.param(lambda c: c.batch.create_namespaced_job(
            c.other_ns, guard_job("evidence", c.node, "elsewhere")), id="create-job-elsewhere"),
        pytest.param(lambda c: c.batch.delete_namespaced_job("x", NS), id="delete-job"),
        pytest.param(lambda c: c.batch.patch_namespaced_cron_job(
            "gpu-node-guard", NS, {"spec": {"suspend": True}}, _content_type=MERGE_PATCH),
            id="suspend-own-cronjob"),
        pytest.param(lambda c: c.rbac.create_namespaced_role_binding(NS, {
            "metadata": {"name": "more"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "gpu-node-guard", "namespace": NS}],
        }), id="grant-itself-more"),
    ],
)  # fmt: skip
def test_guard_may_not(as_guard: Calls, call: Callable[[Calls], object]) -> None:
    status, message = refusal(lambda: call(as_guard))
    assert status == 403, message
    assert f'User "{GUARD_USER}" cannot' in message


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.core.list_pod_for_all_namespaces(), id="list-pods"),
        pytest.param(lambda c: c.core.read_namespaced_config_map(LEDGER, NS), id="read-ledger"),
        pytest.param(lambda c: c.core.list_node(), id="list-nodes"),
        pytest.param(lambda c: c.batch.list_namespaced_job(NS), id="list-jobs"),
    ],
)  # fmt: skip
def test_job_pods_may_do_nothing(
    deployed: ControlPlane, namespace: str, call: Callable[[Calls], object]
) -> None:
    with deployed.impersonating(JOB_USER) as api:
        status, message = refusal(lambda: call(calls_as(api, "gpu-node-a", namespace)))
    assert status == 403, message
    assert f'User "{JOB_USER}" cannot' in message


def test_cronjob_runs_one_locked_down_cycle_at_a_time(
    admin: client.ApiClient, deployed: object
) -> None:
    """The CronJob as the API server stored it (defaults applied) runs as the guard, non-root."""
    cron = client.BatchV1Api(admin).read_namespaced_cron_job("gpu-node-guard", NS)
    pod = cron.spec.job_template.spec.template.spec
    guard = pod.containers[0]
    assert (cron.spec.schedule, cron.spec.concurrency_policy) == ("*/5 * * * *", "Forbid")
    assert cron.spec.starting_deadline_seconds and cron.spec.starting_deadline_seconds < 300
    assert pod.service_account_name == "gpu-node-guard" and pod.security_context.run_as_non_root
    assert guard.command == ["gpu-node-guard", "run"]
    assert guard.security_context.read_only_root_filesystem is True
    assert guard.security_context.capabilities.drop == ["ALL"]
    assert guard.resources.limits["memory"] and guard.resources.requests["cpu"]
