"""The cycle's Lease as no run writes it (guard/doors/lease.py `forged`), and the holder a run
writes (`holder_identity`), against the guard-scope policy's pattern."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from guard.doors.lease import (
    SKEW_S,
    forged,
    held_by_other,
    holder_identity,
    lease_seconds,
    micro_time,
)
from guard.names import LEASE_HOLDER_PATTERN
from guard.settings import LEASE_MAX_S

NOW = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)


def lease(renewed: datetime | str, duration: int, holder: str = "attacker") -> dict[str, object]:
    at = renewed if isinstance(renewed, str) else renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "renewTime": at, "leaseDurationSeconds": duration}}


@pytest.mark.parametrize(
    ("renewed", "duration"),
    [
        ("2100-01-01T00:00:00.000000Z", 90),  # a renewal in 2100
        (NOW + timedelta(seconds=SKEW_S + 1), 90),  # further ahead than clocks disagree
        (NOW - timedelta(seconds=10), 2_147_483_647),  # the longest int32
        (NOW - timedelta(seconds=10), LEASE_MAX_S + 1),
        ("9999-12-31T23:59:59.000000Z", 2_147_483_647),  # past datetime's range when added
    ],
)
def test_a_lease_no_run_writes_is_forged_though_held(renewed, duration):
    found = lease(renewed, duration)
    assert held_by_other(found, "me-1", NOW) == "attacker"
    assert forged(found, NOW) != ""


@pytest.mark.parametrize(
    ("renewed", "duration"),
    [
        (NOW - timedelta(seconds=10), 90),
        (NOW + timedelta(seconds=SKEW_S), 90),  # a clock ahead within the bound
        (NOW - timedelta(seconds=10), LEASE_MAX_S),
    ],
)
def test_a_lease_a_run_may_write_is_not_forged(renewed, duration):
    assert forged(lease(renewed, duration), NOW) == ""


@pytest.mark.parametrize(
    "hostname",
    [
        "gpu-node-guard-29832830-x7k2p",
        "vm",
        "Dev_Box.local",
        "ip-10-0-0-7.ec2.internal",
        "-",
        "x" * 300,
    ],
)
def test_a_runs_holder_is_of_the_form_the_policy_admits(hostname):
    assert re.fullmatch(LEASE_HOLDER_PATTERN, holder_identity(hostname, 4_194_304))


@pytest.mark.parametrize("holder", ["attacker", "a-run-elsewhere", "Pod-1", "-1", "x-1a"])
def test_other_holders_are_not_of_that_form(holder):
    assert not re.fullmatch(LEASE_HOLDER_PATTERN, holder)


class NoKube:
    """`_body` builds the Lease's next write from what was read; it sends nothing."""


@pytest.mark.parametrize("found", ["", "2026-09-21T05:50:00Z"])
def test_the_slot_record_goes_in_before_the_cordon_and_back_when_none_landed(found):
    from guard.doors.lease import CycleLease, slot_key

    key = slot_key("gpu-node-guard.io/")
    read = {"metadata": {"resourceVersion": "7", "annotations": {"other": "x"}}, "spec": {}}
    if found:
        read["metadata"]["annotations"][key] = found  # type: ignore[index]
    lease = CycleLease(NoKube(), "ns", "me-1", 90, key)  # type: ignore[arg-type]
    lease._lease = read
    lease.found = lease.isolated_slot()
    lease.isolated = "2026-09-21T05:55:00Z"  # record(): the renewal before the cordon
    notes = lease._body(NOW, False)["metadata"]["annotations"]
    assert notes == {"other": "x", key: "2026-09-21T05:55:00Z"}
    lease._lease = {**read, "metadata": {**read["metadata"], "annotations": notes}}
    lease.isolated = ""  # unrecord(): no cordon landed after all
    back = lease._body(NOW, False)["metadata"]["annotations"]
    assert back == ({"other": "x", key: found} if found else {"other": "x"})


def test_forged_says_why_and_held_by_other_ends_with_the_duration():
    future = lease("2100-01-01T00:00:00.000000Z", 90, "x")
    assert forged(future, NOW) == "renewed in the future (2100-01-01T00:00:00.000000Z)"
    endless = lease("2026-09-21T05:54:00.000000Z", 2147483647, "x")
    assert forged(endless, NOW) == (
        "leaseDurationSeconds 2147483647, longer than any run writes (270)"
    )
    assert forged(lease("2026-09-21T05:54:00.000000Z", 90, "x"), NOW) == ""
    assert held_by_other(lease("2026-09-21T05:54:00.000000Z", 90, "b"), "a", NOW) == "b"
    assert held_by_other(lease("2026-09-21T05:53:00.000000Z", 90, "b"), "a", NOW) == ""


def test_a_lease_is_written_in_the_apis_form_and_ends_by_the_next_slot():
    assert holder_identity("gpu-node-guard-29832830-x7k2p", 1) == "gpu-node-guard-29832830-x7k2p-1"
    assert holder_identity("Dev_Box.local", 7) == "dev-box.local-7"
    assert micro_time(NOW) == "2026-09-21T05:55:00.000000Z"
    at, slot = datetime(2026, 9, 21, 5, 58, 50, tzinfo=UTC), datetime(2026, 9, 21, 6, 0, tzinfo=UTC)
    assert (lease_seconds(at, 90, slot), lease_seconds(at, 30, slot)) == (70, 30)
    assert (lease_seconds(slot, 90, slot), lease_seconds(at, 90, None)) == (1, 90)
