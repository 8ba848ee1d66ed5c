"""API mode: the same synthetic cluster in a real kube-apiserver + etcd (the apiserver test tier).

The control plane comes from `tests.apiserver.kube` (binaries from ``KUBEBUILDER_ASSETS`` or the
cache ``make envtest`` fills). Nodes are created with their status (as kubelet registers them);
Pods are created, then their status is set to Running through the status subresource. Every
Node with a role and the first object of each other shape go through the API; the rest are put
into etcd like it (bench/etcdfill.py): 50,000 nodes fill in minutes, not an hour. Without the
binaries this mode is skipped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from bench import etcdfill
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
    with (
        etcdfill.go_gc(etcdfill.GOGC),
        control_plane(
            assets, workdir, extra=etcdfill.APISERVER_FLAGS, etcd_extra=etcdfill.ETCD_FLAGS
        ) as plane,
    ):
        started = time.monotonic()
        _fill(plane.url, plane.etcd_url, ADMIN_TOKEN, str(plane.ca_file), spec, s)
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


def _fill(
    server: str, etcd_url: str, token: str, ca_file: str, spec: ClusterSpec, s: Settings
) -> None:
    session = _session(token, ca_file)
    for namespace in {*(ns for ns, _, _ in DAEMONSETS), "research", s.namespace} - {"kube-system"}:
        _post(session, f"{server}/api/v1/namespaces", {"metadata": {"name": namespace}})
    ledger = ledger_configmap(spec, s)
    ledger["metadata"].pop("resourceVersion")
    _post(session, f"{server}/api/v1/namespaces/{s.namespace}/configmaps", ledger)
    roles = spec.roles()

    def node_shape(node: dict[str, Any]) -> str | None:
        return None if node["metadata"]["name"] in roles else "plain"

    def pod_shape(pod: dict[str, Any]) -> tuple[str, str]:
        meta = pod["metadata"]
        return meta["namespace"], meta["ownerReferences"][0]["name"]

    etcdfill.fill(etcd_url, nodes(spec, s), node_shape, lambda n: _create_node(session, server, n))
    etcdfill.fill(
        etcd_url, pods(spec), pod_shape, lambda p: _create_running_pod(session, server, p)
    )
    etcdfill.wait_listed(session, f"{server}/api/v1/nodes", spec.nodes)
    etcdfill.wait_listed(session, f"{server}/api/v1/pods", sum(1 for _ in pods(spec)))


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


def _create_node(session: requests.Session, server: str, node: dict[str, Any]) -> dict[str, Any]:
    node["metadata"].pop("resourceVersion", None)
    return _post(session, f"{server}/api/v1/nodes", node)


def _create_running_pod(
    session: requests.Session, server: str, pod: dict[str, Any]
) -> dict[str, Any]:
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
    stored: dict[str, Any] = response.json()
    return stored
