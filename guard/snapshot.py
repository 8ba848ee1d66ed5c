"""Read one cycle's world into a `Snapshot`: Prometheus answers plus cluster objects.

Cluster objects come from the API (`guard.kube`) or a ``kubectl get … -o yaml|json`` List file;
both arrive here as plain dicts and are converted by the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from guard.kube import Kube
from guard.ledger import parse_ledger
from guard.model import GpuPod, JobInfo, NodeInfo, PromView, Snapshot
from guard.names import APP_LABEL, COMPONENT_LABEL, GPU_RESOURCE, Annotations
from guard.prom_view import read_prom as read_prom
from guard.queries import HELD_LOOKBACK_S as HELD_LOOKBACK_S
from guard.settings import Settings


class SnapshotError(Exception):
    """Cluster input the guard cannot trust (unreadable file, malformed object)."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    nodes: tuple[dict[str, Any], ...]
    pods: tuple[dict[str, Any], ...]
    jobs: tuple[dict[str, Any], ...]
    ledger: dict[str, Any] | None


# ---- Cluster objects ------------------------------------------------------------------------


def load_cluster_file(path: Path, s: Settings) -> ClusterObjects:
    """Read a ``kubectl get nodes,pods,jobs,configmaps -o yaml|json`` style List (or documents)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"cannot read cluster snapshot {path}: {_reason(exc)}") from None
    try:
        docs = (
            list(yaml.safe_load_all(text))
            if not text.lstrip().startswith("{")
            else [json.loads(text)]
        )
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"cluster snapshot {path} is not YAML/JSON: {_reason(exc)}") from None
    items: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise SnapshotError(f"cluster snapshot {path}: a document is not an object")
        items.extend(doc.get("items") or [] if doc.get("kind", "").endswith("List") else [doc])
    return _classify(items, s, str(path))


def _classify(items: list[dict[str, Any]], s: Settings, origin: str) -> ClusterObjects:
    by_kind: dict[str, list[dict[str, Any]]] = {"Node": [], "Pod": [], "Job": [], "ConfigMap": []}
    for item in items:
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind in by_kind:
            by_kind[kind].append(item)
    if not by_kind["Node"]:
        raise SnapshotError(f"cluster snapshot {origin} holds no Node objects")
    ledgers = [
        c
        for c in by_kind["ConfigMap"]
        if _meta(c, "name") == s.ledger_configmap and _meta(c, "namespace") in ("", s.namespace)
    ]
    return ClusterObjects(
        tuple(by_kind["Node"]),
        tuple(by_kind["Pod"]),
        tuple(by_kind["Job"]),
        ledgers[0] if ledgers else None,
    )


def build_snapshot(now: datetime, objs: ClusterObjects, prom: PromView, s: Settings) -> Snapshot:
    keys = Annotations(s.annotation_prefix)
    try:
        nodes = tuple(sorted((node_info(n, keys) for n in objs.nodes), key=lambda n: n.name))
        jobs = tuple(j for j in (job_info(o, keys, s.namespace) for o in objs.jobs) if j)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SnapshotError(f"malformed cluster object: {_reason(exc)}") from None
    data = (objs.ledger or {}).get("data") or {}
    if not isinstance(data, Mapping) or not all(isinstance(v, str) for v in data.values()):
        raise SnapshotError(f"ledger ConfigMap {s.ledger_configmap} has non-text data")
    rv = _meta(objs.ledger, "resourceVersion") if objs.ledger else ""
    # GPU pods come from kube-state-metrics through Prometheus, for the API and for a file alike.
    return Snapshot(now, nodes, jobs, prom.gpu_pods, parse_ledger(data), rv, prom)


def slim_node(obj: Mapping[str, Any], keys: Annotations) -> dict[str, Any]:
    """The few fields of a Node the guard reads; a full Node is ~10 kB, 5,000 of them ~300 MB.

    >>> slim_node({"metadata": {"name": "n", "labels": {"a": "b"}}, "status": {"images": [1]}},
    ...           Annotations("gpu-node-guard.io/"))["metadata"]
    {'name': 'n', 'resourceVersion': '', 'annotations': {}}
    """
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(keys.prefix)}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return {
        "kind": "Node",
        "metadata": {"name": meta.get("name", ""),
                     "resourceVersion": meta.get("resourceVersion", ""), "annotations": notes},
        "spec": {"unschedulable": bool((obj.get("spec") or {}).get("unschedulable", False))},
        "status": {
            "conditions": ready,
            "nodeInfo": {"bootID": (status.get("nodeInfo") or {}).get("bootID", "")},
            "capacity": {GPU_RESOURCE: (status.get("capacity") or {}).get(GPU_RESOURCE)},
            "allocatable": {GPU_RESOURCE: (status.get("allocatable") or {}).get(GPU_RESOURCE)},
        },
    }  # fmt: skip


def node_info(obj: Mapping[str, Any], keys: Annotations) -> NodeInfo:
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    own = tuple(sorted((k, str(v)) for k, v in annotations.items() if k.startswith(keys.prefix)))
    return NodeInfo(
        name=_meta(obj, "name"),
        resource_version=_meta(obj, "resourceVersion"),
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable", False)),
        ready=ready,
        boot_id=str((status.get("nodeInfo") or {}).get("bootID", "")),
        gpu_capacity=_gpus((status.get("capacity") or {}).get(GPU_RESOURCE)),
        gpu_allocatable=_gpus((status.get("allocatable") or {}).get(GPU_RESOURCE)),
        annotations=own,
    )


def job_info(obj: Mapping[str, Any], keys: Annotations, namespace: str) -> JobInfo | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(APP_LABEL) != "gpu-node-guard" or meta.get("namespace", namespace) != namespace:
        return None
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if status.get("succeeded") or conditions.get("Complete") == "True":
        state = "succeeded"
    elif status.get("failed") or conditions.get("Failed") == "True":
        state = "failed"
    else:
        state = "running"
    node = (meta.get("annotations") or {}).get(keys.node_label) or labels.get(keys.node_label, "")
    return JobInfo(meta["name"], labels.get(COMPONENT_LABEL, ""), node, state)  # type: ignore[arg-type]


def gpu_pod(obj: Mapping[str, Any], guard_namespace: str) -> GpuPod | None:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if (obj.get("status") or {}).get("phase") != "Running" or not spec.get("nodeName"):
        return None
    if (
        meta.get("namespace") == guard_namespace
        and (meta.get("labels") or {}).get(APP_LABEL) == "gpu-node-guard"
    ):
        return None  # the guard's own load test holds the GPUs on purpose
    gpus = 0
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(GPU_RESOURCE)
        gpus += _gpus(amount)
    if gpus == 0:
        return None
    return GpuPod(meta.get("namespace", ""), meta["name"], spec["nodeName"], gpus)


def _gpus(value: Any) -> int:
    return 0 if value in (None, "") else int(str(value))


def _meta(obj: Mapping[str, Any] | None, key: str) -> str:
    return str(((obj or {}).get("metadata") or {}).get(key, ""))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_cluster(kube: Kube, s: Settings) -> ClusterObjects:
    """Nodes (paginated), the guard's Jobs and the ledger. Pods are not read from the API: GPU
    pods come from kube-state-metrics (`PromView.gpu_pods`), so the guard needs no pods RBAC."""
    keys = Annotations(s.annotation_prefix)
    return ClusterObjects(
        nodes=tuple(slim_node(n, keys) for n in kube.nodes()),
        pods=(),
        jobs=tuple(kube.jobs(s.namespace, f"{APP_LABEL}=gpu-node-guard")),
        ledger=kube.configmap(s.namespace, s.ledger_configmap),
    )
