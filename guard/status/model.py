"""The status report as frozen values; `Report.to_json()` is the stable ``-o json`` document
(its keys: docs/status.md, "Options")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from guard.ledger import format_time
from guard.model import GpuRef

Gpu = GpuRef  # a row's GPU (pci, uuid): the cordon record's own value


@dataclass(frozen=True, slots=True)
class Blocked:
    """The first return condition that holds the node back, with the value the guard saw."""

    condition: str  # the planner's word: same-boot, gpu-count, loadtest-running, …
    observed: str  # its detail: "bootID boot-1 unchanged since cordon", …


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    state: str  # a guard.runbook.Section value, or the planner's word for a state without one
    runbook: str  # <site's runbook>#<state>, "" when the runbook has no section for the state
    reason: str  # the cordon's reason (xid-79, conformance-dns, …), "" when there is none
    since: datetime | None
    gpu: Gpu | None
    card_incidents: int | None  # ledger lines (archives included) with the card's UUID
    slot_incidents: int | None  # … with the slot's PCI address on this node
    blocked: Blocked | None
    next: str  # what happens next, or what a person does

    def to_json(self) -> dict[str, Any]:
        incidents = None
        if self.card_incidents is not None and self.slot_incidents is not None:
            incidents = {"card": self.card_incidents, "slot": self.slot_incidents}
        return {
            "node": self.node,
            "state": self.state,
            "runbook": self.runbook,
            "reason": self.reason,
            "since": format_time(self.since) if self.since else None,
            "gpu": asdict(self.gpu) if self.gpu else None,  # pci, uuid
            "incidents": incidents,
            "blocked_by": asdict(self.blocked) if self.blocked else None,  # condition, observed
            "next": self.next,
        }


@dataclass(frozen=True, slots=True)
class Candidate:
    """A GPU with a hardware Xid and GPU loss on its node, or a node with a driver/NVML mismatch
    or a node trigger (no GPU, no Xid; `detail`): pending, or decided this cycle."""

    node: str
    reason: str  # xid-48, nvml-mismatch
    held_s: int
    needs_s: int
    decision: str  # "pending", or the isolation check's word for the node
    xid: int | None = None
    gpu: str | None = None
    pci: str | None = None
    uuid: str | None = None
    detail: str | None = None
    decides_at: str | None = None  # a pending one: when its hold completes (RFC 3339)

    def to_json(self) -> dict[str, Any]:
        keys = ("node", "reason", "xid", "gpu", "pci", "uuid", "held_s", "needs_s", "decision")
        return {key: getattr(self, key) for key in (*keys, "decides_at", "detail")}


@dataclass(frozen=True, slots=True)
class Breaker:
    guarded: int  # nodes carrying the guard's reason annotation and GPUs it taints (DRA)
    limit: int
    runbook: str = ""  # the breaker-open section of the site's runbook

    @property
    def open(self) -> bool:
        return self.guarded >= self.limit

    @property
    def headroom(self) -> int:
        return self.limit - self.guarded


@dataclass(frozen=True, slots=True)
class Sight:
    """What the report could see of Prometheus: its URL ("" when none was given) and the
    reason it failed, if it did."""

    url: str = ""
    error: str = ""

    @property
    def seen(self) -> bool:
        return bool(self.url) and not self.error


@dataclass(frozen=True, slots=True)
class Report:
    at: datetime
    namespace: str
    prometheus: Sight
    breaker: Breaker
    candidates: tuple[Candidate, ...] | None  # None: unknown (Prometheus not seen)
    nodes: tuple[NodeRow, ...]

    def to_json(self) -> dict[str, Any]:
        p, b = self.prometheus, self.breaker
        return {
            "at": format_time(self.at),
            "namespace": self.namespace,
            "prometheus": {"url": p.url, "seen": p.seen, "error": p.error},
            "breaker": {k: getattr(b, k) for k in ("guarded", "limit", "open", "headroom")},
            "candidates": (
                None if self.candidates is None else [c.to_json() for c in self.candidates]
            ),
            "nodes": [n.to_json() for n in self.nodes],
        }
