"""Read one cycle's world into a `Snapshot`: Prometheus answers plus cluster objects.

Cluster objects come from the API (`guard.kube`) or a ``kubectl get … -o yaml|json`` List file;
both arrive here as plain dicts and are converted by the same functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from guard import ledger_store, objects
from guard.files import (
    SNAPSHOT_MAX_BYTES,
    FileInputError,
    load_json,
    load_yaml_all,
    read_text_bounded,
)
from guard.job_results import FINISHED, attach, slim_pod
from guard.kube import Kube
from guard.model import GuardEvent, PromView, Snapshot
from guard.names import APP_LABEL, APP_NAME, DRA_DRIVER, NODE_EVENT_NAMESPACE, Annotations
from guard.objects import NamelessObject, is_guard_job, job_info, slim_node
from guard.objects import node_info as node_info  # the executor re-reads nodes with it
from guard.prom_view import read_prom as read_prom
from guard.prom_view import with_prom_unreadable
from guard.queries import HELD_LOOKBACK_S as HELD_LOOKBACK_S
from guard.settings import Settings


class SnapshotError(Exception):
    """Cluster input the guard cannot trust (unreadable file, malformed object)."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    nodes: tuple[dict[str, Any], ...]
    jobs: tuple[dict[str, Any], ...]
    ledger: dict[str, Any] | None
    ledger_archives: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    pods: tuple[dict[str, Any], ...] = ()  # finished Pods of the guard's Jobs (their results)
    gaps: tuple[str, ...] = ()  # what a snapshot file lacks (`snapshot_gaps`); none from the API
    # DRA (guard.objects): the GPU driver's ResourceSlices and the DeviceTaintRules.
    resource_slices: tuple[dict[str, Any], ...] = ()
    taint_rules: tuple[dict[str, Any], ...] = ()


# ---- Cluster objects ------------------------------------------------------------------------


def load_cluster_file(path: Path, s: Settings) -> ClusterObjects:
    """Read a ``kubectl get nodes,jobs,configmaps,events,pods -o yaml|json`` style List.

    Of the file's Pods only those of the guard's Jobs are read, for their results: GPU pods come
    from kube-state-metrics (`PromView.gpu_pods`).
    """
    what = "cluster snapshot"
    try:
        text = read_text_bounded(path, SNAPSHOT_MAX_BYTES, what)
        where = f"{what} {path}"
        docs = (
            load_yaml_all(text, where)
            if not text.lstrip().startswith("{")
            else [load_json(text, where)]
        )
    except FileInputError as exc:
        raise SnapshotError(str(exc)) from None
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
    objs = _classify(items, s, str(path))
    return replace(objs, gaps=snapshot_gaps(items, s))


SNAPSHOT_COMMAND = "kubectl get nodes,jobs,configmaps,events,pods -A -o yaml"


def snapshot_gaps(items: list[Any], s: Settings) -> tuple[str, ...]:
    """What a snapshot file lacks that a cluster always has: Pods at all, and any object of the
    guard's two namespaces (every namespace has its kube-root-ca.crt ConfigMap). Missing, they
    mean a `kubectl get` without `-A` or without `pods`: the report would show no incidents, or
    plan a Job that already runs, without a word."""
    kinds = {str(i.get("kind")) for i in items if isinstance(i, dict)}
    spaces = {_meta(i, "namespace") for i in items if isinstance(i, dict)}
    gaps = [] if "Pod" in kinds else ["Pods (the guard's Job results)"]
    for namespace, what in ((s.namespace, "the ledger"), (s.jobs_namespace, "the guard's Jobs")):
        if namespace not in spaces:
            gaps.append(f"anything from namespace {namespace} ({what})")
    return tuple(gaps)


def gaps_line(path: Path, gaps: tuple[str, ...]) -> str:
    """The one warning about a snapshot file that lacks what the report needs."""
    return (f"WARN cluster snapshot {path} lacks {'; '.join(gaps)}: the report may miss "
            f"incidents and Jobs; take it with `{SNAPSHOT_COMMAND} > {path.name}`")  # fmt: skip


def _classify(items: list[dict[str, Any]], s: Settings, origin: str) -> ClusterObjects:
    by_kind: dict[str, list[dict[str, Any]]] = {
        "Node": [], "Job": [], "ConfigMap": [], "Event": [], "Pod": [], "ResourceSlice": [],
        "DeviceTaintRule": [],
    }  # fmt: skip
    for item in items:
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind in by_kind:
            by_kind[kind].append(item)
    if not by_kind["Node"]:
        raise SnapshotError(f"cluster snapshot {origin} holds no Node objects")
    for kind, found in by_kind.items():
        unique(found, kind, f"cluster snapshot {origin}")
    ledgers = [
        c
        for c in by_kind["ConfigMap"]
        if _meta(c, "name") == s.ledger_configmap and _meta(c, "namespace") in ("", s.namespace)
    ]
    return ClusterObjects(
        tuple(by_kind["Node"]),
        tuple(by_kind["Job"]),
        ledgers[0] if ledgers else None,
        tuple(c for c in by_kind["ConfigMap"] if _is_archive(c, s)),
        tuple(e for e in by_kind["Event"] if _is_guard_event(e)),
        tuple(slim_pod(p) for p in by_kind["Pod"] if is_guard_job(p, s.jobs_namespace)),
        resource_slices=tuple(by_kind["ResourceSlice"]),
        taint_rules=tuple(by_kind["DeviceTaintRule"]),
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
    data = (objs.ledger or {}).get("data") or {}
    if not isinstance(data, Mapping):
        raise SnapshotError(f"ledger ConfigMap {s.ledger_configmap}: data is not a mapping")
    nodes = [with_prom_unreadable(n, prom) for n in nodes]
    return Snapshot(
        now,
        tuple(sorted(nodes, key=lambda n: n.name)),
        attach(jobs, objs.pods),
        prom.gpu_pods,  # from kube-state-metrics through Prometheus, for the API and a file alike
        ledger_store.ledger_lines(data, objs.ledger_archives),
        prom,
        guard_events(objs.events),
        tuple(ignored),
        ledger_store.size_of({str(k): v for k, v in data.items() if isinstance(v, str)}),
        objects.devices(objs.resource_slices),
        objects.taint_rules(objs.taint_rules, keys),
    )


def _meta(obj: Mapping[str, Any] | None, key: str) -> str:
    return str(((obj or {}).get("metadata") or {}).get(key, ""))


def read_cluster(kube: Kube, s: Settings) -> ClusterObjects:
    """Nodes (paginated), the guard's Jobs and their finished Pods, the ledger with its
    archives, the guard's Events.

    Pods are read only in the jobs namespace, where every Pod is the guard's own (one list,
    label- and field-selected, after the Jobs: a Job read as finished has its Pod finished too).
    GPU pods come from kube-state-metrics (`PromView.gpu_pods`): no cluster-wide pods RBAC.
    """
    keys = Annotations(s.annotation_prefix)
    mine = f"{APP_LABEL}={APP_NAME}"
    nodes = unique([slim_node(n, keys) for n in kube.nodes()], "Node", "the API server")
    return ClusterObjects(
        nodes=tuple(nodes),
        jobs=tuple(unique(kube.jobs(s.jobs_namespace, mine), "Job", "the API server")),
        ledger=kube.configmap(s.namespace, s.ledger_configmap),
        ledger_archives=tuple(ledger_store.read_archives(kube, s.namespace, s.ledger_configmap)),
        events=tuple(kube.events(NODE_EVENT_NAMESPACE, mine)),
        pods=tuple(slim_pod(p) for p in kube.pods(s.jobs_namespace, mine, FINISHED)),
        resource_slices=tuple(kube.resource_slices(DRA_DRIVER)),
        taint_rules=tuple(kube.device_taint_rules(mine)),
    )


def require_nodes(objs: ClusterObjects) -> ClusterObjects:
    """`objs` when the API listed at least one Node (`run` and `status`): with none, the
    Prometheus join would blame dcgm-exporter ("set NODE_NAME"), which is not the problem."""
    if not objs.nodes:
        raise SnapshotError(
            "the API server listed no Nodes: check the kubeconfig's cluster and that the "
            "guard may list nodes"
        )
    return objs


def unique(objs: list[dict[str, Any]], kind: str, origin: str) -> list[dict[str, Any]]:
    """`objs` when no two share a namespace/name or a uid; else SnapshotError naming them: an
    object listed twice would be planned twice (two ledger appends for one Node)."""
    seen_names: set[str] = set()
    seen_uids: set[str] = set()
    twice: list[str] = []
    for obj in objs:
        meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else {}
        if not isinstance(meta, dict):
            continue
        name = "/".join(str(meta.get(k) or "") for k in ("namespace", "name")).lstrip("/")
        uid = str(meta.get("uid") or "")
        if name and name in seen_names:
            twice.append(repr(name))
        elif uid and uid in seen_uids:
            twice.append(f"uid {uid!r}")
        seen_names.add(name)
        if uid:
            seen_uids.add(uid)
    if twice:
        shown = ", ".join(twice[:5]) + (f" and {len(twice) - 5} more" if len(twice) > 5 else "")
        raise SnapshotError(f"{origin} lists a {kind} more than once: {shown}")
    return objs


# ---- Ledger archives and the guard's own Events (written by guard.apply) --------------------


def _is_archive(cm: Mapping[str, Any], s: Settings) -> bool:
    here = _meta(cm, "namespace") in ("", s.namespace)
    return here and ledger_store.is_archive(cm, s.ledger_configmap)


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
