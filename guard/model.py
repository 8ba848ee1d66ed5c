"""Plain frozen data the planners read: the `Snapshot` of one cycle and its parts.

No client objects or raw API dicts cross into the planners; `guard.snapshot` converts at the edge.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from guard.ledger import LedgerLine

JobStatus = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    resource_version: str
    unschedulable: bool
    ready: bool
    boot_id: str
    gpu_capacity: int
    gpu_allocatable: int
    annotations: tuple[tuple[str, str], ...] = ()
    uid: str = ""  # metadata.uid: Events name the node by it (kubectl describe matches it)

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)


@dataclass(frozen=True, slots=True)
class JobInfo:
    name: str
    kind: str
    node: str
    status: JobStatus


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A Running pod that holds GPUs (the guard's own Jobs are excluded when read)."""

    namespace: str
    name: str
    node: str
    gpus: int


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU series from dcgm-exporter, joined to its node; `value` is the metric's value."""

    node: str
    gpu: str
    uuid: str
    pci: str
    value: int


@dataclass(frozen=True, slots=True)
class PromView:
    """Validated Prometheus answers at `Snapshot.now`."""

    candidates: tuple[GpuSample, ...] = ()
    hardware_xids: tuple[GpuSample, ...] = ()
    row_remap: tuple[GpuSample, ...] = ()
    loss_held_s: tuple[tuple[str, int], ...] = ()

    def held_s(self, node: str) -> int:
        return dict(self.loss_held_s).get(node, 0)


@dataclass(frozen=True, slots=True)
class GuardEvent:
    """One of the guard's own Events (label-selected in `default`), by its deterministic name."""

    name: str
    node: str
    reason: str
    count: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: datetime
    nodes: tuple[NodeInfo, ...]
    jobs: tuple[JobInfo, ...]
    gpu_pods: tuple[GpuPod, ...]
    ledger: tuple[LedgerLine, ...]
    ledger_resource_version: str
    prom: PromView
    events: tuple[GuardEvent, ...] = ()

    def node(self, name: str) -> NodeInfo | None:
        return next((n for n in self.nodes if n.name == name), None)

    def to_json(self) -> str:
        return json.dumps(_plain(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        return typing.cast(Snapshot, _build(cls, json.loads(text)))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _build(kind: Any, value: Any) -> Any:
    """Inverse of `_plain` driven by the type hints (enough for the types in this module)."""
    if value is None:
        return None
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        return _build(options[0], value)
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in value)
        return tuple(_build(a, v) for a, v in zip(args, value, strict=True))
    if kind is datetime:
        return datetime.fromisoformat(value)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return typing.cast(Any, kind)(
            **{f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(kind)}
        )
    return value
