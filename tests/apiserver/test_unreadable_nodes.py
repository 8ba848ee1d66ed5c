"""One bad value on one node, on a real kube-apiserver: that node is reported and left alone, and
its faulted neighbour is cordoned in the same cycle. And a person's uncordon sticks.

The guard runs as its own ServiceAccount against a real Prometheus holding a scenario in which
both nodes of each case have Xid 79 and a lost GPU, so without the per-object rule the bad node
would either stop the cycle or be the one cordoned.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    NS,
    T0,
    faulted,
    forget_guard_state,
    ledger_text,
    mine,
    set_status,
)
from tests.apiserver.kube import MERGE_PATCH
from tests.engines import scenario_server
from tests.scenario_build import Scenario
from tests.tiers import require_engine

pytestmark = pytest.mark.apiserver

FAULTED = "unread-faulted"
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
CORDON = {
    KEYS.reason: "xid-79",
    KEYS.at: "2026-09-21T05:00:00Z",
    KEYS.boot_id: "boot-0",
    KEYS.gpu_capacity: "8",
    KEYS.gpu: f"0000:58:00.0 {UUID}",
}


@dataclass(frozen=True)
class Case:
    id: str
    cordoned: bool
    annotations: dict[str, str]
    key: str  # the annotation the WARN line must name

    @property
    def node(self) -> str:
        return f"unread-{self.id}"


CASES = [
    Case("at-9999", True, {**CORDON, KEYS.at: "9999-12-31T23:59:59-23:59"}, KEYS.at),
    Case("at-0001", True, {**CORDON, KEYS.at: "0001-01-01T00:00:00+01:00"}, KEYS.at),
    Case("xid-superscript", True, {**CORDON, KEYS.reason: "xid-²"}, KEYS.reason),
    Case("gpu-one-field", True, {**CORDON, KEYS.gpu: "0000:58:00.0"}, KEYS.gpu),
    Case("capacity-not-int", True, {**CORDON, KEYS.gpu_capacity: "8x"}, KEYS.gpu_capacity),
    Case("cancel-garbage", False, {KEYS.cancelled: "alice said so"}, KEYS.cancelled),
]
CANCEL_NODE = "cancel-sticks"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    require_engine("prometheus2")
    names = (FAULTED, CANCEL_NODE, *(c.node for c in CASES))
    scenario = Scenario(start=T0, duration_s=90 * 60, nodes=tuple(faulted(n) for n in names))
    with scenario_server(scenario) as server:
        yield server


@pytest.fixture
def nodes(admin: client.ApiClient) -> Iterator[Any]:
    core, made = client.CoreV1Api(admin), []

    def make(name: str, *, unschedulable: bool = False, annotations: dict[str, str] | None = None):
        core.create_node(
            {
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {"unschedulable": unschedulable},
            }
        )
        made.append(name)
        set_status(core, name, boot="boot-1", allocatable=7)
        return core.read_node(name)

    yield make
    for name in made:
        core.delete_node(name)
    forget_guard_state(core, admin)  # the guard's Jobs (jobs namespace), ledger and Events


def guard_run(prom: LocalPrometheus, kubeconfig: Path, at: datetime) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            str(kubeconfig),
            "--at",
            at.isoformat(),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout)), proc.stderr


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_bad_value_on_one_node_and_its_faulted_neighbour_is_cordoned(
    case: Case, prom, guard_kubeconfig, nodes, admin
):
    core = client.CoreV1Api(admin)
    before = nodes(case.node, unschedulable=case.cordoned, annotations=case.annotations)
    nodes(FAULTED)
    plan, log = guard_run(prom, guard_kubeconfig, ISOLATE_AT)

    assert mine(plan, FAULTED)[0] == ("cordon", "xid-79")
    faulted = core.read_node(FAULTED)
    assert faulted.spec.unschedulable and faulted.metadata.annotations[KEYS.reason] == "xid-79"
    assert "xid-79" in ledger_text(core, FAULTED)

    assert mine(plan, case.node) == [("skip", "unreadable"), ("event", "unreadable")]
    warn = [line for line in log.splitlines() if f"skip node={case.node} " in line]
    assert len(warn) == 1 and " WARN skip " in warn[0]
    assert f"{case.key}={case.annotations[case.key]!r}" in warn[0]
    assert f"kubectl annotate node {case.node} {case.key}=" in warn[0]
    after = core.read_node(case.node)
    assert after.metadata.resource_version == before.metadata.resource_version  # left alone
    events = [
        e
        for e in core.list_namespaced_event("default").items
        if e.involved_object.name == case.node
    ]
    assert [(e.type, e.reason) for e in events] == [("Warning", "GuardUnreadable")]


def test_unreadable_ledger_line_is_kept_and_the_cordon_goes_on(
    prom, guard_kubeconfig, nodes, admin
):
    core = client.CoreV1Api(admin)
    bad = f"0001-01-01T00:00:00+01:00 xid-79 0000:58:00.0 {UUID} manual\n"
    core.create_namespaced_config_map(
        NS, {"metadata": {"name": "gpu-fault-ledger"}, "data": {FAULTED: bad}}
    )
    nodes(FAULTED)
    plan, log = guard_run(prom, guard_kubeconfig, ISOLATE_AT)
    assert mine(plan, FAULTED)[:2] == [("skip", "ledger-unreadable"), ("cordon", "xid-79")]
    assert f" WARN skip node={FAULTED} reason=ledger-unreadable " in log
    text = ledger_text(core, FAULTED)
    assert text.startswith(bad) and text.count("\n") == 2  # kept verbatim, one line added


def test_a_persons_uncordon_sticks_until_a_new_boot(prom, guard_kubeconfig, nodes, admin):
    core = client.CoreV1Api(admin)
    nodes(CANCEL_NODE)
    assert mine(guard_run(prom, guard_kubeconfig, ISOLATE_AT)[0], CANCEL_NODE)[0] == (
        "cordon",
        "xid-79",
    )
    core.patch_node(CANCEL_NODE, {"spec": {"unschedulable": False}}, _content_type=MERGE_PATCH)

    later = ISOLATE_AT + timedelta(minutes=5)  # the GPU is still lost in Prometheus
    plan, _ = guard_run(prom, guard_kubeconfig, later)
    assert mine(plan, CANCEL_NODE)[0] == ("clear-annotations", "human-uncordon")
    notes = core.read_node(CANCEL_NODE).metadata.annotations
    cancel = notes[KEYS.cancelled].split(" ")
    assert cancel[0] == "boot-1" and cancel[2:] == ["xid-79", f"{later:%Y-%m-%dT%H:%M:%SZ}"]
    assert not any(k in notes for k in KEYS.cordon_keys)

    plan, _ = guard_run(prom, guard_kubeconfig, later + timedelta(minutes=5))
    assert mine(plan, CANCEL_NODE) == [("skip", "cancelled")]
    assert not core.read_node(CANCEL_NODE).spec.unschedulable
    assert ledger_text(core, CANCEL_NODE).count("\n") == 1  # no second line for the same incident

    set_status(core, CANCEL_NODE, boot="boot-2", allocatable=7)  # rebooted, GPU still lost
    plan, _ = guard_run(prom, guard_kubeconfig, later + timedelta(minutes=10))
    assert mine(plan, CANCEL_NODE)[0] == ("cordon", "xid-79")
    notes = core.read_node(CANCEL_NODE).metadata.annotations
    assert KEYS.cancelled not in notes and notes[KEYS.boot_id] == "boot-2"


def test_unreadable_nodes_events_are_bounded_and_written_after_the_cordon(
    prom, guard_kubeconfig, nodes, admin
):
    core = client.CoreV1Api(admin)
    many = [f"unread-many-{i:02}" for i in range(25)]
    for name in many:
        nodes(name, annotations={KEYS.cancelled: "alice said so"})
    nodes(FAULTED)
    plan, log = guard_run(prom, guard_kubeconfig, ISOLATE_AT)

    kinds = [(a["type"], a["node"], a["reason"]) for a in plan["actions"]]
    cordon = kinds.index(("cordon", FAULTED, "xid-79"))
    written = [i for i, (t, _, r) in enumerate(kinds) if (t, r) == ("event", "unreadable")]
    assert len(written) == 20 and min(written) > cordon
    assert [r for _, _, r in kinds].count("unreadable") == 25 + 20  # every skip line, 20 Events
    assert "reason=unreadable-events-later" in log
    events = [
        e for e in core.list_namespaced_event("default").items if e.reason == "GuardUnreadable"
    ]
    assert len(events) == 20
