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
from kube import (
    GUARD_USER,
    MERGE_PATCH,
    SKIP_REASON,
    ControlPlane,
    api_error,
    assets_dir,
    control_plane,
    create_all,
    directory_documents,
    guard_job,
    kustomize_documents,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]
_ENFORCE_TIMEOUT_S = 60.0
_started_in_s: list[float] = []


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver on loopback for the whole session; stopped at the end."""
    assets = assets_dir(os.environ)
    if assets is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{SKIP_REASON.replace('skipped', 'cannot run under CI=true')}")
        pytest.skip(SKIP_REASON)
    with control_plane(assets, tmp_path_factory.mktemp("apiserver")) as plane:
        _started_in_s.append(plane.started_in_s)
        yield plane


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for seconds in _started_in_s:
        terminalreporter.write_line(f"apiserver tier: etcd + kube-apiserver ready in {seconds:.1f} s")


@pytest.fixture(scope="session")
def admin(apiserver: ControlPlane) -> Iterator[client.ApiClient]:
    with apiserver.client() as api:
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
    """Create nodes by hand (no kubelet); every node made here is deleted afterwards."""
    core, made = client.CoreV1Api(admin), []

    def make(*, unschedulable: bool = False, annotations: dict[str, str] | None = None) -> str:
        name = f"gpu-{uuid.uuid4().hex[:10]}"
        body = {
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"},
                         "annotations": annotations or {}},
            "spec": {"unschedulable": unschedulable},
        }  # fmt: skip
        core.create_node(body)
        made.append(name)
        return name

    yield make
    for name in made:
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
    core.create_node({"metadata": {"name": probe_node, "annotations": hold},
                      "spec": {"unschedulable": True}})  # fmt: skip
    with plane.impersonating(GUARD_USER) as guard_api:
        probes = _probes(admin, guard_api, probe_node)
        deadline = time.monotonic() + _ENFORCE_TIMEOUT_S
        while waiting := [name for name, probe in probes.items() if not probe()]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not enforced after {_ENFORCE_TIMEOUT_S:.0f} s: {waiting}")
            time.sleep(0.2)
    core.delete_node(probe_node)


def _probes(admin: client.ApiClient, guard_api: client.ApiClient, node: str) -> dict[str, Callable[[], bool]]:  # fmt: skip
    guard_core, guard_batch = client.CoreV1Api(guard_api), client.BatchV1Api(guard_api)
    admin_core, ns, dry = client.CoreV1Api(admin), "gpu-node-guard", "All"
    good_job = guard_job("evidence", node, "probe")
    bad_job = guard_job("evidence", node, "probe-bad")
    bad_job["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/probe:0"
    cordon_off = {"spec": {"unschedulable": False}}
    relabel = {"metadata": {"labels": {"probe": "x"}}}
    return {
        "rbac": lambda: succeeds(lambda: guard_core.list_node(limit=1)),
        "job-shape accepts": lambda: succeeds(
            lambda: guard_batch.create_namespaced_job(ns, good_job, dry_run=dry)
        ),
        "job-shape refuses": lambda: refused_by(
            "gpu-node-guard-job-shape",
            lambda: guard_batch.create_namespaced_job(ns, bad_job, dry_run=dry),
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
