"""Read one cycle's world into a `Snapshot`: Prometheus answers plus cluster objects, from the API
(page by page) or a ``kubectl get … -o yaml|json`` List file (item by item), one plain dict at a
time; a Node becomes its `NodeInfo` at once."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from guard.doors import ledger_store
from guard.doors.kube import Kube, NotFound
from guard.files import (
    MAX_DEPTH,
    SNAPSHOT_JSON_MAX_BYTES,
    SNAPSHOT_MAX_BYTES,
    FileInputError,
    load_yaml_all,
    open_regular,
    read_text_bounded,
)
from guard.gpu_classes import kept_label_keys
from guard.model import GuardEvent, JobInfo, NodeInfo, PromView, Snapshot
from guard.names import APP_LABEL, APP_NAME, DRA_DRIVER, NODE_EVENT_NAMESPACE, Annotations
from guard.read import json_stream, objects
from guard.read.job_results import FINISHED, attach, slim_pod
from guard.read.objects import NamelessObject, is_guard_job, job_info, node_info
from guard.read.prom_view import read_prom as read_prom
from guard.read.prom_view import with_prom_unreadable
from guard.settings import Settings


class SnapshotError(Exception):
    """Cluster input the guard cannot trust (unreadable file, malformed object)."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """What the guard keeps of the cluster: Nodes already parsed (`NodeInfo`, no raw object
    survives the read), the guard's own objects as plain dicts."""

    nodes: tuple[NodeInfo, ...]
    jobs: tuple[dict[str, Any], ...]  # the guard's Jobs
    ledger: dict[str, Any] | None
    ledger_archives: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    pods: tuple[dict[str, Any], ...] = ()  # finished Pods of the guard's Jobs (their results)
    gaps: tuple[str, ...] = ()  # what a snapshot file lacks (`snapshot_gaps`); none from the API
    ignored: tuple[str, ...] = ()  # Nodes without a name: one line each in the report
    # DRA (guard.read.objects): the GPU driver's ResourceSlices and the DeviceTaintRules.
    resource_slices: tuple[dict[str, Any], ...] = ()
    taint_rules: tuple[dict[str, Any], ...] = ()
    resource_claims: tuple[dict[str, Any], ...] = ()  # the jobs namespace's

    def dra_gpus(self) -> bool:
        """Whether the DRA driver publishes any GPU (then no device-plugin series is needed)."""
        return bool(objects.devices(self.resource_slices))


def load_cluster_file(path: Path, s: Settings) -> ClusterObjects:
    """Read a ``kubectl get nodes,jobs,configmaps,events,pods -o yaml|json`` style List: JSON
    one item at a time (`guard.read.json_stream`), YAML whole within SNAPSHOT_MAX_BYTES."""
    what, origin = "cluster snapshot", f"cluster snapshot {path}"
    collect = _Collect(s, origin)
    labels = kept_label_keys(s.gpu_classes, s.topology_label)
    try:
        if _starts_json(path, what):
            items = json_stream.list_items(path, SNAPSHOT_JSON_MAX_BYTES, what)
        else:
            items = _yaml_items(path, what)
        nodes = parse_nodes(collect.nodes_of(items), collect.keys, origin, labels)
    except FileInputError as exc:
        raise SnapshotError(str(exc)) from None
    return collect.result(*nodes)


def _starts_json(path: Path, what: str) -> bool:
    """Whether the file's first character that is not white space is ``{`` (a JSON object)."""
    fd = open_regular(path, SNAPSHOT_JSON_MAX_BYTES, what)
    try:
        head = os.read(fd, 4096)
    except OSError as exc:
        raise FileInputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return head.lstrip(b" \t\r\n").startswith(b"{")


def _yaml_items(path: Path, what: str) -> Iterator[dict[str, Any]]:
    text = read_text_bounded(path, SNAPSHOT_MAX_BYTES, what)
    for doc in load_yaml_all(text, f"{what} {path}"):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise FileInputError(f"{what} {path}: a document is not an object")
        if not str(doc.get("kind", "")).endswith("List"):
            yield doc
        elif isinstance(doc.get("items") or [], list):
            yield from (i for i in doc.get("items") or [] if isinstance(i, dict))
        else:
            raise FileInputError(f"{what} {path}: `items` of a List is not a list")


SNAPSHOT_COMMAND = "kubectl get nodes,jobs,configmaps,events,pods -A -o yaml"


class _Collect:
    """Keeps, object by object, what the cycle reads of a List file, and the kinds and
    namespaces seen (`snapshot_gaps`); Nodes pass on to `parse_nodes`."""

    def __init__(self, s: Settings, origin: str) -> None:
        self.s, self.origin, self.keys = s, origin, Annotations(s.annotation_prefix)
        kinds = ("Job", "ConfigMap", "Event", "Pod", "ResourceSlice", "DeviceTaintRule")
        self.kept: dict[str, list[dict[str, Any]]] = {k: [] for k in (*kinds, "ResourceClaim")}
        self.kinds: set[str] = set()
        self.spaces: set[str] = set()

    def nodes_of(self, items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """The Nodes of `items`; every other object is kept or dropped as it passes."""
        for item in items:
            kind = str(item.get("kind"))
            self.kinds.add(kind)
            self.spaces.add(_meta(item, "namespace"))
            if kind == "Node":
                yield item
            elif kind in self.kept and self._wanted(kind, item):
                if json_stream.item_too_deep(item):  # kept objects are digested and printed whole
                    raise SnapshotError(f"{self.origin}: nested deeper than {MAX_DEPTH} levels")
                self.kept[kind].append(slim_pod(item) if kind == "Pod" else item)

    def _wanted(self, kind: str, item: dict[str, Any]) -> bool:
        s = self.s
        if kind in ("Job", "Pod"):
            return is_guard_job(item, s.jobs_namespace)
        if kind == "Event":
            labels = objects.mapping(objects.mapping(item.get("metadata")).get("labels"))
            return labels.get(APP_LABEL) == APP_NAME
        if kind in ("ResourceSlice", "DeviceTaintRule"):  # guard.read.objects picks the GPUs
            return True
        if kind == "ResourceClaim":
            return _meta(item, "namespace") == s.jobs_namespace
        return _is_ledger(item, s) or _is_archive(item, s)

    def result(self, nodes: tuple[NodeInfo, ...], ignored: tuple[str, ...]) -> ClusterObjects:
        if not nodes and not ignored:
            raise SnapshotError(f"{self.origin} holds no Node objects")
        for kind, found in self.kept.items():
            unique(found, kind, self.origin)
        configmaps = self.kept["ConfigMap"]
        ledgers = [c for c in configmaps if _is_ledger(c, self.s)]
        return ClusterObjects(
            nodes,
            tuple(self.kept["Job"]),
            ledgers[0] if ledgers else None,
            tuple(c for c in configmaps if _is_archive(c, self.s)),
            tuple(self.kept["Event"]),
            tuple(self.kept["Pod"]),
            gaps=snapshot_gaps(self.kinds, self.spaces, self.s),
            ignored=ignored,
            resource_slices=tuple(self.kept["ResourceSlice"]),
            taint_rules=tuple(self.kept["DeviceTaintRule"]),
            resource_claims=tuple(self.kept["ResourceClaim"]),
        )


def parse_nodes(
    objs: Iterable[Mapping[str, Any]],
    keys: Annotations,
    origin: str,
    label_keys: frozenset[str] = frozenset(),
) -> tuple[tuple[NodeInfo, ...], tuple[str, ...]]:
    """Each Node parsed as it comes (a raw page is dropped as soon as it is read), and a line
    for each one without a name; SnapshotError when two share a name or a uid."""
    once = _Once("Node", origin)
    found: list[NodeInfo] = []
    ignored: list[str] = []
    for obj in objs:
        once.see(obj)
        try:
            found.append(node_info(obj, keys, label_keys))
        except NamelessObject as exc:
            ignored.append(str(exc))
    once.check()
    return tuple(found), tuple(ignored)


def snapshot_gaps(kinds: set[str], spaces: set[str], s: Settings) -> tuple[str, ...]:
    """What a snapshot file lacks that a cluster always has (Pods; an object of each guard
    namespace, kube-root-ca.crt at least): a `kubectl get` without `-A` or `pods`."""
    gaps = [] if "Pod" in kinds else ["Pods (the guard's Job results)"]
    for namespace, what in ((s.namespace, "the ledger"), (s.jobs_namespace, "the guard's Jobs")):
        if namespace not in spaces:
            gaps.append(f"anything from namespace {namespace} ({what})")
    return tuple(gaps)


def gaps_line(path: Path, gaps: tuple[str, ...]) -> str:
    """The one warning about a snapshot file that lacks what the report needs."""
    return (
        f"WARN cluster snapshot {path} lacks {'; '.join(gaps)}: the report may miss "
        f"incidents and Jobs; take it with `{SNAPSHOT_COMMAND} > {path.name}`"
    )


def guard_jobs(objs: Iterable[Any], s: Settings, ignored: list[str]) -> list[JobInfo]:
    """The guard's Jobs of the jobs namespace, parsed; a nameless one goes to `ignored`."""
    jobs = []
    for obj in (o for o in objs if is_guard_job(o, s.jobs_namespace)):
        try:
            jobs.append(job_info(obj, Annotations(s.annotation_prefix)))
        except NamelessObject as exc:
            ignored.append(f"guard {exc}")
    return jobs


def build_snapshot(now: datetime, objs: ClusterObjects, prom: PromView, s: Settings) -> Snapshot:
    """Parse every object on its own: a bad value marks its object, never the whole cycle."""
    keys = Annotations(s.annotation_prefix)
    ignored = list(objs.ignored)
    jobs = guard_jobs(objs.jobs, s, ignored)
    data = (objs.ledger or {}).get("data") or {}
    if not isinstance(data, Mapping):
        raise SnapshotError(f"ledger ConfigMap {s.ledger_configmap}: data is not a mapping")
    nodes = [with_prom_unreadable(n, prom) for n in objs.nodes]
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
        objects.claims(objs.resource_claims),
    )


def _meta(obj: Mapping[str, Any] | None, key: str) -> str:
    return str(((obj or {}).get("metadata") or {}).get(key, ""))


def read_node(kube: Kube, s: Settings, name: str) -> NodeInfo | None:
    """One Node as `read_cluster` parses it (None: no such Node), for the watch's re-reads."""
    labels = kept_label_keys(s.gpu_classes, s.topology_label)
    try:
        return node_info(kube.node(name), Annotations(s.annotation_prefix), labels)
    except NotFound:
        return None


def read_cluster(kube: Kube, s: Settings) -> ClusterObjects:
    """Nodes (parsed page by page), the guard's Jobs, then their finished Pods (a Job read as
    finished has its Pod finished too), the ledger and its archives, Events, the DRA objects."""
    keys = Annotations(s.annotation_prefix)
    mine = f"{APP_LABEL}={APP_NAME}"
    labels = kept_label_keys(s.gpu_classes, s.topology_label)
    nodes, ignored = parse_nodes(kube.nodes(s.api_page_size), keys, "the API server", labels)
    return ClusterObjects(
        nodes=nodes,
        jobs=tuple(unique(kube.jobs(s.jobs_namespace, mine), "Job", "the API server")),
        ledger=kube.configmap(s.namespace, s.ledger_configmap),
        ledger_archives=tuple(ledger_store.read_archives(kube, s.namespace, s.ledger_configmap)),
        events=tuple(kube.events(NODE_EVENT_NAMESPACE, mine)),
        pods=tuple(slim_pod(p) for p in kube.pods(s.jobs_namespace, mine, FINISHED)),
        ignored=ignored,
        resource_slices=tuple(kube.resource_slices(DRA_DRIVER)),
        taint_rules=tuple(kube.device_taint_rules(mine)),
        resource_claims=tuple(kube.resource_claims(s.jobs_namespace)),
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
    once = _Once(kind, origin)
    for obj in objs:
        once.see(obj)
    once.check()
    return objs


class _Once:
    """Names (namespace/name) and uids seen so far of one kind; `check` raises on a repeat."""

    def __init__(self, kind: str, origin: str) -> None:
        self.kind, self.origin = kind, origin
        self.names: set[str] = set()
        self.uids: set[str] = set()
        self.twice: list[str] = []

    def see(self, obj: object) -> None:
        meta = (obj.get("metadata") or {}) if isinstance(obj, Mapping) else {}
        if not isinstance(meta, Mapping):
            return
        name = "/".join(str(meta.get(k) or "") for k in ("namespace", "name")).lstrip("/")
        uid = str(meta.get("uid") or "")
        if name and name in self.names:
            self.twice.append(repr(name))
        elif uid and uid in self.uids:
            self.twice.append(f"uid {uid!r}")
        self.names.add(name)
        if uid:
            self.uids.add(uid)

    def check(self) -> None:
        if self.twice:
            twice = self.twice
            shown = ", ".join(twice[:5]) + (f" and {len(twice) - 5} more" if len(twice) > 5 else "")
            raise SnapshotError(f"{self.origin} lists a {self.kind} more than once: {shown}")


# ---- Ledger archives and the guard's own Events (written by guard.apply) --------------------


def _is_ledger(cm: Mapping[str, Any], s: Settings) -> bool:
    return _meta(cm, "name") == s.ledger_configmap and _meta(cm, "namespace") in ("", s.namespace)


def _is_archive(cm: Mapping[str, Any], s: Settings) -> bool:
    here = _meta(cm, "namespace") in ("", s.namespace)
    return here and ledger_store.is_archive(cm, s.ledger_configmap)


def guard_events(found: Iterable[Mapping[str, Any]]) -> tuple[GuardEvent, ...]:
    """The guard's Events about nodes (events.k8s.io/v1 ``regarding`` or core ``involvedObject``).

    >>> guard_events([{"metadata": {"name": "n.gng-1"}, "reason": "GuardCordoned",
    ...                "regarding": {"kind": "Node", "name": "n"}, "series": {"count": 3}}])
    (GuardEvent(name='n.gng-1', node='n', reason='GuardCordoned', count=3),)
    """
    out = []
    for e in found:
        about = e.get("regarding") or e.get("involvedObject") or {}
        if about.get("kind") == "Node":
            count = (e.get("series") or {}).get("count") or e.get("count") or 1
            node = str(about.get("name", ""))
            reason = str(e.get("reason", ""))
            out.append(GuardEvent(_meta(e, "name"), node, reason, int(count)))
    return tuple(sorted(out, key=lambda g: g.name))
