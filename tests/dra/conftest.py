"""The DRA tier: a real v1.37 control plane that allocates ResourceClaims.

etcd, kube-apiserver, kube-scheduler (its DynamicResources plugin allocates claims and honours
DeviceTaintRules) and kube-controller-manager (the ResourceClaim and device-taint-eviction
controllers) of ``DRA_ENVTEST_VERSION`` (`make envtest-dra`); no kubelet: Nodes are objects
and ResourceSlices are published as NVIDIA's DRA driver publishes them. The binaries come from
``DRA_ASSETS`` or the cache ``hack/envtest/build.sh`` fills; without them the tier is skipped
(a failure under CI=true).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.apiserver.deploy import BASE
from tests.apiserver.kube import (
    GUARD_NS,
    GUARD_USER,
    JOBS_NS,
    ControlPlane,
    control_plane,
    create,
    create_all,
    process,
    wait_until,
    yaml_documents,
)
from tests.tiers import unavailable

DRA_ENVTEST_VERSION = "v1.37.2"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
HOW = "run `make envtest-dra` (or set DRA_ASSETS)"
POLICIES = Path(__file__).resolve().parents[2] / "policies"


def dra_assets(env: dict[str, str] | os._Environ[str]) -> Path | None:
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    version = env.get("DRA_ENVTEST_VERSION", DRA_ENVTEST_VERSION)
    for candidate in (env.get("DRA_ASSETS", ""), f"{cache}/gpu-node-guard/envtest/{version}"):
        path = Path(candidate) if candidate else None
        if path and all(os.access(path / b, os.X_OK) for b in BINARIES):
            return path
    return None


def _scheduler_ready(plane: ControlPlane) -> bool:
    """The scheduler has registered: it holds no lease (leader election off), so ask for its
    first binding's precondition, a readable list of nodes, through its own log instead."""
    log = plane.workdir / "kube-scheduler.log"
    return log.exists() and "Starting Kubernetes Scheduler" in log.read_text(errors="replace")


@pytest.fixture(scope="session")
def dra_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = dra_assets(os.environ)
    if assets is None:
        unavailable("dra", f"{', '.join(BINARIES)} of {DRA_ENVTEST_VERSION} not found", HOW)
        raise AssertionError("unreachable")
    workdir = tmp_path_factory.mktemp("dra-plane")
    with ExitStack() as stack:
        # 1.37 refuses a loopback advertise address to its endpoint reconciler; nothing here
        # reaches the API server through the `kubernetes` Service.
        plane = stack.enter_context(
            control_plane(assets, workdir, extra=("--endpoint-reconciler-type=none",))
        )
        log = workdir / "kube-scheduler.log"
        argv = [
            str(assets / "kube-scheduler"),
            f"--kubeconfig={plane.kubeconfig}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--v=2",
        ]
        scheduler = stack.enter_context(process(argv, log))
        wait_until(lambda: _scheduler_ready(plane), scheduler, log)
        log = workdir / "kube-controller-manager.log"
        argv = [
            str(assets / "kube-controller-manager"),
            f"--kubeconfig={plane.kubeconfig}",
            "--controllers=resourceclaim-controller,device-taint-eviction-controller",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ]
        stack.enter_context(process(argv, log))
        with plane.admin_client() as api:
            _create_device_class(api)
            _deploy_guard(api)
        yield plane


GUARD_RULE_PROBE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "probe-not-the-guards"},
    "spec": {
        "deviceSelector": {"driver": "gpu.nvidia.com"},
        "taint": {"key": "gpu-node-guard.io/fault", "value": "xid-79", "effect": "NoExecute"},
    },
}


SETTINGS = "gpu-node-guard-settings"
JOB_POLICIES = ("job-loadtest.yaml", "jobs-namespace.yaml")
LOADTEST_PROBE = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "probe-not-the-guards",
        "namespace": JOBS_NS,
        "labels": {"app.kubernetes.io/component": "loadtest"},
    },
    "spec": {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}
        }
    },
}


def _deploy_guard(api: client.ApiClient) -> None:
    """The guard's namespaces, ServiceAccount, RBAC (manifests/base/rbac.yaml) and its DRA
    policies (policies/device-taints.yaml), enforced once the probe is refused."""
    core = client.CoreV1Api(api)
    for ns in (GUARD_NS, JOBS_NS, "work"):
        core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(GUARD_NS, {"metadata": {"name": "gpu-node-guard"}})
    create_all(api, yaml_documents(BASE / "rbac.yaml"))
    create_all(api, yaml_documents(POLICIES / "device-taints.yaml"))
    # The load-test Job and Pod policies and the jobs-namespace gate, with the settings
    # ConfigMap they read their params from (the defaults: no key set), as tests/apiserver
    # deploys them: the device load test's Job and Pod must pass them here.
    core.create_namespaced_config_map(GUARD_NS, {"metadata": {"name": SETTINGS}})
    for name in JOB_POLICIES:
        create_all(api, yaml_documents(POLICIES / name))
    guard = client.ApiClient(api.configuration)
    guard.set_default_header("Impersonate-User", GUARD_USER)

    def refused() -> bool:
        try:
            create(guard, GUARD_RULE_PROBE, dry_run=True)
        except ApiException as exc:
            return exc.status == 422
        return False

    def job_refused() -> bool:
        try:
            create(api, LOADTEST_PROBE, dry_run=True)
        except ApiException as exc:
            return exc.status == 422
        return False

    deadline = time.monotonic() + 60
    while not (refused() and job_refused()):
        if time.monotonic() > deadline:
            raise RuntimeError("the policies never took effect")
        time.sleep(0.2)


def _create_device_class(api: client.ApiClient) -> None:
    """NVIDIA's DeviceClass for whole GPUs (the driver's Helm chart ships it)."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": (
                            "device.driver == 'gpu.nvidia.com' && "
                            "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                        )
                    }
                }
            ]
        },
    }
    client.CustomObjectsApi(api).create_cluster_custom_object(
        "resource.k8s.io", "v1", "deviceclasses", body
    )
