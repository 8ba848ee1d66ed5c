"""Filling a large API server fast: objects put straight into its etcd.

Creating 20,000 Nodes and 100,000 Pods through the API server took 25 minutes on 2 cores
(admission, validation, managed fields, and a second write per Pod for its status); 50,000 would
take an hour. The bench needs the objects stored, not admitted. So the first object of each shape
goes through the API (POST, and the status subresource for a Pod), and every other object of that
shape is put into etcd under the key the API server reads (`/registry/minions/<name>`,
`/registry/pods/<namespace>/<name>`), as JSON, which the API server's storage decodes beside
protobuf, with every field the admitted one gained (defaults, admission's additions, managed
fields), so a listed object is as large as an admitted one (tests/apiserver/test_bench_fill.py
compares the two). The API server's watch cache sees every put; `wait_listed` waits until a
list counts them all.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import requests

# Inside etcd's defaults: 128 operations and 1.5 MiB per request.
BATCH_OPS = 100
BATCH_BYTES = 1_000_000
WORKERS = 4
LISTED_TIMEOUT_S = 900
# Room for 50,000 Nodes and 250,000 Pods with their managed fields (~3 GB); etcd's default is 2 GiB.
ETCD_FLAGS = ("--quota-backend-bytes=8589934592",)
# At 50,000 nodes the API server grew to 16 GB of the bench machine's 23 and starved Prometheus
# beside it (one query got no answer in 260 s). Two things keep it smaller (10,000 nodes: 2.96 GB
# → 2.20 → 1.74): no watch cache of Pods — the guard lists Pods only in its jobs namespace,
# which etcd answers as a small key range; Nodes keep their cache, as in every cluster — and a
# Go collector that runs at half the usual heap growth (GOGC 50) in etcd and the API server.
APISERVER_FLAGS = ("--watch-cache-sizes=pods#0",)
GOGC = "50"


@contextmanager
def go_gc(percent: str) -> Iterator[None]:
    """GOGC for the processes started inside (the control plane inherits the environment)."""
    before = os.environ.get("GOGC")
    os.environ["GOGC"] = percent
    try:
        yield
    finally:
        if before is None:
            del os.environ["GOGC"]
        else:
            os.environ["GOGC"] = before


Admit = Callable[[dict[str, Any]], dict[str, Any]]  # create through the API, return it as stored


def key_of(obj: dict[str, Any]) -> str:
    """The etcd key the API server stores `obj` under (its default `/registry` prefix).

    >>> key_of({"kind": "Node", "metadata": {"name": "gpu-00001"}})
    '/registry/minions/gpu-00001'
    >>> key_of({"kind": "Pod", "metadata": {"name": "p", "namespace": "research"}})
    '/registry/pods/research/p'
    """
    meta = obj["metadata"]
    if obj["kind"] == "Node":
        return f"/registry/minions/{meta['name']}"
    if obj["kind"] == "Pod":
        return f"/registry/pods/{meta['namespace']}/{meta['name']}"
    raise ValueError(f"no etcd key known for kind {obj['kind']}")


def stored_like(obj: dict[str, Any], admitted: dict[str, Any]) -> dict[str, Any]:
    """`obj` with what the API server added to `admitted`, an object of the same shape:
    defaults, admission's additions (a Pod's default tolerations), managed fields, generation.

    >>> admitted = {"metadata": {"name": "a", "resourceVersion": "7", "generation": 1},
    ...             "spec": {"tolerations": [{"key": "x"}, {"key": "unreachable"}]}}
    >>> put = {"metadata": {"name": "b"}, "spec": {"tolerations": [{"key": "x"}]}}
    >>> stored = stored_like(put, admitted)
    >>> stored["metadata"], [t["key"] for t in stored["spec"]["tolerations"]]
    ({'name': 'b', 'generation': 1}, ['x', 'unreachable'])
    """
    merged = _with_missing(obj, admitted)
    merged["metadata"].pop("resourceVersion", None)  # etcd's revision is the version
    return merged


def _with_missing(ours: Any, theirs: Any) -> Any:
    """`ours`, plus every key and trailing list item `theirs` has and `ours` lacks."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return {
            **{k: _with_missing(v, theirs[k]) if k in theirs else v for k, v in ours.items()},
            **{k: v for k, v in theirs.items() if k not in ours},
        }
    if isinstance(ours, list) and isinstance(theirs, list):
        return [_with_missing(a, b) for a, b in zip(ours, theirs, strict=False)] + [
            *ours[len(theirs) :],
            *theirs[len(ours) :],
        ]
    return ours


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def _batches(objs: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """etcd txn operations, at most BATCH_OPS and about BATCH_BYTES per request."""
    batch: list[dict[str, Any]] = []
    size = 0
    for obj in objs:
        value = json.dumps(obj, separators=(",", ":"))
        batch.append({"requestPut": {"key": _b64(key_of(obj)), "value": _b64(value)}})
        size += len(value)
        if len(batch) >= BATCH_OPS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def put_all(etcd_url: str, objs: Iterator[dict[str, Any]]) -> int:
    """Every object into etcd from WORKERS threads; returns how many."""
    lock, source = threading.Lock(), _batches(objs)
    counted = [0]

    def worker() -> None:
        http = requests.Session()
        http.trust_env = False
        while True:
            with lock:
                batch = next(source, None)
            if batch is None:
                return
            response = http.post(f"{etcd_url}/v3/kv/txn", json={"success": batch}, timeout=120)
            if response.status_code != 200 or "error" in response.json():
                raise RuntimeError(f"etcd txn: HTTP {response.status_code} {response.text[:300]}")
            with lock:
                counted[0] += len(batch)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(worker) for _ in range(WORKERS)]:
            future.result()
    return counted[0]


def fill(
    etcd_url: str,
    objs: Iterable[dict[str, Any]],
    shape: Callable[[dict[str, Any]], Hashable | None],
    admit: Admit,
) -> tuple[int, int]:
    """Each object whose `shape` is None, and the first of every other shape, through `admit`;
    the rest into etcd like its shape's admitted one. Returns (admitted, put)."""
    admitted: dict[Hashable, dict[str, Any]] = {}
    through_api = [0]

    def seeded() -> Iterator[dict[str, Any]]:
        for obj in objs:
            key = shape(obj)
            if key is not None and key in admitted:
                yield stored_like(obj, admitted[key])
                continue
            stored = admit(obj)
            through_api[0] += 1
            if key is not None:
                admitted[key] = stored

    put = put_all(etcd_url, seeded())
    return through_api[0], put


def listed(session: requests.Session, url: str) -> int:
    """How many objects a list at `url` holds (one item and the API server's remaining count)."""
    response = session.get(url, params={"limit": 1}, timeout=60)
    response.raise_for_status()
    body = response.json()
    return len(body.get("items") or []) + int(body["metadata"].get("remainingItemCount") or 0)


def wait_listed(session: requests.Session, url: str, want: int) -> float:
    """Seconds until a list at `url` counts `want` objects; RuntimeError past LISTED_TIMEOUT_S."""
    started = time.monotonic()
    while (have := listed(session, url)) < want:
        if time.monotonic() - started > LISTED_TIMEOUT_S:
            raise RuntimeError(f"{url} lists {have} of {want} after {LISTED_TIMEOUT_S}s")
        time.sleep(1)
    return time.monotonic() - started
