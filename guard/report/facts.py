"""The figures' facts (`guard.figures.Facts`) from what a run reads: the ledger with its
archives, the Nodes' records, the guard's Events and its load-test Jobs.

Which record gives which mark:
  `auto-cordon-at` on a node, a `GuardCordoned` Event    → a cordon (node-wide)
  a `GuardDeviceTainted` Event                           → a cordon of one GPU (a DRA device taint)
  a person's `reset-done` time, a guard load-test Job    → a repair seen (its creation)
  `returned` on a node, a `GuardReturned` Event          → a return
  `cancelled` on a node, a `GuardCancelled` Event        → a person's uncordon
The API server keeps an Event an hour: older isolations are known by the ledger and by the
records still on the node. A time that does not read is left out, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from guard import ledger
from guard.doors import ledger_store
from guard.figures import Facts, Mark, MarkKind, Unit
from guard.model import NodeInfo, Snapshot
from guard.names import Annotations
from guard.read import ClusterObjects, SnapshotError
from guard.read.objects import NamelessObject, job_info
from guard.settings import Settings

EVENT_MARKS = {
    "GuardCordoned": (MarkKind.CORDON, Unit.NODE),
    "GuardDeviceTainted": (MarkKind.CORDON, Unit.GPU),
    "GuardReturned": (MarkKind.RETURN, Unit.NODE),
    "GuardCancelled": (MarkKind.CANCEL, Unit.NODE),
}
LOADTEST = "loadtest"


def facts(
    lines: Iterable[ledger.LedgerLine],
    nodes: tuple[NodeInfo, ...],
    events: Iterable[Mapping[str, Any]],
    jobs: Iterable[tuple[str, str, Mapping[str, Any]]],  # (kind, node, raw Job)
) -> Facts:
    marks: list[Mark] = []
    gpus: dict[str, int] = {}
    for n in nodes:
        marks.extend(node_marks(n))
        recorded = n.cordon.gpu_capacity if n.cordon is not None else None
        gpus[n.name] = recorded or n.gpu_capacity
    marks.extend(m for e in events if (m := event_mark(e)) is not None)
    for kind, node, job in jobs:
        at = _time((job.get("metadata") or {}).get("creationTimestamp"))
        if kind == LOADTEST and node and at is not None:
            marks.append(Mark(node, at, MarkKind.REPAIR))
    serving = frozenset(n.name for n in nodes if not n.unschedulable and n.cordon is None)
    return Facts(ledger.entries(lines), tuple(sorted(set(marks), key=_order)), gpus, serving)


def _order(m: Mark) -> tuple[str, datetime, str]:
    return (m.node, m.at, m.kind.value)


def node_marks(n: NodeInfo) -> list[Mark]:
    out = []
    if n.cordon is not None and n.cordon.at is not None:
        out.append(Mark(n.name, n.cordon.at, MarkKind.CORDON))
    if n.reset_done_at is not None:
        out.append(Mark(n.name, n.reset_done_at, MarkKind.REPAIR))
    if n.returned is not None:
        out.append(Mark(n.name, n.returned.at, MarkKind.RETURN))
    if n.cancelled is not None:
        out.append(Mark(n.name, n.cancelled.at, MarkKind.CANCEL))
    return out


def event_mark(event: Mapping[str, Any]) -> Mark | None:
    """The mark of one of the guard's Events: its first time (`eventTime`, else the core
    view's firstTimestamp), about the node it regards."""
    kind = EVENT_MARKS.get(str(event.get("reason", "")))
    about = event.get("regarding") or event.get("involvedObject") or {}
    at = _time(event.get("eventTime") or event.get("firstTimestamp"))
    if kind is None or not isinstance(about, Mapping) or about.get("kind") != "Node":
        return None
    node = str(about.get("name") or "")
    return Mark(node, at, kind[0], kind[1]) if node and at is not None else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    if "." in text:  # MicroTime: the figures count seconds
        head, _, tail = text.partition(".")
        zone = tail.lstrip("0123456789")
        text = head + zone
    try:
        return ledger.parse_time(text)
    except ValueError:
        return None


def from_snapshot(snap: Snapshot) -> Facts:
    """The facts a cycle's snapshot holds: the ledger and the nodes' records (its Events carry
    no time and its Jobs no creation time: the report reads those)."""
    return facts(snap.ledger, snap.nodes, (), ())


def from_objects(objs: ClusterObjects, s: Settings) -> Facts:
    """The facts of a cluster read (`guard.read.read_cluster`) or of a snapshot file."""
    keys = Annotations(s.annotation_prefix)
    data = (objs.ledger or {}).get("data") or {}
    if not isinstance(data, Mapping):
        raise SnapshotError(f"ledger ConfigMap {s.ledger_configmap}: data is not a mapping")
    lines = ledger_store.ledger_lines(data, objs.ledger_archives)
    jobs = []
    for obj in objs.jobs:
        try:
            info = job_info(obj, keys)
        except NamelessObject:
            continue
        jobs.append((info.kind, info.node, obj))
    return facts(lines, objs.nodes, objs.events, jobs)
