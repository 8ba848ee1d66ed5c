"""Fixtures of the apiserver tier: one etcd + kube-apiserver per session, deployed manifests and
policies, and a fresh namespace per test."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.apiserver.kube import (
    GUARD_USER,
    HOW_TO_ENABLE,
    MERGE_PATCH,
    ControlPlane,
    api_error,
    assets_dir,
    control_plane,
    create,
    create_all,
    directory_documents,
    guard_job,
    kustomize_documents,
)
from tests.tiers import unavailable

REPO = Path(__file__).resolve().parents[2]
_ENFORCE_TIMEOUT_S = 60.0
_started_in_s: list[float] = []


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver on loopback for the whole session; stopped at the end."""
    assets = assets_dir(os.environ)
    if assets is None:
        unavailable("apiserver", "kube-apiserver and etcd not found", HOW_TO_ENABLE)
        raise AssertionError("unreachable: unavailable() skips or fails")
    with control_plane(assets, tmp_path_factory.mktemp("apiserver")) as plane:
        _started_in_s.append(plane.started_in_s)
        yield plane


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for seconds in _started_in_s:
        terminalreporter.write_line(
            f"apiserver tier: etcd + kube-apiserver ready in {seconds:.1f} s"
        )


@pytest.fixture(scope="session")
def admin(apiserver: ControlPlane) -> Iterator[client.ApiClient]:
    with apiserver.admin_client() as api:
        yield api


@pytest.fixture(scope="session")
def deployed(apiserver: ControlPlane, admin: client.ApiClient) -> ControlPlane:
    """manifests/ and policies/ applied, and every policy enforcing."""
    create_all(admin, kustomize_documents(REPO / "manifests"))
    create_all(admin, directory_documents(REPO / "policies"))
    wait_for_enforcement(apiserver, admin)
    return apiserver


@pytest.fixture
def guard(deployed: ControlPlane) -> Iterator[client.ApiClient]:
    """The admin's client impersonating the guard's ServiceAccount."""
    with deployed.impersonating(GUARD_USER) as api:
        yield api


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
    """Create nodes by hand (no kubelet). Afterwards each node is deleted, with the guard Jobs
    made for it, so later tests (and the guard's own snapshots) start from a clean namespace."""
    core, batch, made = client.CoreV1Api(admin), client.BatchV1Api(admin), []

    def make(*, unschedulable: bool = False, annotations: dict[str, str] | None = None) -> str:
        name = f"gpu-{uuid.uuid4().hex[:10]}"
        body = {
            "metadata": {
                "name": name,
                "labels": {"nvidia.com/gpu.present": "true"},
                "annotations": annotations or {},
            },
            "spec": {"unschedulable": unschedulable},
        }
        core.create_node(body)
        made.append(name)
        return name

    yield make
    for name in made:
        selector = f"gpu-node-guard.io/node={name}"
        batch.delete_collection_namespaced_job("gpu-node-guard", label_selector=selector)
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
    with plane.impersonating(GUARD_USER) as guard_api:
        probes = _probes(admin, guard_api, probe_node)
        deadline = time.monotonic() + _ENFORCE_TIMEOUT_S
        while waiting := [name for name, probe in probes.items() if not probe()]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not enforced after {_ENFORCE_TIMEOUT_S:.0f} s: {waiting}")
            time.sleep(0.2)
    core.delete_node(probe_node)


def _probes(
    admin: client.ApiClient, guard_api: client.ApiClient, node: str
) -> dict[str, Callable[[], bool]]:
    guard_core = client.CoreV1Api(guard_api)
    admin_core, ns, dry = client.CoreV1Api(admin), "gpu-node-guard", "All"
    good_job = guard_job("evidence", node, "probe")
    bad_job = guard_job("evidence", node, "probe-bad")
    bad_job["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/probe:0"
    cordon_off = {"spec": {"unschedulable": False}}
    relabel = {"metadata": {"labels": {"probe": "x"}}}
    return {
        "rbac": lambda: succeeds(lambda: guard_core.list_node(limit=1)),
        "job-shape accepts": lambda: succeeds(lambda: create(guard_api, good_job, dry_run=True)),
        "job-shape refuses": lambda: refused_by(
            "gpu-node-guard-job-shape", lambda: create(guard_api, bad_job, dry_run=True)
        ),
        "configmaps": lambda: refused_by(
            "gpu-node-guard-configmaps",
            lambda: guard_core.create_namespaced_config_map(
                ns, {"metadata": {"name": "probe"}}, dry_run=dry
            ),
        ),
        "hold": lambda: refused_by(
            "gpu-node-guard-hold",
            lambda: admin_core.patch_node(node, cordon_off, dry_run=dry, _content_type=MERGE_PATCH),
        ),
        "node-scope": lambda: refused_by(
            "gpu-node-guard-node-scope",
            lambda: guard_core.patch_node(node, relabel, dry_run=dry, _content_type=MERGE_PATCH),
        ),
    }
