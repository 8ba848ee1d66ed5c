"""A hijacked cycle's Lease on a real kube-apiserver: one write must not stop every run.

A Lease that names another holder stops each run that finds it (`lease-held`, exit 0, nothing
decided). The guard-scope policy refuses what no run writes from the guard's token (a holder not
of a run's form, a duration over LEASE_MAX_S); what it cannot judge (a renewal in the future)
or what a writer it does not bind writes (the guard namespace's admin), a run takes over with one
WARN line (guard/doors/lease.py `forged`) and decides as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.names import CYCLE_LEASE
from guard.settings import LEASE_MAX_S
from tests.apiserver.guard_run import (
    NO_CF,
    NS,
    ONSET_S,
    T0,
    faulted,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import refusal

pytestmark = pytest.mark.apiserver

NODE = "h-fast"
AT = T0 + timedelta(seconds=ONSET_S + 180)  # its Xid 79 hold has passed: the run cordons it
SCOPE = "gpu-node-guard-guard-scope"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(faulted(NODE)) as server:
        yield server


def hijacked(holder: str, renewed: str, duration: int) -> dict[str, Any]:
    return {
        "metadata": {"name": CYCLE_LEASE},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": renewed,
            "renewTime": renewed,
        },
    }


# Any past instant (held only by its duration); microseconds, or the client drops the fraction
NOW_ISH = "2026-12-07T00:00:00.000001Z"


def test_the_guards_token_cannot_write_a_lease_no_run_writes(identities, gpu_node):
    gpu_node(NODE)  # its teardown deletes the Lease
    leases = client.CoordinationV1Api(identities.guard_token)
    for body, says in (
        (hijacked("attacker", NOW_ISH, 90), "holderIdentity"),
        (hijacked("attacker-1", NOW_ISH, 2_147_483_647), "leaseDurationSeconds"),
        (hijacked("attacker-1", NOW_ISH, LEASE_MAX_S + 1), "leaseDurationSeconds"),
    ):
        status, message = refusal(lambda b=body: leases.create_namespaced_lease(NS, b))
        assert status == 422 and SCOPE in message and says in message, message


@pytest.mark.parametrize(
    ("writer", "lease", "why"),
    [
        # The guard's token: a run's form and duration, renewed in 2100 (no policy sees time).
        ("guard_token", hijacked("attacker-1", "2100-01-01T00:00:00.000001Z", 90), "future"),
        # The guard namespace's admin, whom guard-scope does not bind: the longest int32.
        ("guard_ns_admin", hijacked("attacker", NOW_ISH, 2_147_483_647), "leaseDurationSeconds"),
    ],
)
def test_a_run_takes_over_a_hijacked_lease_and_cordons(
    prom, guard_kubeconfig, gpu_node, core, identities, writer, lease, why
):
    gpu_node(NODE)
    client.CoordinationV1Api(getattr(identities, writer)).create_namespaced_lease(NS, lease)
    run = run_guard(prom, guard_kubeconfig, AT, NO_CF)
    (taken,) = run.lines("lease-taken-over")
    assert taken["level"] == "WARN" and taken["holder"] == lease["spec"]["holderIdentity"]
    assert why in taken["reason"]
    assert not run.lines("lease-held")
    assert [line["node"] for line in run.lines("cordon")] == [NODE]
    assert core.read_node(NODE).spec.unschedulable
    after = client.CoordinationV1Api(identities.guard_ns_admin).read_namespaced_lease(
        CYCLE_LEASE, NS
    )
    assert after.spec.holder_identity in ("", None)  # taken, then released as usual
    assert after.spec.lease_duration_seconds <= LEASE_MAX_S
