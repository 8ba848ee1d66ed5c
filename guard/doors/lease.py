"""The cycle's Lease: two runs never decide at the same time, and one cordon per cron slot across
runs (the `isolated-slot` record). The case list: docs/architecture.md, "Lease".
"""

from __future__ import annotations

import math
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from guard.doors.kube import Conflict, Kube
from guard.names import APP_LABEL, APP_NAME, CYCLE_LEASE
from guard.settings import LEASE_MAX_S

_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"  # the API's MicroTime
SKEW_S = 30  # the nodes' clocks agree within this (NTP): a renewal further ahead is forged


def holder_identity(hostname: str | None = None, pid: int | None = None) -> str:
    """`<hostname>-<pid>` in the form the guard-scope policy admits (LEASE_HOLDER_PATTERN)."""
    host = re.sub(r"[^a-z0-9.-]", "-", (hostname or socket.gethostname()).lower())
    host = host.strip(".-")[:240] or "host"
    return f"{host}-{os.getpid() if pid is None else pid}"


def slot_key(annotation_prefix: str) -> str:
    """The Lease's annotation naming the cron slot (RFC 3339) of the last cordon that landed."""
    return f"{annotation_prefix}isolated-slot"


def micro_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime(_MICRO)


def parse_micro(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def forged(lease: dict[str, Any], now: datetime) -> str:
    """Why `lease` cannot have been written by a run, else "" (tests/unit/test_lease_forged.py)."""
    spec = lease.get("spec") or {}
    written = spec.get("renewTime") or spec.get("acquireTime")
    renewed = parse_micro(written)
    if renewed is not None and renewed > now + timedelta(seconds=SKEW_S):
        return f"renewed in the future ({written})"
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration > LEASE_MAX_S:
        return f"leaseDurationSeconds {duration}, longer than any run writes ({LEASE_MAX_S})"
    return ""


def held_by_other(lease: dict[str, Any], holder: str, now: datetime) -> str:
    """The other holder that still holds `lease` at `now`, else "" (free, expired, or ours)."""
    spec = lease.get("spec") or {}
    other = str(spec.get("holderIdentity") or "")
    if not other or other == holder:
        return ""
    renewed = parse_micro(spec.get("renewTime")) or parse_micro(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return other  # a Lease the guard cannot read the expiry of is not free
    try:
        return other if now < renewed + timedelta(seconds=duration) else ""
    except OverflowError:  # past the year 9999: held (and forged)
        return other


def lease_seconds(now: datetime, most: int, expires_by: datetime | None) -> int:
    """`leaseDurationSeconds` written at `now`: `most`, ending by `expires_by` (the next cron
    slot), at least 1 (the API's minimum)."""
    if expires_by is None:
        return most
    return max(1, min(most, math.floor((expires_by - now).total_seconds())))


@dataclass
class CycleLease:
    kube: Kube
    namespace: str
    holder: str  # the pod's name and the process id: unique per run
    duration_s: int
    slot_key: str  # the annotation that names the slot of the last isolation
    expires_by: datetime | None = None  # the next cron slot's start: no renewal reaches past it
    isolated: str = ""  # this run's slot, from the renewal before its cordon
    found: str = ""  # the record as this run found it (written back by `unrecord`)
    taken_over: tuple[str, str] | None = None  # (holder, why) when take() took a forged one
    _lease: dict[str, Any] | None = None

    def isolated_slot(self) -> str:
        """The slot of the last isolation, as the Lease said when this run read it."""
        meta = (self._lease or {}).get("metadata") or {}
        return str((meta.get("annotations") or {}).get(self.slot_key, ""))

    def _body(self, now: datetime, acquire: bool) -> dict[str, Any]:
        old = self._lease or {}
        spec = dict(old.get("spec") or {})
        spec.update(
            holderIdentity=self.holder,
            leaseDurationSeconds=lease_seconds(now, self.duration_s, self.expires_by),
            renewTime=micro_time(now),
        )
        if acquire:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + bool(old)
        meta: dict[str, Any] = {
            "name": CYCLE_LEASE,
            "namespace": self.namespace,
            "labels": {APP_LABEL: APP_NAME},
        }
        notes = dict((old.get("metadata") or {}).get("annotations") or {})
        record = self.isolated or self.found
        if record:
            notes[self.slot_key] = record
        else:
            notes.pop(self.slot_key, None)
        if notes:
            meta["annotations"] = notes
        if old:
            meta["resourceVersion"] = str((old.get("metadata") or {}).get("resourceVersion", ""))
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def take(self, now: datetime) -> str:
        """ "" when this run holds the Lease now; else who holds it (the case list above)."""
        self._lease = self.kube.lease(self.namespace, CYCLE_LEASE)
        self.found = self.isolated_slot()
        if self._lease is not None:
            other = held_by_other(self._lease, self.holder, now)
            why = forged(self._lease, now) if other else ""
            if other and not why:
                return other
            self.taken_over = (other, why) if why else None
        body = self._body(now, True)
        try:
            if self._lease is None:
                self._lease = self.kube.create_lease(self.namespace, body)
            else:
                self._lease = self.kube.replace_lease(self.namespace, CYCLE_LEASE, body)
        except Conflict:  # AlreadyExists is one: another run created or took it first
            return "another run"
        return ""

    def renew(self, now: datetime) -> bool:
        """True while this run still holds the Lease (renewed now)."""
        try:
            self._lease = self.kube.replace_lease(
                self.namespace, CYCLE_LEASE, self._body(now, False)
            )
        except Conflict:
            return False
        return True

    def record(self, slot: str, now: datetime) -> bool:
        """Before a cordon is written, its slot goes into the Lease with a renewal (`slot` "":
        none landed, the record as this run found it). True while this run holds the Lease."""
        self.isolated = slot
        return self.renew(now)

    def unrecord(self, now: datetime) -> bool:
        return self.record("", now)

    def release(self, now: datetime) -> None:
        """Free at once for the next run (a Conflict: not ours any more, nothing to free)."""
        body = self._body(now, False)
        body["spec"]["holderIdentity"] = ""
        try:
            self._lease = self.kube.replace_lease(self.namespace, CYCLE_LEASE, body)
        except Conflict:
            return
