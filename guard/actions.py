"""Typed actions: what a planner decided, with everything the write needs.

`str(action)` is its one log line (``<event> key=value …``: what, why, next); `to_json()` is the
same object for ``--output json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Mapping = tuple[tuple[str, str], ...]


def _kv(event: str, /, **pairs: object) -> str:
    parts = [event]
    for key, value in pairs.items():
        if value is None or value == "":
            continue
        text = str(value)
        if any(ch.isspace() for ch in text) or '"' in text:
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Cordon:
    """spec.unschedulable=true plus the guard's annotations, one patch, resourceVersion-guarded."""

    node: str
    reason: str
    resource_version: str
    annotations: Mapping
    gpu: str
    held_s: int
    next: str
    clear_keys: tuple[str, ...] = ()  # records of the node's last incident (cancelled, returned)

    def __str__(self) -> str:
        return _kv(
            "cordon",
            node=self.node,
            reason=self.reason,
            gpu=self.gpu,
            held_s=self.held_s,
            next=self.next,
        )


@dataclass(frozen=True, slots=True)
class Uncordon:
    """spec.unschedulable=false and the guard's annotations removed, one guarded patch."""

    node: str
    reason: str
    resource_version: str
    clear_keys: tuple[str, ...]
    detail: str
    annotations: Mapping = ()  # set in the same patch (the `returned` record)

    def __str__(self) -> str:
        return _kv(
            "uncordon",
            node=self.node,
            reason=self.reason,
            detail=self.detail,
            next="node schedulable again",
        )


@dataclass(frozen=True, slots=True)
class ClearGuardAnnotations:
    node: str
    reason: str
    resource_version: str
    clear_keys: tuple[str, ...]
    annotations: Mapping = ()  # set in the same patch (the `cancelled` record)

    def __str__(self) -> str:
        return _kv(
            "clear-annotations",
            node=self.node,
            reason=self.reason,
            next="guard no longer tracks this node",
        )


@dataclass(frozen=True, slots=True)
class SetHold:
    node: str
    reason: str
    resource_version: str
    key: str
    text: str

    def __str__(self) -> str:
        return _kv(
            "set-hold",
            node=self.node,
            reason=self.reason,
            hold=self.text,
            next=f"a person decides; remove {self.key} to let the guard continue",
        )


@dataclass(frozen=True, slots=True)
class Annotate:
    """Record a result on the node (guard keys only), resourceVersion-guarded."""

    node: str
    reason: str
    resource_version: str
    annotations: Mapping
    next: str

    def __str__(self) -> str:
        values = " ".join(v for _, v in self.annotations)
        return _kv("annotate", node=self.node, reason=self.reason, value=values, next=self.next)


@dataclass(frozen=True, slots=True)
class CreateJob:
    node: str
    reason: str
    job_kind: str
    name: str
    manifest: dict[str, Any]

    def __str__(self) -> str:
        return _kv(
            "job-created",
            node=self.node,
            reason=self.reason,
            kind=self.job_kind,
            job=self.name,
            next=f"kubectl -n {self.namespace} logs job/{self.name}",
        )

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"]["namespace"])


@dataclass(frozen=True, slots=True)
class AppendLedgerLine:
    node: str
    reason: str
    line: str
    configmap: str

    def __str__(self) -> str:
        return _kv(
            "ledger-append",
            node=self.node,
            reason=self.reason,
            line=self.line,
            configmap=self.configmap,
        )


@dataclass(frozen=True, slots=True)
class EmitEvent:
    node: str
    reason: str
    event_type: Literal["Normal", "Warning"]
    event_reason: str
    message: str

    def __str__(self) -> str:
        return _kv(
            "event",
            node=self.node,
            reason=self.reason,
            type=self.event_type,
            event=self.event_reason,
            message=self.message,
        )


@dataclass(frozen=True, slots=True)
class Skip:
    """A decision not to act, with why and what happens next."""

    node: str
    reason: str
    detail: str
    next: str
    level: Literal["INFO", "WARN"] = "INFO"  # WARN: a person should look

    def __str__(self) -> str:
        return _kv("skip", node=self.node, reason=self.reason, detail=self.detail, next=self.next)


Action = (
    Cordon
    | Uncordon
    | ClearGuardAnnotations
    | SetHold
    | Annotate
    | CreateJob
    | AppendLedgerLine
    | EmitEvent
    | Skip
)

TYPE_WORDS: dict[type, str] = {
    Cordon: "cordon",
    Uncordon: "uncordon",
    ClearGuardAnnotations: "clear-annotations",
    SetHold: "set-hold",
    Annotate: "annotate",
    CreateJob: "create-job",
    AppendLedgerLine: "append-ledger",
    EmitEvent: "event",
    Skip: "skip",
}


def to_json(action: Action) -> dict[str, Any]:
    """The JSON form: ``type``, ``node``, ``reason`` and every field of the action."""
    out: dict[str, Any] = {"type": TYPE_WORDS[type(action)]}
    for name in action.__slots__:
        value = getattr(action, name)
        if isinstance(value, tuple) and value and isinstance(value[0], tuple):
            value = dict(value)
        out[name] = value
    out["log"] = str(action)
    return out


def is_write(action: Action) -> bool:
    return not isinstance(action, Skip)
