"""Fixtures of the apiserver tier: one etcd + kube-apiserver per session, deployed manifests and
policies, and a fresh namespace per test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from guard.jobs import node_label
from tests.apiserver import tally
from tests.apiserver.deploy import BASE, Kubectl, kubectl_or_skip
from tests.apiserver.guard_run import KEYS, forget_guard_state, make_gpu_node
from tests.apiserver.kube import (
    ACCOUNT_CONTROLLERS,
    DAEMONSET_CONTROLLER,
    GUARD_NS,
    GUARD_USER,
    JOB_CONTROLLER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    api_error,
    as_dict,
    control_plane,
    controller_pod,
    create,
    daemonset_pod,
    guard_job,
    required_assets,
    write_kubeconfig,
)

REPO = Path(__file__).resolve().parents[2]
_ENFORCE_TIMEOUT_S = 60.0
AGENT = "gpu-node-guard-agent"


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver on loopback for the whole session, with ServiceAccount admission
    and NodeRestriction on as clusters run them, and kube-controller-manager's ServiceAccount
    controllers that admission needs; no Job controller (the tests play it: `finish`; the
    `cluster` fixture has the real one). Stopped at the end."""
    assets = required_assets(controller_manager=True)
    workdir = tmp_path_factory.mktemp("apiserver")
    with control_plane(assets, workdir, True, ACCOUNT_CONTROLLERS) as plane:
        tally.STARTED_IN_S.append(plane.started_in_s)
        yield plane


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, kubectl_binary: Path
) -> Iterator[ControlPlane]:
    """A cluster as clusters run: its own etcd + kube-apiserver with ServiceAccount admission
    and NodeRestriction, and kube-controller-manager's Job and ServiceAccount controllers
    (`kube.CONTROLLERS`); manifests/base applied, every policy enforcing, an admin of the jobs
    namespace (`JOBS_NS_ADMIN`)."""
    assets = required_assets(controller_manager=True)
    workdir = tmp_path_factory.mktemp("cluster")
    with control_plane(assets, workdir, as_clusters_run=True) as plane:
        tally.STARTED_IN_S.append(plane.started_in_s)
        with plane.admin_client() as api:
            aggregate_cluster_roles(api)
            Kubectl(kubectl_binary, plane.kubeconfig).apply(BASE)
            wait_for_enforcement(plane, api)
            bind_admin(api, JOBS_NS_ADMIN, JOBS_NS)
        with plane.impersonating(JOBS_NS_ADMIN) as bob:
            _wait_until_allowed(lambda: client.CoreV1Api(bob).list_namespaced_pod(JOBS_NS))
        yield plane


def bind_admin(admin: client.ApiClient, user: str, namespace: str) -> None:
    """`user` an admin (the aggregated `admin` role) of `namespace`."""
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"admin-{user}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


@pytest.fixture(scope="session")
def admin(apiserver: ControlPlane) -> Iterator[client.ApiClient]:
    with apiserver.admin_client() as api:
        yield api


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    """The real kubectl v1.34.4 (hack/envtest/build.sh --kubectl)."""
    return kubectl_or_skip()


@pytest.fixture(scope="session")
def deployed(
    apiserver: ControlPlane, admin: client.ApiClient, kubectl_binary: Path
) -> ControlPlane:
    """manifests/base applied as a site does (`kubectl apply --server-side -k`), every policy
    enforcing."""
    aggregate_cluster_roles(admin)
    Kubectl(kubectl_binary, apiserver.kubeconfig).apply(BASE)
    wait_for_enforcement(apiserver, admin)
    for namespace, name in ACCOUNTS_ADMINS_MAKE:
        make_service_account(admin, namespace, name)
    return apiserver


# ServiceAccounts a namespace admin may make so that ServiceAccount admission finds the one an
# out-of-shape Pod names: then the check under test (Pod Security, a policy) decides, as on a
# cluster where someone made them.
ACCOUNTS_ADMINS_MAKE = ((GUARD_NS, "gpu-node-guard-job"), (JOBS_NS, "gpu-node-guard"))


def make_service_account(admin: client.ApiClient, namespace: str, name: str) -> None:
    client.CoreV1Api(admin).create_namespaced_service_account(
        namespace, {"metadata": {"name": name}}
    )


def aggregate_cluster_roles(admin: client.ApiClient) -> None:
    """Fill `admin`, `edit` and `view` as kube-controller-manager's aggregation controller does
    (absent here): the rules of every ClusterRole labelled aggregate-to-<name>."""
    rbac = client.RbacAuthorizationV1Api(admin)
    for name in ("view", "edit", "admin"):  # each is labelled to aggregate into the next
        label = f"rbac.authorization.k8s.io/aggregate-to-{name}=true"
        parts = rbac.list_cluster_role(label_selector=label).items
        rules = [r for part in parts for r in admin.sanitize_for_serialization(part.rules or [])]
        rbac.patch_cluster_role(name, {"rules": rules})


@pytest.fixture(scope="session")
def runtime_class(deployed: ControlPlane, admin: client.ApiClient) -> str:
    """The RuntimeClass one row asks for, so RuntimeClass admission lets the policies decide."""
    body = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "runc-privileged"},
        "handler": "runc",
    }
    create(admin, body)
    return "runc-privileged"


@dataclass(frozen=True, slots=True)
class Identities:
    """Who tries the out-of-shape objects: the guard's real token, minted (TokenRequest) by the
    guard namespace's admin, and an admin (the aggregated `admin` role) of each namespace."""

    guard_token: client.ApiClient
    guard_ns_admin: client.ApiClient
    jobs_ns_admin: client.ApiClient


GUARD_NS_ADMIN = "alice-guard-ns-admin"
JOBS_NS_ADMIN = "bob-jobs-ns-admin"


@pytest.fixture(scope="session")
def identities(deployed: ControlPlane, admin: client.ApiClient) -> Iterator[Identities]:
    for user, ns in ((GUARD_NS_ADMIN, GUARD_NS), (JOBS_NS_ADMIN, JOBS_NS)):
        bind_admin(admin, user, ns)
    with deployed.impersonating(GUARD_NS_ADMIN) as alice:
        _wait_until_allowed(lambda: client.CoreV1Api(alice).list_namespaced_pod(GUARD_NS))
        request = {"spec": {"expirationSeconds": 3600}}
        token = client.CoreV1Api(alice).create_namespaced_service_account_token(
            "gpu-node-guard", GUARD_NS, request
        )
    path = deployed.workdir / "kubeconfig-minted-guard"
    write_kubeconfig(path, deployed.url, deployed.ca_file, token.status.token)
    with (
        config.new_client_from_config(config_file=str(path)) as guard_api,
        deployed.impersonating(GUARD_NS_ADMIN) as alice,
        deployed.impersonating(JOBS_NS_ADMIN) as bob,
    ):
        _wait_until_allowed(lambda: client.CoreV1Api(bob).list_namespaced_pod(JOBS_NS))
        yield Identities(guard_api, alice, bob)


def _wait_until_allowed(call: Callable[[], object]) -> None:
    deadline = time.monotonic() + _ENFORCE_TIMEOUT_S
    while not succeeds(call):  # a new RoleBinding reaches the authorizer by informer
        if time.monotonic() > deadline:
            raise RuntimeError("RoleBinding not in effect")
        time.sleep(0.1)


@pytest.fixture
def guard(deployed: ControlPlane) -> Iterator[client.ApiClient]:
    """The admin's client impersonating the guard's ServiceAccount."""
    with deployed.impersonating(GUARD_USER) as api:
        yield api


@pytest.fixture(scope="module")
def guard_kubeconfig(deployed: ControlPlane) -> Path:
    """A kubeconfig with a token of the guard's own ServiceAccount, as the CronJob runs."""
    return deployed.service_account_kubeconfig(GUARD_NS, "gpu-node-guard")


@pytest.fixture
def core(admin: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(admin)


@pytest.fixture
def gpu_node(admin: client.ApiClient) -> Iterator[Callable[..., str]]:
    """Create named GPU nodes as `guard_run.make_gpu_node` does (Ready, `allocatable` of 8 GPUs,
    cordoned when annotated). Afterwards each node is deleted and the guard's Jobs, ledger and
    Events are forgotten, so the next test starts clean."""
    core, made = client.CoreV1Api(admin), []

    def make(name: str, **kw: Any) -> str:
        made.append(make_gpu_node(core, name, **kw))
        return name

    yield make
    for name in made:
        core.delete_collection_namespaced_pod(  # the Pods a test made for its Jobs (`finish`)
            JOBS_NS, label_selector=f"{KEYS.node_label}={node_label(name)}", grace_period_seconds=0
        )
        core.delete_node(name)
    forget_guard_state(core, admin)


@pytest.fixture
def namespace(admin: client.ApiClient) -> Iterator[str]:
    """A unique namespace; deleted afterwards (it stays Terminating: no namespace controller)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def make_node(admin: client.ApiClient) -> Iterator[Callable[..., str]]:
    """Create GPU nodes by hand (no kubelet): the GPU-node label and `gpus` of nvidia.com/gpu
    capacity (0: a CPU node). Afterwards each node is deleted, with the guard Jobs and Pods made
    for it, so later tests (and the guard's own snapshots) start from a clean namespace."""
    core, batch, made = client.CoreV1Api(admin), client.BatchV1Api(admin), []

    def make(
        *,
        unschedulable: bool = False,
        annotations: dict[str, str] | None = None,
        gpus: int = 8,
        labels: dict[str, str] | None = None,
    ) -> str:
        name = f"gpu-{uuid.uuid4().hex[:10]}"
        default_labels = {"nvidia.com/gpu.present": "true"} if gpus else {}
        body = {
            "metadata": {
                "name": name,
                "labels": default_labels if labels is None else labels,
                "annotations": annotations or {},
            },
            "spec": {"unschedulable": unschedulable},
        }
        core.create_node(body)
        made.append(name)
        if gpus:
            status = {
                "capacity": {"nvidia.com/gpu": str(gpus)},
                "allocatable": {"nvidia.com/gpu": str(gpus)},
            }
            core.patch_node_status(name, {"status": status}, _content_type=MERGE_PATCH)
        return name

    yield make
    for name in made:
        selector = f"gpu-node-guard.io/node={node_label(name)}"
        batch.delete_collection_namespaced_job(JOBS_NS, label_selector=selector)
        core.delete_collection_namespaced_pod(JOBS_NS, label_selector=selector)
        core.delete_node(name)


def refused_by(policy: str, call: Callable[[], object]) -> bool:
    """True when `call` is denied by `policy` with its own messageExpression (params found)."""
    try:
        call()
    except ApiException as exc:
        status, message = api_error(exc)
        return status == 422 and f"'{policy}'" in message and "refused" in message
    return False


def succeeds(call: Callable[[], object]) -> bool:
    try:
        call()
    except ApiException:
        return False
    return True


def wait_for_enforcement(plane: ControlPlane, admin: client.ApiClient) -> None:
    """Policies and RBAC take effect asynchronously (informers): poll server-side dry-run probes
    until each is answered as it will be in the tests, as upstream's tests do (k/k PR #134921)."""
    core = client.CoreV1Api(admin)
    probe_node = f"policy-probe-{uuid.uuid4().hex[:8]}"
    hold = {"gpu-node-guard.io/hold": "probe"}
    core.create_node(
        {"metadata": {"name": probe_node, "annotations": hold}, "spec": {"unschedulable": True}}
    )
    with (
        plane.impersonating(GUARD_USER) as guard_api,
        plane.impersonating(JOB_CONTROLLER) as controller,
        plane.impersonating(DAEMONSET_CONTROLLER) as ds_controller,
    ):
        probes = _probes(admin, guard_api, controller, probe_node)
        probes |= _agent_probes(admin, ds_controller)
        deadline = time.monotonic() + _ENFORCE_TIMEOUT_S
        while waiting := [name for name, probe in probes.items() if not probe()]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not enforced after {_ENFORCE_TIMEOUT_S:.0f} s: {waiting}")
            time.sleep(0.2)
    core.delete_node(probe_node)


def _probes(
    admin: client.ApiClient, guard_api: client.ApiClient, controller: client.ApiClient, node: str
) -> dict[str, Callable[[], bool]]:
    guard_core = client.CoreV1Api(guard_api)
    admin_core, dry = client.CoreV1Api(admin), "All"
    probes: dict[str, Callable[[], bool]] = {
        "rbac": lambda: succeeds(lambda: guard_core.list_node(limit=1)),
        "guard-scope": lambda: refused_by(
            "gpu-node-guard-guard-scope",
            lambda: guard_core.create_namespaced_config_map(
                GUARD_NS, {"metadata": {"name": "probe"}}, dry_run=dry
            ),
        ),
        "ledger": lambda: refused_by(
            "gpu-node-guard-ledger",
            lambda: admin_core.create_namespaced_config_map(
                GUARD_NS,
                {"metadata": {"name": "gpu-fault-ledger"}, "binaryData": {"x": "AA=="}},
                dry_run=dry,
            ),
        ),
        "hold": lambda: refused_by(
            "gpu-node-guard-hold",
            lambda: admin_core.patch_node(
                node, {"spec": {"unschedulable": False}}, dry_run=dry, _content_type=MERGE_PATCH
            ),
        ),
        "node-scope": lambda: refused_by(
            "gpu-node-guard-node-scope",
            lambda: guard_core.patch_node(
                node,
                {"metadata": {"labels": {"probe": "x"}}},
                dry_run=dry,
                _content_type=MERGE_PATCH,
            ),
        ),
        "jobs-namespace": lambda: refused_by(
            "gpu-node-guard-jobs-namespace", lambda: create(admin, _cronjob(), dry_run=True)
        ),
    }
    for kind in ("evidence", "loadtest", "conformance", "fence"):
        probes |= _kind_probes(kind, admin, guard_api, controller, node)
    return probes


def _agent_probes(
    admin: client.ApiClient, ds_controller: client.ApiClient
) -> dict[str, Callable[[], bool]]:
    stored = client.AppsV1Api(admin).read_namespaced_daemon_set(AGENT, JOBS_NS)
    daemonset = admin.sanitize_for_serialization(stored)
    good = daemonset_pod(daemonset, "policy-probe")
    bad = daemonset_pod(daemonset, "policy-probe")
    bad["spec"]["containers"][0]["image"] = "registry.invalid/probe:0"
    bad_daemonset = {k: daemonset[k] for k in ("apiVersion", "kind", "spec")}
    bad_daemonset["metadata"] = {
        "name": AGENT,
        "namespace": JOBS_NS,
        "labels": daemonset["metadata"]["labels"],
    }
    bad_daemonset["spec"]["template"]["spec"]["hostPID"] = True
    return {
        "agent-pod accepts": lambda: succeeds(lambda: create(ds_controller, good, dry_run=True)),
        "agent-pod refuses": lambda: refused_by(
            "gpu-node-guard-agent-pod", lambda: create(ds_controller, bad, dry_run=True)
        ),
        "agent-daemonset refuses": lambda: refused_by(
            "gpu-node-guard-agent-daemonset", lambda: create(admin, bad_daemonset, dry_run=True)
        ),
    }


def _cronjob() -> dict[str, Any]:
    job = guard_job("evidence", "probe", "cron")
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "probe", "namespace": JOBS_NS},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": job["spec"]}},
    }


def _kind_probes(
    kind: str,
    admin: client.ApiClient,
    guard_api: client.ApiClient,
    controller: client.ApiClient,
    node: str,
) -> dict[str, Callable[[], bool]]:
    good = guard_job(kind, node, "probe")  # type: ignore[arg-type]
    bad = guard_job(kind, node, "probe-bad")  # type: ignore[arg-type]
    bad["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/probe:0"

    def bad_pod() -> object:
        stored = as_dict(create(guard_api, good, dry_run=True))  # the fence: the guard's only
        pod = controller_pod(stored)
        pod["spec"]["containers"][0]["image"] = "registry.invalid/probe:0"
        return create(controller, pod, dry_run=True)

    return {
        f"{kind}-job accepts": lambda: succeeds(lambda: create(guard_api, good, dry_run=True)),
        f"{kind}-job refuses": lambda: refused_by(
            f"gpu-node-guard-{kind}-job", lambda: create(guard_api, bad, dry_run=True)
        ),
        f"{kind}-pod refuses": lambda: refused_by(f"gpu-node-guard-{kind}-pod", bad_pod),
    }
