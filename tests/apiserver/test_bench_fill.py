"""The bench's fast fill (bench/etcdfill.py) on a real kube-apiserver + etcd: objects put into
etcd list like the ones admitted through the API, so API-mode figures at 50,000 nodes mean what
they meant when every object was POSTed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from bench import apimode
from bench.cluster import pods
from bench.synthetic import ClusterSpec
from guard.settings import Settings
from tests.apiserver.kube import required_assets

pytestmark = pytest.mark.apiserver

NODES = 30


def _paths(obj: Any, at: str = "") -> set[str]:
    """Every field path in `obj` (list items by position)."""
    if isinstance(obj, dict):
        return {at} | {p for k, v in obj.items() for p in _paths(v, f"{at}.{k}")}
    if isinstance(obj, list):
        return {at} | {p for i, v in enumerate(obj) for p in _paths(v, f"{at}[{i}]")}
    return {at}


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    required_assets()
    spec = ClusterSpec(NODES)
    workdir = tmp_path_factory.mktemp("bench-fill")
    with apimode.api_cluster(spec, Settings(), workdir, "http://127.0.0.1:9") as (target, _):
        args = dict(zip(target.floor_source[::2], target.floor_source[1::2], strict=True))
        http = requests.Session()
        http.trust_env = False
        http.headers["Authorization"] = f"Bearer {Path(args['--token-file']).read_text()}"
        http.verify = args["--ca-file"]
        return {
            kind: http.get(f"{args['--api-server']}/api/v1/{kind}", timeout=30).json()["items"]
            for kind in ("nodes", "pods")
        }


def test_every_object_is_listed(listed: dict[str, list[dict[str, Any]]]) -> None:
    assert len(listed["nodes"]) == NODES
    assert len(listed["pods"]) == sum(1 for _ in pods(ClusterSpec(NODES)))


def test_a_put_pod_lists_like_its_admitted_twin(listed: dict[str, list[dict[str, Any]]]) -> None:
    """Per DaemonSet and the training StatefulSet: the first Pod went through the API, the rest
    into etcd; all carry the same fields, managed fields and generation, and differ in size only
    by their names and ids."""
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for pod in listed["pods"]:
        by_owner.setdefault(pod["metadata"]["ownerReferences"][0]["name"], []).append(pod)
    assert len(by_owner) == 5
    for owner, group in by_owner.items():
        admitted, *put = sorted(group, key=lambda p: int(p["metadata"]["resourceVersion"]))
        assert put, owner
        for pod in put:
            meta = pod["metadata"]
            assert meta["managedFields"] == admitted["metadata"]["managedFields"], owner
            assert meta.get("generation") == admitted["metadata"].get("generation"), owner
            assert _paths(pod) == _paths(admitted), (owner, meta["name"])
            assert pod["status"]["phase"] == "Running"
            size, twin = len(json.dumps(pod)), len(json.dumps(admitted))
            assert abs(size - twin) < 200, (owner, size, twin)


def test_a_put_node_carries_the_admitted_nodes_managed_fields(
    listed: dict[str, list[dict[str, Any]]],
) -> None:
    roles = ClusterSpec(NODES).roles()
    plain = sorted(
        (n for n in listed["nodes"] if n["metadata"]["name"] not in roles),
        key=lambda n: int(n["metadata"]["resourceVersion"]),
    )
    admitted, *put = plain
    assert len(put) == NODES - len(roles) - 1
    for node in put:
        assert node["metadata"]["managedFields"] == admitted["metadata"]["managedFields"]
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["uid"] and node["metadata"]["creationTimestamp"]
