"""Events about Nodes that kubectl shows (events.k8s.io/v1, in `default`, one per condition and
incident, counted in `series` when seen again), and Events about the pods on a GPU the guard
isolates (`emit_once`). The case list: docs/writes.md, "Events"."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from guard.actions import EmitEvent
from guard.doors.kube import AlreadyExists, Conflict, Kube, KubeError
from guard.doors.lease import micro_time, parse_micro
from guard.names import APP_LABEL, APP_NAME, NODE_EVENT_NAMESPACE, REPORTING_CONTROLLER

NOTE_LIMIT_BYTES = 1024  # events.k8s.io/v1 `note`
# Shorter than any CronJob interval (a minute at least), longer than two runs started together
# take to differ.
SAME_OBSERVATION_S = 30
FIELD_LIMIT = 128  # reason, action, reportingInstance
# `action` is required: what the guard did (or did not do) that the Event reports.
ACTIONS = {
    "GuardCordoned": "Cordon",
    "GuardReturned": "Uncordon",
    "GuardCancelled": "ClearAnnotations",
    "GuardHold": "SetHold",
    "GuardCheckFailed": "KeepCordoned",
    "GuardBreakerOpen": "SkipCordon",
    "GuardWaitingPowerCycle": "WaitPowerCycle",
    "GuardUnreadable": "SkipNode",
    "GuardLedgerArchived": "ArchiveLedger",
    "GuardOnboarded": "RemoveTaint",
    "GuardOnboardingFailed": "KeepTaint",
    "GuardForeignJob": "IgnoreJob",  # a Job of the guard's name that it did not make
    "GuardJobRejected": "KeepCordoned",  # its Pod refused by the node's kubelet: could not run
    "GuardFenced": "FenceGPU",  # the host fence of the cordon's GPU (guard/plan/fence.py)
    "GuardFenceGpuAbsent": "SkipFence",
    "GuardFenceLifted": "LiftFence",
    "GuardDeviceTainted": "TaintDevice",  # a DRA node's GPU (guard/plan/device_taint.py)
    "GuardNotIsolated": "SkipDeviceTaint",
    "GuardPastBudget": "KeepCordoned",  # past its quarantine budget (guard/plan/budget.py)
    "GuardGpuIsolated": "NotifyPod",  # a pod on the isolated GPU (guard/plan/workload.py)
    "GuardDomainIncident": "GroupDomain",  # nodes of one failure domain (guard/plan/domain.py)
}  # any other reason: "Observe"


@dataclass(frozen=True, slots=True)
class NodeRef:
    """What `regarding` needs of the node: kubectl matches the uid."""

    name: str
    uid: str
    resource_version: str


@dataclass(frozen=True, slots=True)
class Reporter:
    instance: str  # reportingInstance: the guard's pod (hostname)
    now: datetime  # the cycle's instant: eventTime and series.lastObservedTime


@dataclass(frozen=True, slots=True)
class Emitted:
    already: bool
    count: int  # 1 for a new Event, else its series count


def _note(message: str) -> str:
    data = message.encode()
    if len(data) <= NOTE_LIMIT_BYTES:
        return message
    return data[: NOTE_LIMIT_BYTES - 3].decode("utf-8", "ignore") + "..."


def body(action: EmitEvent, ref: NodeRef, reporter: Reporter) -> dict[str, Any]:
    namespace = NODE_EVENT_NAMESPACE
    regarding = {"apiVersion": "v1", "kind": "Node", "name": ref.name, "uid": ref.uid}
    regarding["resourceVersion"] = ref.resource_version
    if action.pod is not None:  # kubectl describe pod matches the uid, where one is known
        namespace = action.pod.namespace
        pod = action.pod
        regarding = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": pod.name}
        regarding["uid"] = pod.uid
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": action.name, "namespace": namespace, "labels": {APP_LABEL: APP_NAME}},
        "eventTime": micro_time(reporter.now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": (reporter.instance or APP_NAME)[:FIELD_LIMIT],
        "action": ACTIONS.get(action.event_reason, "Observe"),
        "reason": action.event_reason[:FIELD_LIMIT],
        "type": action.event_type,
        "note": _note(action.message),
        "regarding": {k: v for k, v in regarding.items() if v},
    }


def emit_once(kube: Kube, action: EmitEvent, reporter: Reporter) -> Emitted:
    """An Event about a Pod (guard.plan.workload), created once by its deterministic name (409:
    done): outside `default` the guard may only create Events (manifests/base/rbac.yaml)."""
    assert action.pod is not None
    try:
        made = body(action, NodeRef(action.node, "", ""), reporter)
        kube.create_event(action.pod.namespace, made)
    except (AlreadyExists, Conflict):
        return Emitted(True, 1)
    return Emitted(False, 1)


def emit(kube: Kube, action: EmitEvent, ref: NodeRef, reporter: Reporter) -> Emitted:
    """Create the Event, or count one more observation in its series (see the module's table)."""
    name, attempt = action.name, 0
    while True:
        attempt += 1
        found = kube.event(NODE_EVENT_NAMESPACE, name)
        try:
            if found is None:
                kube.create_event(NODE_EVENT_NAMESPACE, body(action, ref, reporter))
                return Emitted(False, 1)
            seen = found.get("series") or {}  # last seen: series.lastObservedTime, else eventTime
            last = parse_micro(str(seen.get("lastObservedTime") or found.get("eventTime") or ""))
            count = int(seen.get("count") or 1)
            if last is not None and last >= reporter.now - timedelta(seconds=SAME_OBSERVATION_S):
                return Emitted(True, count)
            rv = (found.get("metadata") or {}).get("resourceVersion", "")
            series = {"count": count + 1, "lastObservedTime": micro_time(reporter.now)}
            kube.patch_event(
                NODE_EVENT_NAMESPACE, name, {"metadata": {"resourceVersion": rv}, "series": series}
            )
            return Emitted(False, count + 1)
        except (AlreadyExists, Conflict):
            if not kube.backoff.wait(attempt):
                raise KubeError(f"event {name}: still conflicting after {attempt} tries") from None
