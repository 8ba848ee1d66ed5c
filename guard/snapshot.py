"""Read one cycle's world into a `Snapshot`: Prometheus answers plus cluster objects.

Cluster objects come from the API (`guard.kube`) or a ``kubectl get … -o yaml|json`` List file;
both arrive here as plain dicts and are converted by the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from guard import ledger_store, queries
from guard.kube import Kube
from guard.ledger import LedgerLine, parse_ledger
from guard.model import GpuPod, GpuSample, GuardEvent, PromView, Snapshot
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    GPU_RESOURCE,
    NODE_EVENT_NAMESPACE,
    Annotations,
)
from guard.objects import NamelessObject, is_guard_job, job_info, slim_node
from guard.objects import node_info as node_info  # the executor re-reads nodes with it
from guard.pci import PciAddressError, normalize_pci
from guard.prom import PromClient, PromError, Sample
from guard.settings import Settings

# How far back the loss history looks to order candidates by how long their loss has held:
# three default hold windows. Loss older than that orders by name; the cost is one step per minute.
HELD_LOOKBACK_S = 1800


class SnapshotError(Exception):
    """Cluster input the guard cannot trust (unreadable file, malformed object)."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    nodes: tuple[dict[str, Any], ...]
    pods: tuple[dict[str, Any], ...]
    jobs: tuple[dict[str, Any], ...]
    ledger: dict[str, Any] | None
    ledger_archives: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()


# ---- Prometheus -----------------------------------------------------------------------------


def read_prom(client: PromClient, s: Settings, now: datetime) -> PromView:
    """Run every query at `now`; missing inputs or a bad answer raise `PromError`."""
    for metric, promql in queries.REQUIRED_INPUTS:
        found = client.vector(f"input-{metric.split('{')[0]}", promql, now)
        if not found or found[0].value < 1:
            raise PromError(f"input metric {metric} has no series: check the exporter and scrape")
    params = queries.IsolationParams(
        s.user_code_xids, s.fast_path_xids, s.hold_window_s, s.fast_hold_window_s, s.query_step_s
    )
    gpu_labels = (queries.NODE_LABEL,)
    candidates = client.vector(
        "isolation-candidates", queries.isolation_candidates(params), now, gpu_labels
    )
    hardware = client.vector(
        "hardware-xid", queries.hardware_xid(s.user_code_xids), now, gpu_labels
    )
    remap = client.vector("row-remap", queries.row_remap_nonzero(), now, gpu_labels)
    history = client.matrix(
        "loss-history",
        queries.loss_history(s.user_code_xids, HELD_LOOKBACK_S, s.query_step_s),
        now,
        gpu_labels,
    )
    held = tuple(sorted((h.label(queries.NODE_LABEL), _held_s(h.points, now)) for h in history))
    return PromView(
        candidates=_gpu_samples(candidates),
        hardware_xids=_gpu_samples(hardware),
        row_remap=_gpu_samples(remap),
        loss_held_s=held,
    )


def _held_s(points: tuple[tuple[float, float], ...], now: datetime) -> int:
    """Seconds since the start of the trailing run of points with GPU loss > 0."""
    start = None
    for stamp, value in reversed(points):
        if value <= 0:
            break
        start = stamp
    return 0 if start is None else max(0, round(now.timestamp() - start))


def _gpu_samples(samples: Iterable[Sample]) -> tuple[GpuSample, ...]:
    out = []
    for s in samples:
        pci = s.label("pci_bus_id")
        try:
            pci = normalize_pci(pci) if pci else "unknown"
        except PciAddressError as exc:
            raise PromError(f"dcgm-exporter label pci_bus_id: {exc}") from None
        uuid = s.label("UUID") or s.label("uuid") or "unknown"
        out.append(GpuSample(s.label(queries.NODE_LABEL), s.label("gpu"), uuid, pci, int(s.value)))
    return tuple(sorted(out, key=lambda g: (g.node, g.gpu.zfill(4), g.uuid)))


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
        if not str(doc.get("kind", "")).endswith("List"):
            items.append(doc)
        elif isinstance(doc.get("items") or [], list):
            items.extend(doc.get("items") or [])
        else:
            raise SnapshotError(f"cluster snapshot {path}: `items` of a List is not a list")
    return _classify(items, s, str(path))


def _classify(items: list[dict[str, Any]], s: Settings, origin: str) -> ClusterObjects:
    by_kind: dict[str, list[dict[str, Any]]] = {
        "Node": [], "Pod": [], "Job": [], "ConfigMap": [], "Event": []
    }  # fmt: skip
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
        tuple(c for c in by_kind["ConfigMap"] if _is_archive(c, s)),
        tuple(e for e in by_kind["Event"] if _is_guard_event(e)),
    )


def build_snapshot(now: datetime, objs: ClusterObjects, prom: PromView, s: Settings) -> Snapshot:
    """Parse every object on its own: a bad value marks its object, never the whole cycle."""
    keys = Annotations(s.annotation_prefix)
    nodes, ignored = [], []
    for obj in objs.nodes:
        try:
            nodes.append(node_info(obj, keys))
        except NamelessObject as exc:
            ignored.append(str(exc))
    jobs = []
    for obj in (o for o in objs.jobs if is_guard_job(o, s.jobs_namespace)):
        try:
            jobs.append(job_info(obj, keys))
        except NamelessObject as exc:
            ignored.append(f"guard {exc}")
    try:
        pods = tuple(p for p in (gpu_pod(o, s.jobs_namespace) for o in objs.pods) if p)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SnapshotError(f"malformed cluster object: {_reason(exc)}") from None
    data = (objs.ledger or {}).get("data") or {}
    if not isinstance(data, Mapping):
        raise SnapshotError(f"ledger ConfigMap {s.ledger_configmap}: data is not a mapping")
    return Snapshot(
        now,
        tuple(sorted(nodes, key=lambda n: n.name)),
        tuple(jobs),
        pods,
        _ledger_lines(data, objs.ledger_archives),
        prom,
        guard_events(objs.events),
        tuple(ignored),
    )


def _ledger_lines(
    data: Mapping[str, object], archives: Iterable[Mapping[str, Any]]
) -> tuple[LedgerLine, ...]:
    """The ledger's lines with its archives' (oldest first, a line stored twice counted once).

    A value that is not text (only a hand-made file has one) stays one unreadable line of its key.
    """
    text = {str(k): v for k, v in data.items() if isinstance(v, str)}
    odd = {k: v for k, v in data.items() if not isinstance(v, str)}
    lines = parse_ledger(ledger_store.merged(text, archives)) + parse_ledger(odd)
    return tuple(sorted(lines, key=lambda ln: ln.node))  # stable: file order within a node


def gpu_pod(obj: Mapping[str, Any], guard_namespace: str) -> GpuPod | None:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if (obj.get("status") or {}).get("phase") != "Running" or not spec.get("nodeName"):
        return None
    if (
        meta.get("namespace") == guard_namespace
        and (meta.get("labels") or {}).get(APP_LABEL) == APP_NAME
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
    """Nodes (paginated), the guard's Jobs, the ledger, and Running pods of guard-cordoned nodes.

    Only the return check looks at pods, and only on nodes carrying the guard's reason, so pods
    are listed per such node (bounded by the breaker), never for the whole cluster.
    """
    keys = Annotations(s.annotation_prefix)
    nodes = tuple(slim_node(n, keys) for n in kube.nodes())
    reason = keys.reason
    guarded = sorted(_meta(n, "name") for n in nodes if reason in _annotations(n))
    return ClusterObjects(
        nodes=nodes,
        pods=tuple(pod for name in guarded for pod in kube.running_pods_on(name)),
        jobs=tuple(kube.jobs(s.jobs_namespace, f"{APP_LABEL}={APP_NAME}")),
        ledger=kube.configmap(s.namespace, s.ledger_configmap),
        ledger_archives=tuple(ledger_store.read_archives(kube, s.namespace, s.ledger_configmap)),
        events=tuple(kube.events(NODE_EVENT_NAMESPACE, f"{APP_LABEL}={APP_NAME}")),
    )


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


# ---- Ledger archives and the guard's own Events (written by guard.apply) --------------------


def _is_archive(cm: Mapping[str, Any], s: Settings) -> bool:
    labels = (cm.get("metadata") or {}).get("labels") or {}
    return (
        labels.get(COMPONENT_LABEL) == ledger_store.ARCHIVE_COMPONENT
        and ledger_store.archive_index(s.ledger_configmap, _meta(cm, "name")) is not None
        and _meta(cm, "namespace") in ("", s.namespace)
    )


def _is_guard_event(event: Mapping[str, Any]) -> bool:
    labels = (event.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(APP_LABEL) == APP_NAME)


def guard_events(found: Iterable[Mapping[str, Any]]) -> tuple[GuardEvent, ...]:
    """The guard's Events about nodes (events.k8s.io/v1 ``regarding`` or core ``involvedObject``).

    >>> guard_events([{"metadata": {"name": "n.gng-1"}, "reason": "GuardCordoned",
    ...                "regarding": {"kind": "Node", "name": "n"}, "series": {"count": 3}}])
    (GuardEvent(name='n.gng-1', node='n', reason='GuardCordoned', count=3),)
    """
    out = []
    for e in found:
        about = e.get("regarding") or e.get("involvedObject") or {}
        if about.get("kind") != "Node":
            continue
        count = (e.get("series") or {}).get("count") or e.get("count") or 1
        out.append(GuardEvent(_meta(e, "name"), str(about.get("name", "")),
                              str(e.get("reason", "")), int(count)))  # fmt: skip
    return tuple(sorted(out, key=lambda g: g.name))
