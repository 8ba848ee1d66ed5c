"""RBAC of manifests/base on a real kube-apiserver: every call a guard cycle makes succeeds as
the guard's ServiceAccount, every other one is refused with 403.

manifests/base/rbac.yaml is the least privilege a cycle needs and the only RBAC the layout
applies: no pods anywhere but the guard's Jobs' own (GPU pods come from kube-state-metrics). The
refusals below are checked both on an identity bound exactly as rbac.yaml binds the guard and on
the deployed ServiceAccount.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.names import CYCLE_LEASE, REPORTING_CONTROLLER
from tests.apiserver.deploy import BASE, EXAMPLE, Kubectl, key
from tests.apiserver.kube import (
    GUARD_NS,
    GUARD_USER,
    JOB_USER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    create,
    create_all,
    guard_job,
    refusal,
    yaml_documents,
)

pytestmark = pytest.mark.apiserver

REPO = Path(__file__).resolve().parents[2]
LEDGER = "gpu-fault-ledger"
TARGET = "guard-least-privilege"  # a user bound exactly like the guard in rbac.yaml


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
    return Calls(
        api,
        client.CoreV1Api(api),
        client.BatchV1Api(api),
        client.RbacAuthorizationV1Api(api),
        node,
        other_ns,
    )


@pytest.fixture(scope="module")
def target(deployed: ControlPlane, admin: client.ApiClient) -> Iterator[client.ApiClient]:
    """rbac.yaml's bindings, re-made for the user TARGET."""
    bindings = []
    for doc in yaml_documents(BASE / "rbac.yaml"):
        if doc["kind"] in {"RoleBinding", "ClusterRoleBinding"}:
            made = copy.deepcopy(doc)
            made["metadata"]["name"] = f"{doc['metadata']['name']}-{TARGET}"
            made["subjects"] = [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TARGET}
            ]
            bindings.append(made)
    create_all(admin, bindings)
    with deployed.impersonating(TARGET) as api:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # bindings reach RBAC by informer
            try:
                client.BatchV1Api(api).list_namespaced_job(JOBS_NS)
                client.CoreV1Api(api).list_node(limit=1)
                break
            except ApiException:
                time.sleep(0.1)
        yield api


@pytest.fixture
def as_guard(guard: client.ApiClient, make_node: Callable[..., str], namespace: str) -> Calls:
    return calls_as(guard, make_node(), namespace)


@pytest.fixture
def as_target(target: client.ApiClient, make_node: Callable[..., str], namespace: str) -> Calls:
    return calls_as(target, make_node(), namespace)


@pytest.fixture
def no_ledger(admin: client.ApiClient) -> Iterator[None]:
    yield
    try:
        client.CoreV1Api(admin).delete_namespaced_config_map(LEDGER, GUARD_NS)
    except ApiException as exc:
        if exc.status != 404:
            raise


def event(c: Calls, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{c.node}.{uuid.uuid4().hex[:8]}", "namespace": namespace},
        "eventTime": "2026-03-02T04:10:00.000000Z",
        "reportingController": REPORTING_CONTROLLER,  # guard-scope admits only the guard's
        "reportingInstance": "gpu-node-guard-1",
        "action": "Cordon",
        "reason": "Xid79",
        "type": "Warning",
        "note": "xid-79 on 0000:99:00.0",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": c.node},
    }


def events_v1(c: Calls) -> object:
    """create, then patch (a series), get and list: what the executor does with Events."""
    body = event(c)
    events = client.EventsV1Api(c.api)
    create(c.api, body)
    name = body["metadata"]["name"]
    series = {"series": {"count": 2, "lastObservedTime": "2026-03-02T04:15:00.000000Z"}}
    raw = {"_preload_content": False}  # the typed model chokes on MicroTime; the call is the test
    events.patch_namespaced_event(name, "default", series, _content_type=MERGE_PATCH, **raw)
    events.read_namespaced_event(name, "default", **raw)
    return events.list_namespaced_event("default", limit=1, **raw)


def cordon(c: Calls) -> object:
    body = {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {"gpu-node-guard.io/auto-cordon-reason": "xid-79"}},
    }
    return c.core.patch_node(c.node, body, _content_type=MERGE_PATCH)


def ledger_writes(c: Calls) -> object:
    """Create, read, list and update: the ledger and archive writes of a cycle."""
    c.core.create_namespaced_config_map(GUARD_NS, {"metadata": {"name": LEDGER}, "data": {}})
    ledger = c.core.read_namespaced_config_map(LEDGER, GUARD_NS)
    ledger.data = {c.node: "2026-03-02T04:10:00Z xid-79 0000:99:00.0 GPU-5f1c gpu-node-guard\n"}
    c.core.replace_namespaced_config_map(LEDGER, GUARD_NS, ledger)
    return c.core.list_namespaced_config_map(
        GUARD_NS, label_selector="app.kubernetes.io/component=ledger-archive"
    )


def lease_writes(c: Calls) -> object:
    """Take, renew and release the cycle's Lease: a cycle's Lease calls."""
    leases = client.CoordinationV1Api(c.api)
    body = {
        "metadata": {"name": CYCLE_LEASE},
        "spec": {"holderIdentity": "rbac-test-1", "leaseDurationSeconds": 90},
    }
    try:
        leases.create_namespaced_lease(GUARD_NS, body)
    except ApiException as exc:  # the other identity's parameter made it already
        assert exc.status == 409, exc
    lease = leases.read_namespaced_lease(CYCLE_LEASE, GUARD_NS)
    lease.spec.holder_identity = ""
    return leases.replace_namespaced_lease(CYCLE_LEASE, GUARD_NS, lease)


CYCLE = [
    pytest.param(lambda c: c.core.list_node(), id="list-nodes"),
    pytest.param(lambda c: c.core.read_node(c.node), id="get-node"),
    pytest.param(cordon, id="cordon-node"),
    pytest.param(events_v1, id="events.k8s.io-create-patch-get-list"),
    pytest.param(
        lambda c: create(c.api, guard_job("loadtest", c.node, uuid.uuid4().hex)), id="create-job"
    ),
    pytest.param(
        lambda c: c.batch.read_namespaced_job(
            create(c.api, guard_job("evidence", c.node, uuid.uuid4().hex)).metadata.name, JOBS_NS
        ),
        id="get-job",
    ),
    pytest.param(lambda c: c.batch.list_namespaced_job(JOBS_NS), id="list-jobs"),
    pytest.param(lambda c: c.core.list_namespaced_pod(JOBS_NS), id="list-job-pods"),
    pytest.param(ledger_writes, id="ledger-create-get-update-list"),
    pytest.param(lease_writes, id="lease-create-get-update"),
]


@pytest.mark.parametrize("call", CYCLE)
@pytest.mark.parametrize("who", ["guard", "least-privilege"])
def test_every_call_of_a_cycle_is_allowed(
    request: pytest.FixtureRequest, who: str, call: Callable[[Calls], object], no_ledger: None
) -> None:
    c = request.getfixturevalue("as_guard" if who == "guard" else "as_target")
    assert call(c) is not None


def _get_job_pod(c: Calls) -> object:
    try:
        return c.core.read_namespaced_pod("absent", JOBS_NS)
    except ApiException as exc:
        if exc.status == 404:  # allowed, and not there: what get means here
            return exc
        raise


def test_the_guard_may_read_its_job_pods(as_target: Calls) -> None:
    assert isinstance(_get_job_pod(as_target), ApiException)


NEVER = [
    pytest.param(lambda c: c.core.list_pod_for_all_namespaces(), id="list-pods-cluster-wide"),
    pytest.param(lambda c: c.core.list_namespaced_pod("default"), id="list-pods-elsewhere"),
    pytest.param(
        lambda c: c.core.create_namespaced_event(
            "default",
            {
                "metadata": {"generateName": "x-"},
                "involvedObject": {"kind": "Node", "name": c.node},
            },
        ),
        id="core-event-create",
    ),
    pytest.param(
        lambda c: client.EventsV1Api(c.api).patch_namespaced_event(
            "x", "kube-system", {"series": {"count": 2}}, _content_type=MERGE_PATCH
        ),
        id="patch-event-outside-default",
    ),
    pytest.param(
        lambda c: client.EventsV1Api(c.api).list_namespaced_event("kube-system"),
        id="list-events-outside-default",
    ),
    pytest.param(
        lambda c: c.core.create_namespaced_event(
            "kube-system",
            {"metadata": {"generateName": "x-"}, "involvedObject": {"kind": "Pod", "name": "x"}},
        ),
        id="core-event-create-elsewhere",
    ),
    pytest.param(lambda c: c.core.delete_node(c.node), id="delete-node"),
    pytest.param(lambda c: c.core.create_node({"metadata": {"name": "x"}}), id="create-node"),
    pytest.param(
        lambda c: c.core.patch_node_status(
            c.node, {"status": {"phase": "x"}}, _content_type=MERGE_PATCH
        ),
        id="patch-node-status",
    ),
    pytest.param(lambda c: c.core.list_secret_for_all_namespaces(), id="list-secrets"),
    pytest.param(lambda c: c.core.read_namespaced_secret("any", GUARD_NS), id="read-secret"),
    pytest.param(
        lambda c: c.core.create_namespaced_pod(
            JOBS_NS, {"metadata": {"name": "x"}, "spec": {"containers": []}}
        ),
        id="create-pod",
    ),
    pytest.param(
        lambda c: c.core.connect_post_namespaced_pod_exec("x", JOBS_NS, command=["sh"]),
        id="exec-into-job-pod",
    ),
    pytest.param(
        lambda c: c.core.create_namespaced_pod_eviction(
            "x", "default", {"metadata": {"name": "x"}}
        ),
        id="evict-pod",
    ),
    pytest.param(
        lambda c: c.core.patch_namespaced_config_map(
            LEDGER, GUARD_NS, {"data": {}}, _content_type=MERGE_PATCH
        ),
        id="patch-ledger",
    ),
    pytest.param(
        lambda c: c.core.patch_namespaced_config_map(
            "x", c.other_ns, {"data": {}}, _content_type=MERGE_PATCH
        ),
        id="patch-configmap-elsewhere",
    ),
    pytest.param(
        lambda c: c.core.delete_namespaced_config_map(LEDGER, GUARD_NS), id="delete-ledger"
    ),
    pytest.param(lambda c: c.core.list_namespaced_config_map(JOBS_NS), id="configmaps-in-jobs-ns"),
    pytest.param(
        lambda c: client.CoordinationV1Api(c.api).read_namespaced_lease("other", GUARD_NS),
        id="read-another-lease",
    ),
    pytest.param(
        lambda c: client.CoordinationV1Api(c.api).delete_namespaced_lease(CYCLE_LEASE, GUARD_NS),
        id="delete-the-cycle-lease",
    ),
    pytest.param(
        lambda c: client.CoordinationV1Api(c.api).list_namespaced_lease(GUARD_NS), id="list-leases"
    ),
    pytest.param(
        lambda c: c.batch.create_namespaced_job(GUARD_NS, guard_job("evidence", c.node, "own-ns")),
        id="create-job-in-guard-ns",
    ),
    pytest.param(
        lambda c: c.batch.create_namespaced_job(
            c.other_ns, guard_job("evidence", c.node, "elsewhere")
        ),
        id="create-job-elsewhere",
    ),
    pytest.param(lambda c: c.batch.delete_namespaced_job("x", JOBS_NS), id="delete-job"),
    pytest.param(
        lambda c: c.batch.patch_namespaced_job(
            "x", JOBS_NS, {"spec": {"parallelism": 2}}, _content_type=MERGE_PATCH
        ),
        id="patch-job",
    ),
    pytest.param(
        lambda c: c.batch.create_namespaced_cron_job(
            JOBS_NS,
            {"metadata": {"name": "x"}, "spec": {"schedule": "* * * * *", "jobTemplate": {}}},
        ),
        id="create-cronjob",
    ),
    pytest.param(
        lambda c: c.batch.patch_namespaced_cron_job(
            "gpu-node-guard", GUARD_NS, {"spec": {"suspend": True}}, _content_type=MERGE_PATCH
        ),
        id="suspend-own-cronjob",
    ),
    pytest.param(
        lambda c: c.core.create_namespaced_service_account_token(
            "gpu-node-guard-job", JOBS_NS, {"spec": {}}
        ),
        id="mint-job-token",
    ),
    pytest.param(
        lambda c: c.rbac.create_namespaced_role_binding(
            GUARD_NS,
            {
                "metadata": {"name": "more"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "gpu-node-guard", "namespace": GUARD_NS}
                ],
            },
        ),
        id="grant-itself-more",
    ),
]


@pytest.mark.parametrize("call", NEVER)
def test_no_call_a_cycle_does_not_make(as_target: Calls, call: Callable[[Calls], object]) -> None:
    status, message = refusal(lambda: call(as_target))
    assert status == 403, message
    assert f'User "{TARGET}" cannot' in message


@pytest.mark.parametrize("call", NEVER)
def test_the_deployed_guard_is_refused_the_same(
    as_guard: Calls, call: Callable[[Calls], object]
) -> None:
    """The same refusals for the real ServiceAccount, as manifests/ deploys it."""
    status, message = refusal(lambda: call(as_guard))
    assert status == 403, message
    assert f'User "{GUARD_USER}" cannot' in message


def _rules(path: Path) -> set[tuple[str, str, str, str]]:
    """(namespace or '*', apiGroup, resource, verb) for every rule of a manifest."""
    out = set()
    for doc in yaml_documents(path):
        if doc["kind"] not in {"Role", "ClusterRole"}:
            continue
        where = doc["metadata"].get("namespace", "*")
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out |= {(where, group, resource, verb) for verb in rule["verbs"]}
    return out


def test_the_grants_are_exactly_the_cycles() -> None:
    """The whole of rbac.yaml, spelled out: a new verb needs a line here and a reason there."""
    assert _rules(BASE / "rbac.yaml") == {
        ("*", "", "nodes", "get"),
        ("*", "", "nodes", "list"),
        ("*", "", "nodes", "patch"),
        (GUARD_NS, "", "configmaps", "get"),
        (GUARD_NS, "", "configmaps", "list"),
        (GUARD_NS, "", "configmaps", "create"),
        (GUARD_NS, "", "configmaps", "update"),
        (JOBS_NS, "batch", "jobs", "get"),
        (JOBS_NS, "batch", "jobs", "list"),
        (JOBS_NS, "batch", "jobs", "create"),
        (JOBS_NS, "", "pods", "get"),
        (JOBS_NS, "", "pods", "list"),
        ("default", "events.k8s.io", "events", "create"),
        ("default", "events.k8s.io", "events", "patch"),
        ("default", "events.k8s.io", "events", "get"),
        ("default", "events.k8s.io", "events", "list"),
        ("*", "events.k8s.io", "events", "create"),  # about the pods on an isolated GPU
        (GUARD_NS, "coordination.k8s.io", "leases", "create"),
        (GUARD_NS, "coordination.k8s.io", "leases", "get"),
        (GUARD_NS, "coordination.k8s.io", "leases", "update"),
        ("*", "resource.k8s.io", "resourceslices", "list"),
        ("*", "resource.k8s.io", "devicetaintrules", "get"),
        ("*", "resource.k8s.io", "devicetaintrules", "list"),
        ("*", "resource.k8s.io", "devicetaintrules", "create"),
        ("*", "resource.k8s.io", "devicetaintrules", "delete"),
        (JOBS_NS, "resource.k8s.io", "resourceclaims", "get"),
        (JOBS_NS, "resource.k8s.io", "resourceclaims", "list"),
        (JOBS_NS, "resource.k8s.io", "resourceclaims", "create"),
        (JOBS_NS, "resource.k8s.io", "resourceclaims", "delete"),
    }


@pytest.mark.parametrize("where", [BASE, EXAMPLE], ids=["base", "example"])
def test_rbac_yaml_is_the_only_rbac_the_layout_applies(kubectl_binary: Path, where: Path) -> None:
    """Nothing else the base or the example overlay builds (the agent, the policies, the
    components, the site's patches) grants anything."""
    kinds = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
    built = {key(d) for d in Kubectl(kubectl_binary).build(where) if d["kind"] in kinds}
    assert built == {key(d) for d in yaml_documents(BASE / "rbac.yaml")}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.core.list_pod_for_all_namespaces(), id="list-pods"),
        pytest.param(
            lambda c: c.core.read_namespaced_config_map(LEDGER, GUARD_NS), id="read-ledger"
        ),
        pytest.param(lambda c: c.core.list_node(), id="list-nodes"),
        pytest.param(lambda c: c.batch.list_namespaced_job(JOBS_NS), id="list-jobs"),
    ],
)
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
    cron = client.BatchV1Api(admin).read_namespaced_cron_job("gpu-node-guard", GUARD_NS)
    pod = cron.spec.job_template.spec.template.spec
    guard = pod.containers[0]
    assert (cron.spec.schedule, cron.spec.concurrency_policy) == ("*/5 * * * *", "Forbid")
    assert cron.spec.starting_deadline_seconds and cron.spec.starting_deadline_seconds < 300
    assert pod.service_account_name == "gpu-node-guard" and pod.security_context.run_as_non_root
    assert guard.command == ["gpu-node-guard", "run"]
    assert guard.security_context.read_only_root_filesystem is True
    assert guard.security_context.capabilities.drop == ["ALL"]
    assert guard.resources.limits["memory"] and guard.resources.requests["cpu"]
