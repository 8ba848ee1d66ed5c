"""The guard's own node annotations: formats, parsers and values. A bad value is noted as an
`Unreadable` in `Problems`, never raised. ASCII only: ``\\d`` also accepts other scripts' digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from guard.ledger import UNKNOWN_PCI, format_time, parse_time
from guard.model import (
    CancelRecord,
    CordonRecord,
    GpuRef,
    Isolation,
    NodeInfo,
    ReturnRecord,
    Snapshot,
    Unreadable,
)
from guard.names import PRINTABLE_WORD, Annotations
from guard.pci import PciAddressError, normalize_pci
from guard.states import Reason, as_reason, xid_reason

_XID = re.compile(r"^xid-([0-9]{1,6})\Z", re.ASCII)
COUNT = re.compile(r"^[0-9]{1,6}\Z", re.ASCII)
JOB_REF = re.compile(r"^job/[a-z0-9]([-a-z0-9.]*[a-z0-9])?\Z", re.ASCII)
SHOWN = 120  # characters of a bad value repeated in a log line
T = TypeVar("T")

UNKNOWN_BOOT = "unknown"  # the boot id written into `cancelled` when the guard knew none
NO_GPU = "-"  # the GPU field of `cancelled` for a cordon without a GPU (nvml-mismatch)

# The format of each guard annotation, as a person would write it.
FORMATS = {
    "auto-cordon-reason": "xid-<n> (e.g. xid-79) or a reason word the guard writes (nvml-mismatch)",
    "auto-cordon-at": "an RFC 3339 time such as 2026-09-21T05:55:00Z",
    "auto-cordon-gpu-capacity": "a whole number of GPUs",
    "auto-cordon-gpu": "<pci 0000:99:00.0> <GPU-uuid>",
    "cancelled": "<bootID> <GPU-uuid> xid-<n> <RFC 3339 time>, or <bootID> - <reason> <time>",
    "returned": "<RFC 3339 time> job/<name>",
    "checked-boot": "<bootID> <RFC 3339 time> job/<name> (or uncordon)",
    "auto-cordon-pcie-links": "<pci>=<speed>GT/s,x<width> separated by spaces",
    "loadtest-result": "failed job/<name> at <RFC 3339 time>",
    "conformance-result": "failed job/<name> at <RFC 3339 time>",
    "conformance-failed": "<RFC 3339 time> job/<name> <item>[,<item>…]",
    "onboarding-failed": "<RFC 3339 time> job/<name> <item>[,<item>…]",
    **dict.fromkeys(
        ("job-loadtest", "job-conformance", "job-evidence", "job-fence"),
        "<job name> <uid> <16 hex digest> (the guard writes it at the Job's create)",
    ),
    "claim-loadtest": "<claim name> <uid> (the guard writes it at the claim's create)",
    "fence-jobs": "<uid> <uid> … (the guard's fence Jobs; it writes it at each fence Job's create)",
    "gpu-fence": "<fenced|gpu-absent|lifted> <bootID> <RFC 3339 time> job/<name>",
}


@dataclass
class Problems:
    """Collects what did not parse on one object."""

    node: str
    notes: Mapping[str, str] = field(default_factory=dict)
    prefix: str = ""  # the annotations' (`Annotations.prefix`)
    found: list[Unreadable] = field(default_factory=list)

    def annotation(self, key: str, suffix: str, value: str, why: str) -> None:
        fix = (
            f"write {FORMATS[suffix]} (kubectl annotate node {self.node} {key}=… --overwrite), "
            f"or remove it ({key}-); the guard leaves this node alone until then"
        )
        self.found.append(Unreadable(key, value[:SHOWN], why, fix))

    def parsed(self, key: str, parse: Callable[[str], T | str]) -> T | None:
        """`parse` of the annotation `key` (the record, or why not); None: absent or noted."""
        text = self.notes.get(key)
        if text is None:
            return None
        found = parse(text)
        if isinstance(found, str):
            self.annotation(key, key.removeprefix(self.prefix), text, found)
            return None
        return found

    def status(self, where: str, value: object, why: str) -> None:
        fix = f"check what the kubelet reports (kubectl get node {self.node} -o yaml)"
        self.found.append(Unreadable(where, _shown(value), why, fix))


def _shown(value: object) -> str:
    try:
        return repr(value)[:SHOWN]
    except RecursionError:
        return "<nested too deep to show>"


def cordon_record(k: Annotations, problems: Problems) -> CordonRecord | None:
    reason = problems.notes.get(k.reason)
    if reason is None:
        return None
    bad = len(problems.found)
    xid = _reason_xid(k.reason, reason, problems)
    word = xid_reason(xid) if xid is not None else as_reason(reason)
    at = problems.parsed(k.at, when)
    capacity = problems.parsed(
        k.gpu_capacity, lambda t: int(t) if COUNT.match(t) else "not a whole number"
    )
    gpu = problems.parsed(k.gpu, _gpu_ref)
    if len(problems.found) > bad or word is None:
        return None
    return CordonRecord(word, xid, at, problems.notes.get(k.boot_id, ""), capacity, gpu)


def _reason_xid(key: str, reason: str, problems: Problems) -> int | None:
    found = _XID.match(reason)
    if found:
        return int(found[1])
    if reason.startswith("xid-"):
        problems.annotation(key, "auto-cordon-reason", reason, "the Xid is not an ASCII number")
    elif as_reason(reason) is None:  # a word no planner writes (guard.states.Decision)
        problems.annotation(key, "auto-cordon-reason", reason, "not a reason word")
    return None


def when(text: str) -> datetime | str:
    """The RFC 3339 time `text`, or why it is none."""
    try:
        return parse_time(text)
    except ValueError as exc:
        return str(exc)


def _gpu_ref(text: str) -> GpuRef | str:
    parts = text.split(" ")
    if len(parts) != 2 or not all(PRINTABLE_WORD.match(p) for p in parts):
        return "not two fields separated by one space"
    try:
        return GpuRef(parts[0] if parts[0] == UNKNOWN_PCI else normalize_pci(parts[0]), parts[1])
    except PciAddressError as exc:
        return str(exc)


def parse_cancel(text: str) -> CancelRecord | str:
    parts = text.split(" ")
    if len(parts) != 4 or not all(PRINTABLE_WORD.match(p) for p in parts):
        return "not four fields separated by one space"
    boot, uuid, reason, at = parts
    xid = _XID.match(reason)
    without_gpu = uuid == NO_GPU and not reason.startswith("xid-") and as_reason(reason) is not None
    if xid is None and not without_gpu:
        return f"third field {reason!r} is not xid-<n> (or a reason word after a GPU field '-')"
    found = when(at)
    if isinstance(found, str):
        return found
    boot = "" if boot == UNKNOWN_BOOT else boot
    if xid is None:
        return CancelRecord(boot, "", None, found, reason)
    return CancelRecord(boot, uuid, int(xid[1]), found, reason)


def cancel_value(boot_id: str, uuid: str, xid: int, at: str) -> str:
    """The `cancelled` value (inverse of its parser; tests/unit/test_check_records.py)."""
    return f"{boot_id or UNKNOWN_BOOT} {uuid} xid-{xid} {at}"


def reason_cancel_value(boot_id: str, reason: str, at: str) -> str:
    """The `cancelled` value of a cordon without a GPU: the incident is its boot and reason."""
    return f"{boot_id or UNKNOWN_BOOT} {NO_GPU} {reason} {at}"


def parse_return(text: str) -> ReturnRecord | str:
    parts = text.split(" ")
    if len(parts) != 2 or not JOB_REF.match(parts[1]):
        return "not '<time> job/<name>'"
    at = when(parts[0])
    return at if isinstance(at, str) else ReturnRecord(at, parts[1])


def leading_time(text: str | None) -> datetime | None:
    """The RFC 3339 time a reset-done note starts with (``<time> by alice``), if it does.

    >>> leading_time("2026-09-22T01:00:00Z by alice").isoformat()
    '2026-09-22T01:00:00+00:00'
    >>> leading_time("done") is None
    True
    """
    found = when(text.split(" ", 1)[0]) if text else None
    return None if isinstance(found, str) else found


# ---- the device-taint record (guard.plan.device_taint) ----------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """The node's `device-taint` record, parsed."""

    reason: Reason
    at: datetime
    boot_id: str  # "" when the guard knew none
    pci: str
    uuid: str
    device: str  # <driver>/<pool>/<device>, comma-separated when the GPU has several devices
    rule: str  # one rule per device, comma-separated as `device`

    @property
    def xid(self) -> int:
        return int(self.reason.removeprefix("xid-"))

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(self.device.split(","))

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(self.rule.split(","))

    def value(self) -> str:
        head = (self.reason, format_time(self.at), self.boot_id or "-", self.pci, self.uuid)
        return " ".join((*head, self.device, self.rule))


_DEVICE = re.compile(r"xid-([1-9][0-9]{0,3}) (\S+) (\S+) (\S+) (GPU-[0-9a-fA-F-]{36}) (\S+) (\S+)")


def parse_record(text: str) -> DeviceRecord | None:
    """The record's fields; None when it is not of the form the guard writes.

    >>> r = parse_record("xid-79 2026-09-21T05:55:00Z b1 0000:18:00.0 "
    ...                  "GPU-11111111-2222-3333-4444-555555555555 gpu.nvidia.com/n/gpu-0 gng-dt-x")
    >>> r.xid, r.device, parse_record(r.value()) == r, parse_record("garbage")
    (79, 'gpu.nvidia.com/n/gpu-0', True, None)
    """
    found = _DEVICE.fullmatch(text.strip())
    if found is None:
        return None
    xid, at, boot, pci, uuid, device, rule = found.groups()
    stamp = when(at)
    if isinstance(stamp, str):
        return None
    return DeviceRecord(
        xid_reason(int(xid)), stamp, "" if boot == "-" else boot, pci, uuid, device, rule
    )


# ---- every isolation the guard holds, as one value each ----------------------------------------


def isolations(snap: Snapshot, k: Annotations) -> tuple[Isolation, ...]:
    """Every isolation the guard holds, one value each (`Isolation.key`): a node with the guard's
    cordon reason (readable or not), a device-taint record, and a guard DeviceTaintRule whose GPU
    no node record names (the record's patch did not land)."""
    found: dict[str, Isolation] = {}
    for node in snap.nodes:
        text = node.annotation(k.device_taint)
        for iso in (_cordon(node, k), None if text is None else _recorded(node.name, text)):
            if iso is not None:
                found.setdefault(iso.key, iso)
    for rule in snap.taint_rules:
        if rule.guard:
            iso = _recorded(rule.node, rule.record, rule.name)
            found.setdefault(iso.key, iso)
    return tuple(found.values())


def _cordon(node: NodeInfo, k: Annotations) -> Isolation | None:
    if not node.has(k.reason):
        return None
    c = node.cordon
    if c is None:
        return Isolation("cordon", node.name, "", "", "", None, "")
    gpu, pci = (c.gpu.uuid, c.gpu.pci) if c.gpu else ("", "")
    return Isolation("cordon", node.name, gpu, pci, c.reason, c.at, c.boot_id)


def _recorded(node: str, text: str, rule: str = "") -> Isolation:
    """A device-taint record's isolation; an unparsable one names only its node (and rule)."""
    rec = parse_record(text)
    if rec is None:
        return Isolation("device-taint", node, "", "", "", None, "", rule=rule)
    return Isolation("device-taint", node, rec.uuid, rec.pci, rec.reason, rec.at, rec.boot_id)
