"""The node triggers without an Xid end to end: a real kube-apiserver with the guard's RBAC and
admission policies, a real Prometheus with kube-state-metrics' and dcgm-exporter's series, the
guard run as its own ServiceAccount.

The rejection storm is the incident write-up's first Xid 79 episode without its Xid (a device
plugin that lost a GPU without logging 79): the node advertised capacity 8 / allocatable 7,
kubelet refused every GPU pod with UnexpectedAdmissionError, and a Deployment re-created its
Failed pods every 5 minutes (about 1,000 a time there, 6 here). The guard isolated it only by
hand, after three days; here it is cordoned once the rejections held, never before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.ledger import parse_line
from tests.apiserver.guard_run import (
    KEYS,
    ONSET_S,
    T0,
    guard_jobs,
    ledger_text,
    mine,
    node_events,
    outcomes,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import MERGE_PATCH
from tests.scenario_build import NodeTimeline, PodTimeline

pytestmark = pytest.mark.apiserver

REJECT, SHORT, CPU = "e2e-rejecting", "e2e-short", "e2e-outofcpu"
NEW, NO_EXPORTER = "e2e-never-admitted", "e2e-no-exporter"
FABRIC, TEAM = "e2e-fabric", "e2e-train"
SXID = 12028  # a fatal NVSwitch SXid (DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS' value)
# An 8-GPU training on the NVSwitch node: a GPU pod, not on a named GPU (the fabric names none).
TRAINING = PodTimeline(TEAM, "nccl-allreduce-0", FABRIC, gpus=8)
GATE_TAINT = {"key": "gpu-node-guard.io/onboarding", "value": "pending", "effect": "NoSchedule"}
ONSET = T0 + timedelta(seconds=ONSET_S)
HELD_AT = ONSET + timedelta(minutes=10)  # the default hold after the first batch was refused
CHECKED = {KEYS.checked_boot: "boot-1 2026-09-20T00:00:00Z job/gng-cf-triggers-00000000"}
CLASSES = ("--gpu-classes", "gpu-pool=interactive:8")


def storm(node: str, reason: str) -> tuple[PodTimeline, ...]:
    return tuple(
        PodTimeline(
            "ml-workspace",
            f"{node}-ws-{b}-{i}",
            node,
            gpus=1,
            created_by=("ReplicaSet", "workspace-7d9f"),
            reason=reason,
            first_s=ONSET_S + 300 * b,
        )
        for b in range(12)
        for i in range(6)
    )


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    nodes = (
        NodeTimeline(REJECT, allocatable=((ONSET_S, 7),)),  # 8 / 7, as in the write-up
        NodeTimeline(SHORT, capacity=((ONSET_S, 7),), exported=((ONSET_S, 7),)),
        NodeTimeline(CPU),
        NodeTimeline(NEW, gpus=7),  # short from the start, never admitted
        NodeTimeline(NO_EXPORTER, xid_gauge=False),  # dcgm-exporter exposes nothing here
        NodeTimeline(FABRIC, nvswitch_fatal=((0, 0), (ONSET_S, SXID))),  # 8/8, no Xid
    )
    pods = (*storm(REJECT, "UnexpectedAdmissionError"), *storm(CPU, "OutOfcpu"), TRAINING)
    with scenario_prometheus(*nodes, pods=pods) as server:
        yield server


@pytest.fixture
def checked_gpu_node(gpu_node: Callable[..., str], core: client.CoreV1Api) -> Callable[..., str]:
    """A GPU node of the interactive class whose boot passed the after-reboot check."""

    def make(name: str, **kw: Any) -> str:
        gpu_node(name, **kw)
        meta = {"annotations": CHECKED, "labels": {"gpu-pool": "interactive"}}
        core.patch_node(name, {"metadata": meta}, _content_type=MERGE_PATCH)
        return name

    return make


NODE_WIDE = ["gpu-node-guard", "evidence", "collect", "--node"]


def evidence_argv(job: Any) -> list[str]:
    (container,) = job.spec.template.spec.containers
    return list(container.command)


def guard_notes(found: Any) -> dict[str, str]:
    notes = found.metadata.annotations or {}
    return {k: v for k, v in notes.items() if k.startswith(KEYS.prefix) and k not in CHECKED}


def test_the_rejection_storm_is_isolated_after_its_hold_never_before(
    prom, guard_kubeconfig, checked_gpu_node, core, admin, deployed
):
    node = checked_gpu_node(REJECT, allocatable=7)
    cpu = checked_gpu_node(CPU, allocatable=8)
    early = run_guard(prom, guard_kubeconfig, HELD_AT - timedelta(minutes=1)).plan
    assert mine(early, node) == [] and mine(early, cpu) == []
    plan = run_guard(prom, guard_kubeconfig, HELD_AT).plan
    assert mine(plan, node) == [
        ("cordon", "admission-rejected"),
        ("event", "admission-rejected"),
        ("append-ledger", "admission-rejected"),
        ("create-job", "admission-rejected"),
    ]
    assert outcomes(plan, node)[-1] == ("create-job", "applied")  # admitted, the guard's token
    assert mine(plan, cpu) == []  # OutOfcpu is the scheduler's, not the node's
    found = core.read_node(node)
    assert found.spec.unschedulable is True
    (job,) = guard_jobs(admin, node)  # the node-wide evidence Job, recorded on the node
    notes = guard_notes(found)
    assert notes.pop(KEYS.evidence_job).startswith(f"{job.metadata.name} {job.metadata.uid} ")
    assert notes == {
        KEYS.reason: "admission-rejected",
        KEYS.at: f"{HELD_AT:%Y-%m-%dT%H:%M:%SZ}",
        KEYS.boot_id: "boot-1",
        KEYS.gpu_capacity: "8",
    }
    assert evidence_argv(job) == [*NODE_WIDE, node, "--trigger", "admission-rejected"]
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
    assert event["type"] == "Warning" and f"evidence job/{job.metadata.name}" in event["note"]
    assert "12 GPU pods created in the last 600s rejected at admission" in event["note"]
    (line,) = ledger_text(core, node).splitlines()
    entry = parse_line(node, line).entry
    assert entry is not None and (entry.word, entry.uuid) == ("admission-rejected", "-")


def test_a_node_short_of_its_class_is_isolated_and_records_the_class_count(
    prom, guard_kubeconfig, checked_gpu_node, core, admin, deployed
):
    node = checked_gpu_node(SHORT, allocatable=7)
    early = run_guard(prom, guard_kubeconfig, HELD_AT - timedelta(minutes=1), *CLASSES).plan
    assert mine(early, node) == []
    off = run_guard(prom, guard_kubeconfig, HELD_AT).plan  # no classes: no gpu-short
    assert mine(off, node) == []
    plan = run_guard(prom, guard_kubeconfig, HELD_AT, *CLASSES).plan
    assert mine(plan, node) == [
        ("cordon", "gpu-short"),
        ("event", "gpu-short"),
        ("append-ledger", "gpu-short"),
        ("create-job", "gpu-short"),
    ]
    assert outcomes(plan, node)[-1] == ("create-job", "applied")
    found = core.read_node(node)
    assert found.spec.unschedulable is True
    # The class's count, not the 7 it has: 7/7 after the cordon is no return.
    assert guard_notes(found)[KEYS.gpu_capacity] == "8"
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
    assert "class gpu-pool=interactive expects 8" in event["note"]
    (job,) = guard_jobs(admin, node)
    expected = ["--trigger", "gpu-short", "--expected-gpus", "8"]
    assert evidence_argv(job) == [*NODE_WIDE, node, *expected]
    assert f"evidence job/{job.metadata.name}" in event["note"]


def test_a_node_never_admitted_and_a_node_without_exporter_are_not_cordoned(
    prom, guard_kubeconfig, checked_gpu_node, core, deployed
):
    new = checked_gpu_node(NEW, allocatable=7)
    core.patch_node(new, {"spec": {"taints": [GATE_TAINT]}})
    seven = {"capacity": {"nvidia.com/gpu": "7"}, "allocatable": {"nvidia.com/gpu": "7"}}
    core.patch_node_status(new, {"status": seven}, _content_type=MERGE_PATCH)
    bare = checked_gpu_node(NO_EXPORTER, allocatable=8)
    plan = run_guard(prom, guard_kubeconfig, HELD_AT + timedelta(minutes=30), *CLASSES).plan
    # The trigger leaves it to the gate, and the gate refuses it: the same count.
    assert mine(plan, new) == [("skip", "onboarding-gpu-short")]
    assert core.read_node(new).spec.unschedulable is not True
    assert mine(plan, bare) == []


def test_a_failed_fabric_is_isolated_after_its_hold_and_its_gpu_pods_are_told(
    prom, guard_kubeconfig, checked_gpu_node, core, admin, deployed
):
    node = checked_gpu_node(FABRIC, allocatable=8)
    try:
        core.create_namespace({"metadata": {"name": TEAM}})
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    early = run_guard(prom, guard_kubeconfig, HELD_AT - timedelta(minutes=1)).plan
    assert mine(early, node) == []
    plan = run_guard(prom, guard_kubeconfig, HELD_AT).plan
    assert mine(plan, node) == [
        ("cordon", "fabric"),
        ("event", "fabric"),
        ("append-ledger", "fabric"),
        ("create-job", "fabric"),
        ("event", "workload-notified"),
    ]
    assert outcomes(plan, node)[3] == ("create-job", "applied")
    found = core.read_node(node)
    assert found.spec.unschedulable is True
    assert guard_notes(found)[KEYS.reason] == "fabric"
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
    assert event["type"] == "Warning" and "NVSwitch" in event["note"]
    (line,) = ledger_text(core, node).splitlines()
    entry = parse_line(node, line).entry
    assert entry is not None and (entry.word, entry.uuid) == ("fabric", "-")
    (job,) = guard_jobs(admin, node)
    assert evidence_argv(job) == [*NODE_WIDE, node, "--trigger", "fabric"]
    recorded = guard_notes(core.read_node(node))[KEYS.evidence_job]
    assert recorded.startswith(f"{job.metadata.name} {job.metadata.uid} ")
    # No GPU loss and not cordoned when read: its GPU pods are read for the held fabric fault.
    events = client.EventsV1Api(admin).list_namespaced_event(TEAM).items
    (told,) = [e for e in events if e.reason == "GuardGpuIsolated"]
    assert told.regarding.name == TRAINING.name and told.regarding.uid == TRAINING.uid
    assert "fabric (" in told.note and "holds GPUs of the node" in told.note
    assert "not evicted" in told.note
