"""Cluster objects (plain dicts) → model values, one object at a time. A value that does not
parse becomes an `Unreadable` on its object (or a Job's `problem`), never an exception."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from guard.codec import check_records as checks
from guard.codec.records import (
    COUNT,
    Problems,
    cordon_record,
    leading_time,
    parse_cancel,
    parse_return,
)
from guard.jobs import run_digest, spec_digest
from guard.ledger import parse_time
from guard.model import Claim, DraDevice, JobInfo, JobStatus, NodeInfo, Taint, TaintRule
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    DRA_DRIVER,
    GPU_RESOURCE,
    Annotations,
    is_dns_label,
    is_dns_subdomain,
)
from guard.pci import PciAddressError, normalize_pci

_SHOWN = 120  # characters of a bad value repeated in a log line


class NamelessObject(ValueError):
    """An object without a usable metadata.name: it cannot be attributed, only reported."""


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def object_name(obj: Mapping[str, Any]) -> str:
    """metadata.name; raises NamelessObject when there is none."""
    name = mapping(obj.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        raise NamelessObject(f"{obj.get('kind', 'object')} without metadata.name")
    return name


def node_info(
    obj: Mapping[str, Any], keys: Annotations, label_keys: frozenset[str] = frozenset()
) -> NodeInfo:
    """Parse one Node (NamelessObject when it has no name); of its hundreds of labels only
    `label_keys` are kept."""
    name = object_name(obj)
    meta, status = mapping(obj.get("metadata")), mapping(obj.get("status"))
    raw = mapping(meta.get("annotations"))
    own = tuple(sorted((k, str(v)) for k, v in raw.items() if str(k).startswith(keys.prefix)))
    problems = Problems(name, dict(own), keys.prefix)
    read = problems.parsed
    unschedulable = mapping(obj.get("spec")).get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        problems.status("spec.unschedulable", unschedulable, "not true or false")
        unschedulable = False
    boot = mapping(status.get("nodeInfo")).get("bootID", "")
    if not isinstance(boot, str):
        problems.status("status.nodeInfo.bootID", boot, "not text")
        boot = ""
    reset_done = problems.notes.get(keys.reset_done)
    labels = mapping(meta.get("labels")).items()
    # Keyword order is the order the problems are noted in.
    return NodeInfo(
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        unschedulable=unschedulable,
        boot_id=boot,
        cancelled=read(keys.cancelled, parse_cancel),
        returned=read(keys.returned, parse_return),
        checked_boot=read(keys.checked_boot, checks.parse_checked_boot),
        pcie_links=read(keys.pcie_links, checks.parse_links) or (),
        conformance_failed=read(keys.conformance_failed, checks.parse_failed_check),
        onboarding_failed=read(keys.onboarding_failed, checks.parse_failed_check),
        ready=_ready(status.get("conditions"), problems),
        gpu_capacity=_gpus(status, "capacity", problems),
        gpu_allocatable=_gpus(status, "allocatable", problems),
        annotations=own,
        uid=str(meta.get("uid", "")),
        cordon=cordon_record(keys, problems),
        hold=problems.notes.get(keys.hold),
        reset_done=reset_done,
        reset_done_at=leading_time(reset_done),
        loadtest_result=checks.result_record(problems, keys.loadtest_result),
        conformance_result=checks.result_record(problems, keys.conformance_result),
        taints=_taints(mapping(obj.get("spec")).get("taints"), problems),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels if str(k) in label_keys)),
        job_records=checks.job_records(keys, problems),
        claim_record=read(keys.loadtest_claim, checks.parse_claim),
        fence=read(keys.fence, checks.parse_fence),
        fence_jobs=read(keys.fence_jobs, checks.parse_fence_jobs) or (),
        unreadable=tuple(problems.found),
    )


def _taints(value: object, problems: Problems) -> tuple[Taint, ...]:
    if value is None:
        return ()
    fields = ("key", "value", "effect", "timeAdded")
    if not isinstance(value, list) or not all(
        isinstance(t, Mapping) and all(isinstance(t.get(f, ""), str) for f in fields) for t in value
    ):
        problems.status("spec.taints", value, "not a list of taints")
        return ()
    return tuple(
        Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""), t.get("timeAdded", ""))
        for t in value
    )


def _ready(conditions: object, problems: Problems) -> bool:
    if conditions is None:
        return False
    if not isinstance(conditions, list) or not all(isinstance(c, Mapping) for c in conditions):
        problems.status("status.conditions", conditions, "not a list of conditions")
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpus(status: Mapping[str, Any], part: str, problems: Problems) -> int:
    value = mapping(status.get(part)).get(GPU_RESOURCE)
    if value is None or value == "":
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6:
        return value
    if isinstance(value, str) and COUNT.match(value):
        return int(value)
    problems.status(f"status.{part}[{GPU_RESOURCE}]", value, "not a whole number of GPUs")
    return 0


def is_guard_job(obj: Mapping[str, Any], namespace: str) -> bool:
    meta = mapping(obj.get("metadata"))
    labels = mapping(meta.get("labels"))
    return labels.get(APP_LABEL) == APP_NAME and meta.get("namespace", namespace) == namespace


def job_info(obj: Mapping[str, Any], keys: Annotations) -> JobInfo:
    """Parse one of the guard's Jobs (NamelessObject when it has no name); a status it cannot
    read is ``unreadable`` with a problem."""
    name = object_name(obj)
    meta = mapping(obj.get("metadata"))
    labels, notes = mapping(meta.get("labels")), mapping(meta.get("annotations"))
    node = notes.get(keys.node_label) or labels.get(keys.node_label, "")
    kind = labels.get(COMPONENT_LABEL, "")
    state, problem = _job_status(obj.get("status"))
    # Who it is, not what it is called: its uid and what its template runs, for the node's record
    # of what the guard made (a Job of the same name made by someone else differs in one of them).
    pod_spec = mapping(mapping(mapping(obj.get("spec")).get("template")).get("spec"))
    return JobInfo(
        name,
        str(kind),
        str(node),
        state,
        problem,
        uid=str(meta.get("uid", "")),
        digest=spec_digest(obj),
        run=run_digest(pod_spec),
        created=_created(meta.get("creationTimestamp")),
        ended=_ended(obj.get("status")) if state in ("succeeded", "failed") else None,
        fence_mode=_fence_mode(pod_spec) if kind == "fence" else "",
    )


def _fence_mode(pod_spec: Mapping[str, Any]) -> str:
    """`set` or `lift`: the word after `fence` in the first container's command and args (the
    fence policy admits no other argv); "" when it reads otherwise."""
    containers = pod_spec.get("containers")
    first = mapping(containers[0]) if isinstance(containers, list) and containers else {}
    words = [*(first.get("command") or []), *(first.get("args") or [])]
    at = words.index("fence") if "fence" in words else -1
    mode = words[at + 1] if 0 <= at < len(words) - 1 else ""
    return mode if mode in ("set", "lift") else ""


def _created(value: object) -> datetime | None:
    """metadata.creationTimestamp; None when absent or not a time (a hand-made file)."""
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _ended(status: object) -> datetime | None:
    """A finished Job's status.completionTime, else its Complete/Failed condition's time."""
    st, ends = mapping(status), ("Complete", "Failed")
    at = [c.get("lastTransitionTime") for c in st.get("conditions") or () if c.get("type") in ends]
    return next(filter(None, map(_created, [st.get("completionTime"), *at])), None)


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


# ---- DRA: the GPU driver's ResourceSlices and the DeviceTaintRules ---------------------------
# A device without a valid name, or naming no GPU (by UUID, MIG parent UUID or PCI address), is
# dropped: the guard cannot select it. Rules are read as they are; the guard acts on its own.

GPU_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def _string_attribute(attributes: Mapping[str, Any], name: str) -> str:
    """A string attribute by its short name or qualified with the driver's domain."""
    for key in (name, f"{DRA_DRIVER}/{name}"):
        value = mapping(attributes.get(key)).get("string")
        if isinstance(value, str):
            return value
    return ""


def is_pool(name: str) -> bool:
    """A pool name: DNS subdomains separated by '/', at most 253 characters."""
    return len(name) <= 253 and all(is_dns_subdomain(part) for part in name.split("/"))


def devices(slices: Iterable[Mapping[str, Any]]) -> tuple[DraDevice, ...]:
    """The GPUs of the driver's node-local ResourceSlices, sorted by node, pool and name.

    >>> slice_ = {"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"},
    ...           "devices": [{"name": "gpu-0", "attributes": {
    ...               "uuid": {"string": "GPU-11111111-2222-3333-4444-555555555555"},
    ...               "pcieBusID": {"string": "00000000:18:00.0"}}}]}}
    >>> devices([slice_])[0].pci, devices([slice_])[0].ref
    ('0000:18:00.0', 'gpu.nvidia.com/n1/gpu-0')
    """
    out: set[DraDevice] = set()
    for obj in slices:
        spec = mapping(obj.get("spec"))
        node, pool = spec.get("nodeName"), mapping(spec.get("pool")).get("name")
        if spec.get("driver") != DRA_DRIVER or not isinstance(node, str) or not node:
            continue
        if not isinstance(pool, str) or not is_pool(pool):
            continue
        listed = spec.get("devices")
        for device in listed if isinstance(listed, list) else ():
            if (d := _device(node, pool, mapping(device))) is not None:
                out.add(d)
    return tuple(sorted(out, key=lambda d: (d.node, d.pool, d.name)))


def _device(node: str, pool: str, device: Mapping[str, Any]) -> DraDevice | None:
    name = device.get("name")
    if not isinstance(name, str) or not is_dns_label(name):
        return None
    attributes = mapping(device.get("attributes"))
    uuid = _string_attribute(attributes, "uuid")
    parent = _string_attribute(attributes, "parentUUID")
    try:
        pci = normalize_pci(_string_attribute(attributes, "pcieBusID"))
    except PciAddressError:
        pci = ""
    if GPU_UUID.fullmatch(uuid):  # a whole GPU
        return DraDevice(node, DRA_DRIVER, pool, name, uuid, pci)
    if GPU_UUID.fullmatch(parent):  # a MIG device (uuid MIG-…) of that GPU
        return DraDevice(node, DRA_DRIVER, pool, name, "", pci, parent)
    if pci and (not uuid or uuid.startswith("MIG-")):  # no uuid: the GPU (or its part) by PCI
        return DraDevice(node, DRA_DRIVER, pool, name, "", pci)
    return None


def taint_rules(rules: Iterable[Mapping[str, Any]], keys: Annotations) -> tuple[TaintRule, ...]:
    """Every DeviceTaintRule as read, sorted by name; `guard` for those with the guard's label."""
    out = []
    for obj in rules:
        meta, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            continue
        notes = mapping(meta.get("annotations"))
        fields = {
            **{f: mapping(spec.get("deviceSelector")).get(f) for f in ("driver", "pool", "device")},
            **{f: mapping(spec.get("taint")).get(f) for f in ("key", "value", "effect")},
            "node": notes.get(keys.node_label),
            "record": notes.get(keys.device_taint),
        }
        guard = mapping(meta.get("labels")).get(APP_LABEL) == APP_NAME
        text = {f: str(v or "") for f, v in fields.items()}
        out.append(TaintRule(name=name, uid=str(meta.get("uid", "")), guard=guard, **text))
    return tuple(sorted(out, key=lambda r: r.name))


def claims(found: Iterable[Mapping[str, Any]]) -> tuple[Claim, ...]:
    """The jobs namespace's ResourceClaims as read, sorted by name: uid and allocated devices.

    >>> claims([{"metadata": {"name": "c", "uid": "u"}, "status": {"allocation": {"devices": {
    ...     "results": [{"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3"}]}}}}])
    (Claim(name='c', uid='u', allocated=('gpu.nvidia.com/n1/gpu-3',)),)
    """
    out = []
    for obj in found:
        meta = mapping(obj.get("metadata"))
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            continue
        allocation = mapping(mapping(obj.get("status")).get("allocation"))
        results = mapping(allocation.get("devices")).get("results")
        refs = tuple(
            "/".join(str(mapping(r).get(f) or "") for f in ("driver", "pool", "device"))
            for r in (results if isinstance(results, list) else ())
        )
        out.append(Claim(name, str(meta.get("uid", "")), refs))
    return tuple(sorted(out, key=lambda c: c.name))
