"""Node patches: one merge patch with a resourceVersion precondition, never resent stale. On 409
the node is re-read: holding the change → already-done; the precondition gone → skipped
(changed-under-us); else rebuilt and sent again, `PATCH_TRIES` in all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

from guard.actions import (
    Annotate,
    ClearGuardAnnotations,
    Cordon,
    RecordBoot,
    RemoveTaint,
    SetHold,
    Uncordon,
)
from guard.apply.outcome import Outcome
from guard.doors.kube import Conflict, Kube, KubeError
from guard.model import NodeInfo
from guard.names import Annotations
from guard.read.objects import node_info

PATCH_TRIES = 3
NodePatch = (
    Cordon | Uncordon | ClearGuardAnnotations | SetHold | Annotate | RecordBoot | RemoveTaint
)


@dataclass(frozen=True, slots=True)
class Patched:
    outcome: Outcome
    node: dict[str, Any] | None = None  # the Node as the API answered the patch that landed


def patch(kube: Kube, keys: Annotations, action: NodePatch) -> Patched:
    """Apply one node action; KubeError when the API refuses it or stays unreachable."""
    rv, fresh = action.resource_version, None
    for _ in range(PATCH_TRIES):
        body = _body(keys, action, fresh)
        body.setdefault("metadata", {})["resourceVersion"] = rv
        try:
            return Patched(Outcome(action, "applied"), kube.patch_node(action.node, body))
        except Conflict:
            fresh = node_info(kube.node(action.node), keys)
            if holds(keys, action, fresh):
                return Patched(Outcome(action, "already-done", "already-done", "the node holds it"))
            why = _changed(keys, action, fresh)
            if why:
                return Patched(Outcome(action, "skipped", "changed-under-us", why))
            rv = fresh.resource_version
    raise KubeError(f"patch node {action.node}: still conflicting after {PATCH_TRIES} tries")


def holds(keys: Annotations, action: NodePatch, fresh: NodeInfo) -> bool:
    """The node already carries this change."""
    match action:
        case Cordon():
            mine = dict(action.annotations)
            return fresh.unschedulable and all(
                fresh.annotation(key) == mine.get(key) for key in (keys.reason, keys.at)
            )
        case Uncordon() | ClearGuardAnnotations() | RemoveTaint():
            landed = _landed(fresh, action.clear_keys, action.annotations)
            if isinstance(action, Uncordon):
                return landed and not fresh.unschedulable
            return landed and not (isinstance(action, RemoveTaint) and action.taint in fresh.taints)
        case SetHold():
            return fresh.annotation(action.key) == action.text
        case Annotate() | RecordBoot():
            return all(fresh.annotation(key) == value for key, value in action.annotations)
        case _:
            assert_never(action)


def _changed(keys: Annotations, action: NodePatch, fresh: NodeInfo) -> str:
    """Why the action no longer applies to the node as it is now; empty when it still does."""
    if isinstance(action, Cordon):
        if fresh.unschedulable:
            return "node was cordoned by someone else"
        if fresh.annotation(keys.hold) is not None:
            return "node now carries hold"
        if fresh.annotation(keys.reason) is not None:
            return "node already carries the guard's cordon"
        return ""
    if isinstance(action, RecordBoot | RemoveTaint):
        return _lifecycle_changed(keys, action, fresh)
    if isinstance(action, Annotate) and all(
        k in keys.lifecycle_keys for k, _ in action.annotations
    ):
        return ""  # the onboarding gate's record: it depends on no cordon
    if fresh.annotation(keys.reason) is None:
        return "guard annotations are gone"
    if isinstance(action, Uncordon):
        if not fresh.unschedulable:
            return "node was uncordoned meanwhile"
        if fresh.annotation(keys.hold) is not None:
            return "node now carries hold"
    if isinstance(action, ClearGuardAnnotations) and fresh.unschedulable:
        return "node was cordoned again"
    return ""


def _lifecycle_changed(keys: Annotations, action: RecordBoot | RemoveTaint, fresh: NodeInfo) -> str:
    """A passed check belongs to the boot it ran on, and is recorded only outside a cordon."""
    if fresh.boot_id != action.boot_id:
        return f"node rebooted meanwhile (bootID {fresh.boot_id or 'unknown'})"
    if isinstance(action, RecordBoot) and fresh.unschedulable:
        return "node was cordoned meanwhile"
    if isinstance(action, RemoveTaint) and action.taint not in fresh.taints:
        return "the gate taint is gone"
    return ""


def _body(keys: Annotations, action: NodePatch, fresh: NodeInfo | None) -> dict[str, Any]:
    match action:
        case Cordon():
            notes: dict[str, str | None] = dict.fromkeys(action.clear_keys)
            notes.update(action.annotations)
            if fresh is not None:  # the node moved on: record what it is now
                notes[keys.boot_id] = fresh.boot_id
                notes[keys.gpu_capacity] = str(fresh.gpu_capacity)
            return {"metadata": {"annotations": notes}, "spec": {"unschedulable": True}}
        case Uncordon() | ClearGuardAnnotations() | RemoveTaint():
            cleared = {**dict.fromkeys(action.clear_keys), **dict(action.annotations)}
            body: dict[str, Any] = {"metadata": {"annotations": cleared}}
            if isinstance(action, Uncordon):
                body["spec"] = {"unschedulable": False}
            elif isinstance(action, RemoveTaint):
                kept = (
                    action.keep if fresh is None else [t for t in fresh.taints if t != action.taint]
                )
                body["spec"] = {"taints": [t.as_dict() for t in kept]}
            return body
        case SetHold():
            return {"metadata": {"annotations": {action.key: action.text}}}
        case Annotate() | RecordBoot():
            return {"metadata": {"annotations": dict(action.annotations)}}
        case _:
            assert_never(action)


def _landed(node: NodeInfo, cleared: tuple[str, ...], written: tuple[tuple[str, str], ...]) -> bool:
    """Every key the patch removes is gone and every key it sets has its value."""
    kept = {key for key, _ in written}
    return all(node.annotation(key) is None for key in cleared if key not in kept) and all(
        node.annotation(key) == value for key, value in written
    )
