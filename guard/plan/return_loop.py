"""The return's later turns in a run (guard/returns.py runs them): which nodes it follows, whose
return inputs moved, and which a row reading Prometheus holds (docs/lifecycle.md, "The return in
the watch").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from guard.model import JobInfo, NodeInfo, PromView, Snapshot
from guard.plan.device_taint import record_of
from guard.plan.return_rule import Case, Condition, holding
from guard.plan.units import all_isolations
from guard.settings import Settings

RETURN_POLL_S = 5  # the return's poll: a result is acted on within this of being readable


@dataclass(frozen=True, slots=True)
class ReturnInputs:
    """What one node's return decision reads from the API, without what moves by itself."""

    node: NodeInfo | None  # None: no such Node (deleted)
    jobs: tuple[tuple[str, str, str, object], ...]  # (name, uid, status, result) by name


def followed(snap: Snapshot, s: Settings) -> tuple[str, ...]:
    """The nodes whose return the run follows: each readable node the guard isolates, by name."""
    readable = {n.name for n in snap.nodes if not n.unreadable}
    return tuple(sorted({i.node for i in all_isolations(snap, s) if i.node in readable}))


def inputs(nodes: Mapping[str, NodeInfo], jobs: tuple[JobInfo, ...], name: str) -> ReturnInputs:
    """The node's return inputs: its Node without its resourceVersion (and without what
    Prometheus marked unreadable: the decision's full read says that), its Jobs' status and
    result."""
    node = nodes.get(name)
    if node is not None:
        node = replace(node, resource_version="", unreadable=())
    mine = sorted((j for j in jobs if j.node == name), key=lambda j: j.name)
    return ReturnInputs(node, tuple((j.name, j.uid, j.status, j.result) for j in mine))


def of_snapshot(snap: Snapshot, names: tuple[str, ...]) -> dict[str, ReturnInputs]:
    by_name = {n.name: n for n in snap.nodes}
    return {name: inputs(by_name, snap.jobs, name) for name in names}


def moved(before: Mapping[str, ReturnInputs], after: Mapping[str, ReturnInputs]) -> tuple[str, ...]:
    """The nodes of `after` whose inputs differ from `before` (a node new to `before` too)."""
    return tuple(sorted(n for n, x in after.items() if before.get(n) != x))


Held = tuple[Condition, Case]  # the Prometheus row that holds a node's return, and on what


def held(snap: Snapshot, s: Settings, names: tuple[str, ...]) -> tuple[Held, ...]:
    """The isolations of the `names` whose return a row reading Prometheus holds."""
    found = ((holding(c), c) for c in _cases(snap, s, names))
    return tuple((row, c) for row, c in found if row is not None and row.reads)


def _cases(snap: Snapshot, s: Settings, names: tuple[str, ...]) -> Iterator[Case]:
    for node in (n for n in snap.nodes if n.name in names and not n.unreadable):
        if node.cordon is not None and node.unschedulable:
            yield Case(snap, s, node, node.cordon)
        if (rec := record_of(node, s)) is not None:
            yield Case(snap, s, node, rec)


def cleared(found: tuple[Held, ...], view: PromView, now: datetime) -> tuple[str, ...]:
    """The held nodes whose row answers otherwise on Prometheus as re-read at `now` (their API
    inputs as they were: those moving is the poll's)."""

    def reread(c: Case) -> Case:
        return replace(c, snap=replace(c.snap, now=now, prom=view, gpu_pods=view.gpu_pods))

    return tuple(sorted({c.node.name for row, c in found if row.check(reread(c)) != row.check(c)}))
