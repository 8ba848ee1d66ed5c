"""Executors: the only code that writes. `KubeExecutor` applies, `PrintExecutor` prints.

Both share `apply(action)`; the CLI picks one, so no `dry_run` flag exists below it. Every write
logs exactly one line (the action's own line). Node patches carry a resourceVersion precondition;
on 409 the node is re-read, the action's precondition re-checked, and the patch re-sent with the new
version — never the old one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

import yaml

from guard import ledger
from guard.actions import (
    Action,
    Annotate,
    AppendLedgerLine,
    ClearGuardAnnotations,
    Cordon,
    CreateJob,
    EmitEvent,
    SetHold,
    Skip,
    Uncordon,
)
from guard.kube import Conflict, Kube, KubeError
from guard.log import Log
from guard.model import NodeInfo
from guard.names import NODE_EVENT_NAMESPACE, Annotations
from guard.snapshot import node_info

PATCH_TRIES = 3
LEDGER_TRIES = 8


class Executor(Protocol):
    applied: list[Action]

    def apply(self, action: Action) -> None: ...


@dataclass
class PrintExecutor:
    """Dry run: the same lines the real run logs, prefixed ``dry-run would``."""

    log: Log
    show_manifests: bool = True
    applied: list[Action] = field(default_factory=list)

    def apply(self, action: Action) -> None:
        self.applied.append(action)
        if isinstance(action, Skip):
            self.log.line(str(action), action.level)
            return
        self.log.line(f"dry-run would {action}")
        if isinstance(action, CreateJob) and self.show_manifests:
            body = yaml.safe_dump(action.manifest, sort_keys=False, width=100)
            self.log.stream.write("".join(f"    {row}\n" for row in body.splitlines()))


@dataclass
class KubeExecutor:
    kube: Kube
    log: Log
    keys: Annotations
    namespace: str
    applied: list[Action] = field(default_factory=list)
    abandoned: set[str] = field(default_factory=set)

    def apply(self, action: Action) -> None:
        if action.node in self.abandoned and not isinstance(action, Skip):
            self.log.event(
                "skip",
                node=action.node,
                reason="changed-under-us",
                detail=f"not doing {type(action).__name__}",
                next="next cycle re-reads",
            )
            return
        match action:
            case Skip():
                pass
            case Cordon():
                self._patch(action, self._cordon_body, self._may_cordon)
            case Uncordon() | ClearGuardAnnotations() | SetHold() | Annotate():
                self._patch(action, _body, self._may_touch(action))
            case CreateJob():
                self._create_job(action)
            case AppendLedgerLine():
                self._append_ledger(action)
            case EmitEvent():
                self._event(action)
                return
            case _:
                assert_never(action)
        if action.node not in self.abandoned:
            self.log.line(str(action), action.level if isinstance(action, Skip) else "INFO")
            self.applied.append(action)

    # -- node patches ---------------------------------------------------------------------------
    def _patch(
        self,
        action: Any,
        body: Callable[[Any, NodeInfo | None], dict[str, Any]],
        may: Callable[[NodeInfo], str],
    ) -> None:
        rv, fresh = action.resource_version, None
        for _ in range(PATCH_TRIES):
            patch = body(action, fresh)
            patch.setdefault("metadata", {})["resourceVersion"] = rv
            try:
                self.kube.patch_node(action.node, patch)
                return
            except Conflict:
                fresh = node_info(self.kube.node(action.node), self.keys)
                why = may(fresh)
                if why:
                    self.abandoned.add(action.node)
                    self.log.event(
                        "skip",
                        node=action.node,
                        reason="changed-under-us",
                        detail=why,
                        next="next cycle re-reads the node",
                    )
                    return
                rv = fresh.resource_version
        raise KubeError(f"patch node {action.node}: still conflicting after {PATCH_TRIES} tries")

    def _cordon_body(self, action: Cordon, fresh: NodeInfo | None) -> dict[str, Any]:
        notes: dict[str, str | None] = dict.fromkeys(action.clear_keys)
        notes.update(action.annotations)
        if fresh is not None:  # the node moved on: record what it is now
            notes[self.keys.boot_id] = fresh.boot_id
            notes[self.keys.gpu_capacity] = str(fresh.gpu_capacity)
        return {"metadata": {"annotations": notes}, "spec": {"unschedulable": True}}

    def _may_cordon(self, fresh: NodeInfo) -> str:
        if fresh.unschedulable:
            return "node was cordoned by someone else"
        if fresh.annotation(self.keys.hold) is not None:
            return "node now carries hold"
        if fresh.annotation(self.keys.reason) is not None:
            return "node already carries the guard's cordon"
        return ""

    def _may_touch(self, action: Action) -> Callable[[NodeInfo], str]:
        def check(fresh: NodeInfo) -> str:
            if fresh.annotation(self.keys.reason) is None:
                return "guard annotations are gone"
            if isinstance(action, Uncordon):
                if not fresh.unschedulable:
                    return "node was uncordoned meanwhile"
                if fresh.annotation(self.keys.hold) is not None:
                    return "node now carries hold"
            if isinstance(action, ClearGuardAnnotations) and fresh.unschedulable:
                return "node was cordoned again"
            return ""

        return check

    # -- other writes ---------------------------------------------------------------------------
    def _create_job(self, action: CreateJob) -> None:
        try:
            self.kube.create_job(action.namespace, action.manifest)
        except Conflict:
            self.log.event(
                "skip",
                node=action.node,
                reason="job-exists",
                detail=action.name,
                next="observed next cycle",
            )

    def _append_ledger(self, action: AppendLedgerLine) -> None:
        for _ in range(LEDGER_TRIES):
            cm = self.kube.configmap(self.namespace, action.configmap)
            try:
                if cm is None:
                    self.kube.create_configmap(
                        self.namespace,
                        {
                            "metadata": {
                                "name": action.configmap,
                                "namespace": self.namespace,
                                "labels": {"app.kubernetes.io/name": "gpu-node-guard"},
                            },
                            "data": {action.node: ledger.append_to_text("", action.line)},
                        },
                    )
                    return
                data = dict(cm.get("data") or {})
                text = data.get(action.node, "")
                if action.line in text.splitlines():
                    return  # an earlier try landed
                data[action.node] = ledger.append_to_text(text, action.line)
                cm["data"] = data
                self.kube.replace_configmap(self.namespace, action.configmap, cm)
                return
            except Conflict:
                continue
        raise KubeError(f"ledger {action.configmap}: still conflicting after {LEDGER_TRIES} tries")

    def _event(self, action: EmitEvent) -> None:
        body = {
            "metadata": {"generateName": f"{action.node}.gng-", "namespace": NODE_EVENT_NAMESPACE},
            "involvedObject": {"kind": "Node", "name": action.node, "apiVersion": "v1"},
            "reason": action.event_reason,
            "message": action.message[:1024],
            "type": action.event_type,
            "source": {"component": "gpu-node-guard"},
            "reportingComponent": "gpu-node-guard",
        }
        try:
            self.kube.create_event(NODE_EVENT_NAMESPACE, body)
        except KubeError as exc:  # an Event is a courtesy; the node write already happened
            self.log.event("event-failed", "WARN", node=action.node, error=str(exc))
            return
        self.log.line(str(action))
        self.applied.append(action)


def _body(action: Any, _fresh: NodeInfo | None) -> dict[str, Any]:
    match action:
        case Uncordon():
            notes = {**dict.fromkeys(action.clear_keys), **dict(action.annotations)}
            return {"metadata": {"annotations": notes}, "spec": {"unschedulable": False}}
        case ClearGuardAnnotations():
            notes = {**dict.fromkeys(action.clear_keys), **dict(action.annotations)}
            return {"metadata": {"annotations": notes}}
        case SetHold():
            return {"metadata": {"annotations": {action.key: action.text}}}
        case Annotate():
            return {"metadata": {"annotations": dict(action.annotations)}}
    raise TypeError(f"no patch body for {action!r}")
