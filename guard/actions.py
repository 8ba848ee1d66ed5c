"""Typed actions: what a planner decided, with everything the write needs.

`action.log_line()` is its one log line as an event word and ordered fields (what, why, next);
`str(action)` is the same line as text, and `to_json()` the same object for ``--output json``.
A decision with a runbook state (`guard.states`) ends its ``next=`` with the section's link.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from guard.log import Value, format_line
from guard.model import Taint
from guard.states import Reason, anchored

Mapping = tuple[tuple[str, str], ...]
Line = tuple[str, dict[str, Value]]


@dataclass(frozen=True, slots=True)
class _Logged(ABC):
    """Every action: its node and reason (the decision word), and one log line, `log_line()`,
    of which `str(action)` is the text form."""

    EVENT: ClassVar[str]  # the log line's event word, also the JSON `type`
    node: str
    reason: Reason

    @abstractmethod
    def log_line(self) -> Line: ...

    def _line(self, **fields: Value) -> Line:
        return self.EVENT, {"node": self.node, "reason": self.reason, **fields}

    def __str__(self) -> str:
        return format_line(*self.log_line())


@dataclass(frozen=True, slots=True)
class Cordon(_Logged):
    """spec.unschedulable=true plus the guard's annotations, one patch, resourceVersion-guarded."""

    EVENT = "cordon"
    resource_version: str
    annotations: Mapping
    gpu: str
    held_s: int
    next: str
    clear_keys: tuple[str, ...] = ()  # records of the node's last incident (cancelled, returned)
    detail: str = ""  # what was seen, where no GPU names the cordon (nvml-mismatch)

    def log_line(self) -> Line:
        return self._line(detail=self.detail, gpu=self.gpu, held_s=self.held_s, next=self.next)


@dataclass(frozen=True, slots=True)
class Uncordon(_Logged):
    """spec.unschedulable=false and the guard's annotations removed, one guarded patch."""

    EVENT = "uncordon"
    resource_version: str
    clear_keys: tuple[str, ...]
    detail: str
    annotations: Mapping = ()  # set in the same patch (the `returned` record)

    def log_line(self) -> Line:
        return self._line(detail=self.detail, next="node schedulable again")


@dataclass(frozen=True, slots=True)
class ClearGuardAnnotations(_Logged):
    EVENT = "clear-annotations"
    resource_version: str
    clear_keys: tuple[str, ...]
    annotations: Mapping = ()  # set in the same patch (the `cancelled` record)

    def log_line(self) -> Line:
        return self._line(next=anchored("guard no longer tracks this node", self.reason))


def hold_next(key: str, node: str, repeat_fault: bool) -> str:
    """The whole step out of a `hold`, as a person types it (log `next=`, `status`). A repeat-fault
    hold comes back while the card's incidents count, so after the swap the person uncordons too:
    the guard records a cancel and lets the node go."""
    if repeat_fault:
        return (
            f"swap or repair the card, then remove {key} and uncordon: kubectl annotate node "
            f"{node} {key}- && kubectl uncordon {node} (removing {key} alone: the guard "
            "sets it again next cycle)"
        )
    return (
        f"a person decides, then removes {key}: kubectl annotate node {node} {key}- "
        "(the return checks continue)"
    )


@dataclass(frozen=True, slots=True)
class SetHold(_Logged):
    EVENT = "set-hold"
    resource_version: str
    key: str
    text: str

    def log_line(self) -> Line:
        return self._line(
            hold=self.text,
            next=anchored(hold_next(self.key, self.node, repeat_fault=True), self.reason),
        )


@dataclass(frozen=True, slots=True)
class Annotate(_Logged):
    """Record a result on the node (guard keys only), resourceVersion-guarded."""

    EVENT = "annotate"
    resource_version: str
    annotations: Mapping
    next: str

    def log_line(self) -> Line:
        values = " ".join(v for _, v in self.annotations)
        return self._line(value=values, next=anchored(self.next, self.reason))


@dataclass(frozen=True, slots=True)
class RecordBoot(_Logged):
    """Record that this boot of the node passed its conformance check (`checked-boot`, guard keys
    only), resourceVersion-guarded; void if the node rebooted or was cordoned meanwhile."""

    EVENT = "record-boot"
    resource_version: str
    boot_id: str
    annotations: Mapping
    next: str

    def log_line(self) -> Line:
        return self._line(boot=self.boot_id, next=anchored(self.next, self.reason))


@dataclass(frozen=True, slots=True)
class RemoveTaint(_Logged):
    """The onboarding gate passed: remove exactly that taint and record the boot, one patch."""

    EVENT = "remove-taint"
    resource_version: str
    taint: Taint
    keep: tuple[Taint, ...]  # the node's other taints as read; re-read on a conflict
    boot_id: str
    annotations: Mapping = ()
    clear_keys: tuple[str, ...] = ()

    def log_line(self) -> Line:
        shown = f"{self.taint.key}={self.taint.value}:{self.taint.effect}"
        return self._line(taint=shown, next=anchored("node schedulable for everyone", self.reason))


@dataclass(frozen=True, slots=True)
class CreateJob(_Logged):
    EVENT = "create-job"
    job_kind: str
    name: str
    manifest: dict[str, Any]
    # (annotation key, value with `{uid}`): what the guard made, written on the node in one
    # guarded patch once the API answers the create with the Job's uid (guard.apply). Empty for
    # a Job whose result no gate acts on (evidence).
    record: tuple[str, ...] = ()

    def log_line(self) -> Line:
        return self._line(
            kind=self.job_kind,
            job=self.name,
            record=self.record[0] if self.record else "",
            next=f"kubectl -n {self.namespace} logs job/{self.name}",
        )

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"]["namespace"])


@dataclass(frozen=True, slots=True)
class TaintDevice(_Logged):
    """The guard's DeviceTaintRule (NoSchedule) for one DRA device: the GPU's isolation."""

    EVENT = "taint-device"
    name: str  # the rule's name
    device: str  # <driver>/<pool>/<device>
    gpu: str  # the GPU's UUID
    manifest: dict[str, Any]

    def log_line(self) -> Line:
        return self._line(
            device=self.device,
            gpu=self.gpu,
            rule=self.name,
            next="the node's other GPUs stay in service; the device returns after its load test",
        )


@dataclass(frozen=True, slots=True)
class UntaintDevice(_Logged):
    """Delete the guard's DeviceTaintRule, by name and uid (never a rule it did not read as its
    own), and the load test's ResourceClaim, after that device's load test passed."""

    EVENT = "untaint-device"
    name: str
    uid: str
    device: str
    claim: str  # the load test's ResourceClaim, deleted with the rule ("" for none)
    claim_namespace: str

    def log_line(self) -> Line:
        return self._line(
            device=self.device, rule=self.name, next="the device is allocatable again"
        )


@dataclass(frozen=True, slots=True)
class CreateClaim(_Logged):
    """The ResourceClaim of a device load test: exactly that GPU, tolerating the guard's taint."""

    EVENT = "create-claim"
    name: str
    namespace: str
    manifest: dict[str, Any]
    # (annotation key, value with `{uid}`): the claim the guard made, written on the node once
    # the API answers the create (guard.apply); only that claim's load test counts.
    record: tuple[str, ...] = ()

    def log_line(self) -> Line:
        return self._line(
            claim=self.name, next=f"kubectl -n {self.namespace} get resourceclaim {self.name}"
        )


@dataclass(frozen=True, slots=True)
class AppendLedgerLine(_Logged):
    EVENT = "append-ledger"
    line: str
    configmap: str

    def log_line(self) -> Line:
        return self._line(line=self.line, configmap=self.configmap)


def event_name(node: str, event_reason: str, key: str) -> str:
    """The Event's name: a DNS subdomain that depends only on node, reason and incident, so every
    cycle, a second guard run and a retried create reach the same object."""
    digest = hashlib.sha256(f"{node}\0{event_reason}\0{key}".encode()).hexdigest()[:16]
    return f"{node[:200].rstrip('.-')}.gng-{digest}"


@dataclass(frozen=True, slots=True)
class EmitEvent(_Logged):
    """An events.k8s.io Event about the node, one per (node, event_reason, incident), its series
    counted up while the condition lasts. `incident` names what it is about (a cordon's time);
    empty means the message itself identifies it."""

    EVENT = "event"
    event_type: Literal["Normal", "Warning"]
    event_reason: str
    message: str
    incident: str = ""
    # An Event about a Pod instead (guard.plan.workload): in the pod's namespace, regarding the
    # pod (by uid where kube-state-metrics gave one); created once, never counted up.
    pod: PodRef | None = None

    @property
    def name(self) -> str:
        if self.pod is not None:
            key = f"{self.node}\0{self.incident or self.message}"
            return event_name(self.pod.name, self.event_reason, key)
        return event_name(self.node, self.event_reason, self.incident or self.message)

    def log_line(self) -> Line:
        return self.EVENT, {
            "node": self.node,
            "pod": f"{self.pod.namespace}/{self.pod.name}" if self.pod else "",
            "reason": self.reason,
            "type": self.event_type,
            "event_reason": self.event_reason,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod an Event is about: what `regarding` names."""

    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Skip(_Logged):
    """A decision not to act, with why and what happens next; WARN when a person should look."""

    EVENT = "skip"
    detail: str
    next: str
    level: Literal["INFO", "WARN"] = "INFO"  # WARN: a person should look

    def log_line(self) -> Line:
        return self._line(detail=self.detail, next=anchored(self.next, self.reason))


Action = (
    Cordon
    | Uncordon
    | ClearGuardAnnotations
    | SetHold
    | Annotate
    | RecordBoot
    | RemoveTaint
    | CreateJob
    | TaintDevice
    | UntaintDevice
    | CreateClaim
    | AppendLedgerLine
    | EmitEvent
    | Skip
)

TYPE_WORDS: dict[type, str] = {kind: kind.EVENT for kind in get_args(Action)}


def to_json(action: Action) -> dict[str, Any]:
    """The JSON form: ``type``, ``node``, ``reason`` and every field of the action."""
    out: dict[str, Any] = {"type": action.EVENT}
    for name in [f.name for f in dataclasses.fields(action)]:
        value = getattr(action, name)
        if isinstance(value, tuple) and value and isinstance(value[0], tuple):
            value = dict(value)
        elif isinstance(value, Taint):
            value = value.as_dict()
        elif isinstance(value, tuple) and value and isinstance(value[0], Taint):
            value = [t.as_dict() for t in value]
        elif isinstance(value, PodRef):
            value = f"{value.namespace}/{value.name}"
        elif value is None and name == "pod":  # an Event about a Node: as before the field
            continue
        out[name] = value
    out["log"] = str(action)
    return out
