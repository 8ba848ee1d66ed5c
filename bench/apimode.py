"""API mode: the same synthetic cluster in a real kube-apiserver + etcd (the apiserver test tier).

The control plane comes from `tests.apiserver.kube` (binaries from ``KUBEBUILDER_ASSETS`` or the
cache ``make envtest`` fills). Nodes are created with their status (as kubelet registers them);
Pods are created, then their status is set to Running through the status subresource, so the
guard's ``status.phase=Running`` list sees them. Without the binaries this mode is skipped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from bench.cluster import ledger_configmap, nodes, pods
from bench.cycle import Target
from bench.objects import DAEMONSETS
from bench.synthetic import ClusterSpec
from guard.settings import Settings

WORKERS = 8
HOW_TO_ENABLE = "run `make envtest` (or set KUBEBUILDER_ASSETS)"


def unavailable() -> str:
    """Why API mode cannot run here; empty when it can."""
    try:
        from tests.apiserver.kube import assets_dir
    except ImportError as exc:
        return f"tests.apiserver.kube not importable ({exc})"
    if assets_dir(os.environ) is None:
        return f"kube-apiserver and etcd not found; {HOW_TO_ENABLE}"
    return ""


@contextmanager
def api_cluster(
    spec: ClusterSpec, s: Settings, workdir: Path, prometheus_url: str
) -> Iterator[tuple[Target, float]]:
    """A fresh control plane holding the cluster; yields the API-mode target and fill seconds."""
    from tests.apiserver.kube import ADMIN_TOKEN, assets_dir, control_plane

    assets = assets_dir(os.environ)
    assert assets is not None, unavailable()
    workdir.mkdir(parents=True, exist_ok=True)
    with control_plane(assets, workdir) as plane:
        started = time.monotonic()
        _fill(plane.url, ADMIN_TOKEN, str(plane.ca_file), spec, s)
        filled_s = time.monotonic() - started
        token_file = workdir / "token"
        token_file.write_text(ADMIN_TOKEN)
        target = Target(
            "api",
            prometheus_url,
            spec.at,
            ("--kubeconfig", str(plane.kubeconfig)),
            (
                "--api-server",
                plane.url,
                "--token-file",
                str(token_file),
                "--ca-file",
                str(plane.ca_file),
            ),
        )
        yield target, filled_s


def _fill(server: str, token: str, ca_file: str, spec: ClusterSpec, s: Settings) -> None:
    session = _session(token, ca_file)
    for namespace in {*(ns for ns, _, _ in DAEMONSETS), "research", s.namespace} - {"kube-system"}:
        _post(session, f"{server}/api/v1/namespaces", {"metadata": {"name": namespace}})
    ledger = ledger_configmap(spec, s)
    ledger["metadata"].pop("resourceVersion")
    _post(session, f"{server}/api/v1/namespaces/{s.namespace}/configmaps", ledger)
    _parallel(token, ca_file, nodes(spec, s), lambda http, n: _create_node(http, server, n))
    _parallel(token, ca_file, pods(spec), lambda http, p: _create_running_pod(http, server, p))


def _session(token: str, ca_file: str) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.verify = ca_file
    session.trust_env = False  # REQUESTS_CA_BUNDLE would override `verify`
    return session


def _post(session: requests.Session, url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = session.post(url, json=body, timeout=60)
    if response.status_code >= 300:
        raise RuntimeError(f"POST {url}: HTTP {response.status_code} {response.text[:300]}")
    answer: dict[str, Any] = response.json()
    return answer


def _create_node(session: requests.Session, server: str, node: dict[str, Any]) -> None:
    node["metadata"].pop("resourceVersion", None)
    _post(session, f"{server}/api/v1/nodes", node)


def _create_running_pod(session: requests.Session, server: str, pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    meta.pop("resourceVersion", None)
    status = pod.pop("status")
    base = f"{server}/api/v1/namespaces/{meta['namespace']}/pods"
    _post(session, base, pod)
    response = session.patch(
        f"{base}/{meta['name']}/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=60,
    )
    if response.status_code >= 300:
        raise RuntimeError(f"status of pod {meta['name']}: HTTP {response.status_code}")


def _parallel(
    token: str,
    ca_file: str,
    items: Iterable[dict[str, Any]],
    work: Callable[[requests.Session, dict[str, Any]], None],
) -> None:
    """`work` on every item from WORKERS threads, one keep-alive session per thread. Items are
    drawn from `items` as the threads need them: 50,000 Nodes are never all built at once."""
    lock, source = threading.Lock(), iter(items)

    def worker() -> None:
        http = _session(token, ca_file)
        while True:
            with lock:
                item = next(source, None)
            if item is None:
                return
            work(http, item)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(worker) for _ in range(WORKERS)]:
            future.result()
