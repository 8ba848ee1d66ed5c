"""The figures' facts (`guard.figures.Facts`) from what a read gave: the ledger with its
archives, the Nodes' records, the guard's Events and its load-test Jobs (which record gives which
mark: guard/figures.py, "Facts from the guard's records")."""

from __future__ import annotations

from collections.abc import Mapping

from guard.doors import ledger_store
from guard.figures import Facts, facts
from guard.names import Annotations
from guard.read import ClusterObjects, SnapshotError
from guard.read.objects import NamelessObject, job_info
from guard.settings import Settings


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
