"""Fixtures of the node tier: one real node for the session (tests/node/node.py) with
manifests/base applied and every policy enforcing, the guard's own ServiceAccount token, and the
guard's Jobs removed after each test. Skipped with one line where it cannot run (not root, no
containerd, runc, unshare, kubelet or images), a failure under CI=true (tests/tiers.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.conftest import aggregate_cluster_roles, wait_for_enforcement
from tests.apiserver.deploy import BASE, Kubectl, kubectl_or_skip
from tests.apiserver.guard_run import KEYS, forget_guard_state
from tests.apiserver.kube import GUARD_NS, JOBS_NS, MERGE_PATCH, assets_dir
from tests.node import fake_host, host
from tests.node.jobs import MEASURED
from tests.node.node import Binaries, Node, running_node
from tests.tiers import tool, unavailable

REPO = Path(__file__).resolve().parents[2]
IMAGE_PY = REPO / "hack" / "node" / "image.py"
TIER = "node"
HOW = (
    "run `make node` as root (Debian: containerd runc containernetworking-plugins iptables "
    "mmdebstrap)"
)
NODE = "gpu-node-a"
LABELS = "nvidia.com/gpu.present=true"
GONE_TIMEOUT_S = 60.0
_timings: list[tuple[str, float]] = []


def images_dir(env: os._Environ[str] | dict[str, str]) -> Path:
    """Where hack/node/build.sh puts the images (its --print-path)."""
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(cache) / "gpu-node-guard" / "node"


def binaries_or_skip() -> Binaries:
    if os.geteuid() != 0:
        unavailable(TIER, "not root (containerd, the kubelet and their namespace need it)", HOW)
    for name in ("containerd", "runc", "ctr", "unshare", "nsenter", "ip", "mount"):
        tool(name, TIER, HOW)
    if not os.access("/usr/lib/cni/bridge", os.X_OK):
        unavailable(TIER, "no CNI plugins in /usr/lib/cni", HOW)
    assets = assets_dir(os.environ)
    wanted = ("kube-controller-manager", "kube-scheduler", "kubelet")
    if assets is None or not all(os.access(assets / b, os.X_OK) for b in wanted):
        unavailable(TIER, f"kube-apiserver, etcd or one of {', '.join(wanted)} not built", HOW)
        raise AssertionError("unreachable: unavailable() skips or fails")
    images = images_dir(os.environ)
    built = ("pause", "pause.oci.tar", "guard.oci.tar", "loadtest.oci.tar")
    if not all((images / f).is_file() for f in built):
        unavailable(TIER, f"no images in {images}", HOW)
    current = [sys.executable, str(IMAGE_PY), "current", "--repo", str(REPO), "--out", str(images)]
    if subprocess.run(current, check=False).returncode != 0:
        unavailable(TIER, "the guard's or the load test's image is older than the sources", HOW)
    return Binaries(assets, images)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A Ready node running the guard's image, its control plane with manifests/base applied and
    every policy enforcing. SIGTERM is turned into KeyboardInterrupt for the session, so that a
    stopped run still tears the node down; afterwards the machine is checked for leftovers."""
    binaries = binaries_or_skip()
    kubectl = kubectl_or_skip()
    work = tmp_path_factory.mktemp("node")
    before = signal.signal(signal.SIGTERM, _interrupt)
    saved = host.machine_state()
    try:
        host_bin = fake_host.write(work / fake_host.DIRECTORY, REPO / "tests" / "fixtures")
        with running_node(binaries, work, NODE, LABELS, host_bin) as ready:
            started = time.monotonic()
            with ready.plane.admin_client() as admin:
                aggregate_cluster_roles(admin)
                Kubectl(kubectl, ready.plane.kubeconfig).apply(BASE)
                wait_for_enforcement(ready.plane, admin)
            ready.timings["manifests applied and enforced"] = time.monotonic() - started
            yield ready
            _timings.extend(ready.timings.items())  # with what the tests added (the imports)
    finally:
        signal.signal(signal.SIGTERM, before)
        # containerd's content and snapshots (~1 GB): pytest keeps its last temp directories
        subprocess.run(["rm", "-rf", "--one-file-system", str(work / "containerd")], check=False)
        shutil.rmtree(work / "host", ignore_errors=True)
    left = host.leftovers(saved, work)
    assert not left, f"the node run left behind: {left}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for what, seconds in _timings:
        terminalreporter.write_line(f"node tier: {what} in {seconds:.1f} s")
    for job, steps in MEASURED:
        shown = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in steps.items())
        terminalreporter.write_line(f"node tier: {job}: {shown}")


@pytest.fixture(scope="session")
def guard_kubeconfig(node: Node) -> Path:
    """A kubeconfig with a real token of the guard's ServiceAccount, as the CronJob runs."""
    return node.plane.service_account_kubeconfig(GUARD_NS, "gpu-node-guard")


@pytest.fixture
def admin(node: Node) -> Iterator[client.ApiClient]:
    """The admin's client; after the test the guard's Jobs and (by the garbage collector) their
    Pods are deleted and waited for, so the next test can make a Job of the same name and the
    guard reads no Pod of an earlier one."""
    with node.plane.admin_client() as api:
        yield api
        batch = client.BatchV1Api(api)
        mine = "app.kubernetes.io/managed-by=gpu-node-guard"
        batch.delete_collection_namespaced_job(
            JOBS_NS, label_selector=mine, propagation_policy="Background"
        )
        core, jobs_pods = client.CoreV1Api(api), "job-name,app.kubernetes.io/name=gpu-node-guard"
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while (
            batch.list_namespaced_job(JOBS_NS, label_selector=mine).items
            or core.list_namespaced_pod(JOBS_NS, label_selector=jobs_pods).items
        ):
            assert time.monotonic() < deadline, "the guard's Jobs and their Pods were not deleted"
            time.sleep(0.2)


@pytest.fixture
def gpu_node(node: Node, admin: client.ApiClient) -> Iterator[str]:
    """The node with 8 GPUs of capacity and allocatable (an extended resource the kubelet keeps
    as patched); afterwards uncordoned, without the guard's annotations, the guard's state
    forgotten. Allocatable is patched too: the kubelet copies capacity to it only at its next
    status sync (up to 10 s later), and a return cycle before that reads a GPU-count drop."""
    core = client.CoreV1Api(admin)
    eight = {"nvidia.com/gpu": "8"}
    gpus = {"status": {"capacity": eight, "allocatable": eight}}
    core.patch_node_status(node.name, gpus, _content_type=MERGE_PATCH)
    try:
        yield node.name
    finally:
        notes = core.read_node(node.name).metadata.annotations or {}
        keys = {k: None for k in notes if k.startswith(KEYS.prefix)}
        body = {"metadata": {"annotations": keys}, "spec": {"unschedulable": None}}
        core.patch_node(node.name, body, _content_type=MERGE_PATCH)
        core.patch_node_status(
            node.name,
            {
                "status": {
                    "capacity": {"nvidia.com/gpu": None},
                    "allocatable": {"nvidia.com/gpu": None},
                }
            },
            _content_type=MERGE_PATCH,
        )
        forget_guard_state(core, admin)
