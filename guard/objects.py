"""Cluster objects (plain dicts from the API or a List file) → model values, one object at a time.

Every value the guard reads from a Node or a Job is parsed here, once, into a typed field. A
value that does not parse becomes an `Unreadable` on its object (or a `problem` on a Job) and
never an exception, so one bad object cannot stop the cycle for the others. Parsing is ASCII
only: ``str.isdigit`` and ``\\d`` also accept superscripts and other scripts' digits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guard.ledger import UNKNOWN_PCI, parse_time
from guard.model import (
    CancelRecord,
    CordonRecord,
    GpuRef,
    JobInfo,
    JobStatus,
    NodeInfo,
    ReturnRecord,
    Unreadable,
)
from guard.names import APP_LABEL, APP_LABEL_VALUE, COMPONENT_LABEL, GPU_RESOURCE, Annotations
from guard.pci import PciAddressError, normalize_pci

_XID = re.compile(r"^xid-([0-9]{1,6})$", re.ASCII)
_REASON_WORD = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", re.ASCII)
_COUNT = re.compile(r"^[0-9]{1,6}$", re.ASCII)
_TOKEN = re.compile(r"^[!-~]+$", re.ASCII)  # printable ASCII, no space
_JOB_REF = re.compile(r"^job/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", re.ASCII)
_SHOWN = 120  # characters of a bad value repeated in a log line

UNKNOWN_BOOT = "unknown"  # the boot id written into `cancelled` when the guard knew none

# The format of each guard annotation, as a person would write it.
FORMATS = {
    "auto-cordon-reason": "xid-<n> (e.g. xid-79) or a reason word of a-z, 0-9 and -",
    "auto-cordon-at": "an RFC 3339 time such as 2026-09-21T05:55:00Z",
    "auto-cordon-gpu-capacity": "a whole number of GPUs",
    "auto-cordon-gpu": "<pci 0000:99:00.0> <GPU-uuid>",
    "cancelled": "<bootID> <GPU-uuid> xid-<n> <RFC 3339 time>",
    "returned": "<RFC 3339 time> job/<name>",
}


class NamelessObject(ValueError):
    """An object without a usable metadata.name: it cannot be attributed, only reported."""


@dataclass
class _Problems:
    """Collects what did not parse on one object."""

    node: str
    found: list[Unreadable] = field(default_factory=list)

    def annotation(self, key: str, suffix: str, value: str, why: str) -> None:
        fix = (
            f"write {FORMATS[suffix]} (kubectl annotate node {self.node} {key}=… --overwrite), "
            f"or remove it ({key}-); the guard leaves this node alone until then"
        )
        self.found.append(Unreadable(key, value[:_SHOWN], why, fix))

    def status(self, where: str, value: object, why: str) -> None:
        fix = f"check what the kubelet reports (kubectl get node {self.node} -o yaml)"
        self.found.append(Unreadable(where, repr(value)[:_SHOWN], why, fix))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def object_name(obj: Mapping[str, Any]) -> str:
    """metadata.name; raises NamelessObject when there is none."""
    name = _mapping(obj.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        raise NamelessObject(f"{obj.get('kind', 'object')} without metadata.name")
    return name


# ---- Nodes ----------------------------------------------------------------------------------


def node_info(obj: Mapping[str, Any], keys: Annotations) -> NodeInfo:
    """Parse one Node; raises NamelessObject only when it has no name."""
    name = object_name(obj)
    meta, status = _mapping(obj.get("metadata")), _mapping(obj.get("status"))
    problems = _Problems(name)
    raw = _mapping(meta.get("annotations"))
    own = tuple(sorted((k, str(v)) for k, v in raw.items() if str(k).startswith(keys.prefix)))
    notes = dict(own)
    unschedulable = _mapping(obj.get("spec")).get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        problems.status("spec.unschedulable", unschedulable, "not true or false")
        unschedulable = False
    boot = _mapping(status.get("nodeInfo")).get("bootID", "")
    if not isinstance(boot, str):
        problems.status("status.nodeInfo.bootID", boot, "not text")
        boot = ""
    cancelled, returned = _records(notes, keys, problems)
    reset_done = notes.get(keys.reset_done)
    return NodeInfo(
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        unschedulable=unschedulable,
        ready=_ready(status.get("conditions"), problems),
        boot_id=boot,
        gpu_capacity=_gpus(status, "capacity", problems),
        gpu_allocatable=_gpus(status, "allocatable", problems),
        annotations=own,
        uid=str(meta.get("uid", "")),
        cordon=_cordon(notes, keys, problems),
        hold=notes.get(keys.hold),
        reset_done=reset_done,
        reset_done_at=_leading_time(reset_done),
        loadtest_result=notes.get(keys.loadtest_result, ""),
        conformance_result=notes.get(keys.conformance_result, ""),
        cancelled=cancelled,
        returned=returned,
        unreadable=tuple(problems.found),
    )


def _ready(conditions: object, problems: _Problems) -> bool:
    if conditions is None:
        return False
    if not isinstance(conditions, list) or not all(isinstance(c, Mapping) for c in conditions):
        problems.status("status.conditions", conditions, "not a list of conditions")
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpus(status: Mapping[str, Any], part: str, problems: _Problems) -> int:
    value = _mapping(status.get(part)).get(GPU_RESOURCE)
    if value is None or value == "":
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6:
        return value
    if isinstance(value, str) and _COUNT.match(value):
        return int(value)
    problems.status(f"status.{part}[{GPU_RESOURCE}]", value, "not a whole number of GPUs")
    return 0


def _cordon(notes: Mapping[str, str], k: Annotations, problems: _Problems) -> CordonRecord | None:
    reason = notes.get(k.reason)
    if reason is None:
        return None
    bad = len(problems.found)
    xid = _reason_xid(k.reason, reason, problems)
    at = _time(notes, k.at, "auto-cordon-at", problems)
    capacity = notes.get(k.gpu_capacity)
    if capacity is not None and not _COUNT.match(capacity):
        problems.annotation(k.gpu_capacity, "auto-cordon-gpu-capacity", capacity,
                            "not a whole number")  # fmt: skip
        capacity = None
    gpu = _gpu_ref(notes.get(k.gpu), k.gpu, problems)
    if len(problems.found) > bad:
        return None
    return CordonRecord(
        reason=reason,
        xid=xid,
        at=at,
        boot_id=notes.get(k.boot_id, ""),
        gpu_capacity=int(capacity) if capacity is not None else None,
        gpu=gpu,
    )


def _reason_xid(key: str, reason: str, problems: _Problems) -> int | None:
    found = _XID.match(reason)
    if found:
        return int(found[1])
    if reason.startswith("xid-"):
        problems.annotation(key, "auto-cordon-reason", reason, "the Xid is not an ASCII number")
    elif not _REASON_WORD.match(reason):
        problems.annotation(key, "auto-cordon-reason", reason, "not a reason word")
    return None


def _time(notes: Mapping[str, str], key: str, suffix: str, problems: _Problems) -> datetime | None:
    text = notes.get(key)
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        problems.annotation(key, suffix, text, str(exc))
        return None


def _gpu_ref(text: str | None, key: str, problems: _Problems) -> GpuRef | None:
    if text is None:
        return None
    parts = text.split(" ")
    why = ""
    if len(parts) != 2 or not all(_TOKEN.match(p) for p in parts):
        why = "not two fields separated by one space"
    else:
        try:
            pci = parts[0] if parts[0] == UNKNOWN_PCI else normalize_pci(parts[0])
        except PciAddressError as exc:
            why = str(exc)
        else:
            return GpuRef(pci, parts[1])
    problems.annotation(key, "auto-cordon-gpu", text, why)
    return None


def _records(
    notes: Mapping[str, str], k: Annotations, problems: _Problems
) -> tuple[CancelRecord | None, ReturnRecord | None]:
    cancelled: CancelRecord | None = None
    returned: ReturnRecord | None = None
    if (text := notes.get(k.cancelled)) is not None:
        parsed_cancel = _cancel(text)
        if isinstance(parsed_cancel, str):
            problems.annotation(k.cancelled, "cancelled", text, parsed_cancel)
        else:
            cancelled = parsed_cancel
    if (text := notes.get(k.returned)) is not None:
        parsed_return = _return(text)
        if isinstance(parsed_return, str):
            problems.annotation(k.returned, "returned", text, parsed_return)
        else:
            returned = parsed_return
    return cancelled, returned


def _cancel(text: str) -> CancelRecord | str:
    """The record, or why it does not parse."""
    parts = text.split(" ")
    if len(parts) != 4 or not all(_TOKEN.match(p) for p in parts):
        return "not four fields separated by one space"
    boot, uuid, reason, at = parts
    xid = _XID.match(reason)
    if xid is None:
        return f"third field {reason!r} is not xid-<n>"
    try:
        when = parse_time(at)
    except ValueError as exc:
        return str(exc)
    return CancelRecord("" if boot == UNKNOWN_BOOT else boot, uuid, int(xid[1]), when)


def cancel_value(boot_id: str, uuid: str, xid: int, at: str) -> str:
    """The `cancelled` annotation value (inverse of the parser above).

    >>> cancel_value("", "GPU-1a", 79, "2026-09-21T06:00:00Z")
    'unknown GPU-1a xid-79 2026-09-21T06:00:00Z'
    """
    return f"{boot_id or UNKNOWN_BOOT} {uuid} xid-{xid} {at}"


def _return(text: str) -> ReturnRecord | str:
    parts = text.split(" ")
    if len(parts) != 2 or not _JOB_REF.match(parts[1]):
        return "not '<time> job/<name>'"
    try:
        return ReturnRecord(parse_time(parts[0]), parts[1])
    except ValueError as exc:
        return str(exc)


def _leading_time(text: str | None) -> datetime | None:
    """The RFC 3339 time a reset-done note starts with (``<time> by alice``), if it does.

    >>> _leading_time("2026-09-22T01:00:00Z by alice").isoformat()
    '2026-09-22T01:00:00+00:00'
    >>> _leading_time("done") is None
    True
    """
    if not text:
        return None
    try:
        return parse_time(text.split(" ", 1)[0])
    except ValueError:
        return None


def slim_node(obj: Mapping[str, Any], keys: Annotations) -> dict[str, Any]:
    """The few fields of a Node the guard reads; a full Node is ~10 kB, 5,000 of them ~300 MB.

    >>> slim_node({"metadata": {"name": "n", "labels": {"a": "b"}}, "status": {"images": [1]}},
    ...           Annotations("gpu-node-guard.io/"))["metadata"]
    {'name': 'n', 'uid': '', 'resourceVersion': '', 'annotations': {}}
    """
    meta, status = _mapping(obj.get("metadata")), _mapping(obj.get("status"))
    notes = {
        k: v for k, v in _mapping(meta.get("annotations")).items() if k.startswith(keys.prefix)
    }
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        conditions = [c for c in conditions if _mapping(c).get("type") == "Ready"]
    return {
        "kind": "Node",
        "metadata": {"name": meta.get("name", ""), "uid": meta.get("uid", ""),
                     "resourceVersion": meta.get("resourceVersion", ""), "annotations": notes},
        "spec": {"unschedulable": _mapping(obj.get("spec")).get("unschedulable", False)},
        "status": {
            "conditions": conditions,
            "nodeInfo": {"bootID": _mapping(status.get("nodeInfo")).get("bootID", "")},
            "capacity": {GPU_RESOURCE: _mapping(status.get("capacity")).get(GPU_RESOURCE)},
            "allocatable": {GPU_RESOURCE: _mapping(status.get("allocatable")).get(GPU_RESOURCE)},
        },
    }  # fmt: skip


# ---- Jobs -----------------------------------------------------------------------------------


def is_guard_job(obj: Mapping[str, Any], namespace: str) -> bool:
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    return (
        labels.get(APP_LABEL) == APP_LABEL_VALUE and meta.get("namespace", namespace) == namespace
    )


def job_info(obj: Mapping[str, Any], keys: Annotations) -> JobInfo:
    """Parse one of the guard's Jobs; a status it cannot read is ``unreadable`` with a problem.

    Raises NamelessObject only when the Job has no name.
    """
    name = object_name(obj)
    meta = _mapping(obj.get("metadata"))
    labels, notes = _mapping(meta.get("labels")), _mapping(meta.get("annotations"))
    node = notes.get(keys.node_label) or labels.get(keys.node_label, "")
    kind = labels.get(COMPONENT_LABEL, "")
    state, problem = _job_status(obj.get("status"))
    return JobInfo(name, str(kind), str(node), state, problem)


def _job_status(status: object) -> tuple[JobStatus, str]:
    if status is None:
        return "running", ""
    if not isinstance(status, Mapping):
        return "unreadable", f"status is not an object: {status!r}"[:_SHOWN]
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list) or not all(isinstance(c, Mapping) for c in conditions):
        return "unreadable", f"status.conditions is not a list: {conditions!r}"[:_SHOWN]
    for counter in ("succeeded", "failed", "active"):
        value = status.get(counter, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            return "unreadable", f"status.{counter} is not a number: {value!r}"[:_SHOWN]
    by_type = {c.get("type"): c.get("status") for c in conditions}
    if status.get("succeeded") or by_type.get("Complete") == "True":
        return "succeeded", ""
    if status.get("failed") or by_type.get("Failed") == "True":
        return "failed", ""
    return "running", ""
