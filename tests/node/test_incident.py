"""One whole incident on the real node, only the GPU simulated (dcgm-exporter series in a real
Prometheus): Xid 79 → `gpu-node-guard run` (the guard's token) cordons the node and creates the
evidence Job, which the kubelet runs; its verdict is in `kubectl logs` → the repair (the kubelet
restarts on a new boot ID) → the conformance Job of the new boot runs on this host → the load
test, which the kubelet of this 2-core node refuses (OutOfcpu) → the node stays cordoned.
Each run is the CronJob's command with `--at` on the 5-minute grid, back to back."""

from __future__ import annotations

import dataclasses
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from tests.apiserver.deploy import Kubectl, kubectl_or_skip
from tests.apiserver.guard_run import (
    CYCLE,
    ISOLATE_AT,
    KEYS,
    RETURN_AT,
    GuardRun,
    faulted,
    node_events,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import JOBS_NS
from tests.apiserver.kubectl import HINT_COMMANDS
from tests.node import fake_host
from tests.node.jobs import MEASURED, Ran, follow
from tests.node.node import Node, boot_id, reboot

pytestmark = pytest.mark.node

# GPU 4 of the timeline at the fixtures' incident address (0000:99:00.0): pci_base + 4 × 0x10.
PCI_BASE = int(fake_host.GPU.split(":")[1], 16) - 4 * 0x10


@pytest.fixture
def prom(node: Node) -> Iterator[LocalPrometheus]:
    # An NVSwitch node whose fabric trained (Success): the fabric trigger applies and stays quiet.
    timeline = dataclasses.replace(faulted(node.name), pci_base=PCI_BASE, fabric=((0, 3),))
    with scenario_prometheus(timeline) as server:
        yield server


def _the_job(admin: client.ApiClient, node: str, kind: str) -> dict[str, Any]:
    found = client.BatchV1Api(admin).list_namespaced_job(
        JOBS_NS, label_selector=f"app.kubernetes.io/component={kind}"
    )
    (job,) = [admin.sanitize_for_serialization(j) for j in found.items]
    assert job["spec"]["template"]["spec"]["nodeName"] == node
    return dict(job)


# What every run of this cluster says besides its nodes: the return check's service-network
# condition has no kube-proxy or CNI pod to read in this cluster (no pod matches), once a return
# check runs.
NO_SERVICE_NETWORK = ("INFO", "skip", "service-network-not-applicable")


def _said(run: GuardRun, node: str) -> list[tuple[str, str, str]]:
    """(level, event, reason) of each line about `node`, in order."""
    return [(x["level"], x["event"], x.get("reason", "")) for x in run.log if x.get("node") == node]


def _said_else(run: GuardRun) -> list[tuple[str, str, str]]:
    """The same for the lines about no node, without the run's start, settings and done."""
    return [
        (x["level"], x["event"], x.get("reason", ""))
        for x in run.log
        if "node" not in x and x["event"] not in ("start", "settings", "done")
    ]


def _line(run: GuardRun, node: str, event: str) -> dict[str, Any]:
    (found,) = [x for x in run.log if x.get("node") == node and x["event"] == event]
    return found


class Clock:
    """Seconds of each step of the incident, and from one run's start to the next's."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._last_run: float | None = None
        self._runs = 0

    def run(self, prom: LocalPrometheus, kubeconfig: Path, at: Any) -> GuardRun:
        began = time.monotonic()
        self._runs += 1
        if self._last_run is not None:
            self.steps[f"run {self._runs - 1} start → run {self._runs} start"] = (
                began - self._last_run
            )
        self._last_run = began
        done = run_guard(prom, kubeconfig, at)
        self.steps[f"run {self._runs} ({at:%H:%M})"] = time.monotonic() - began
        return done

    def job(self, admin: client.ApiClient, kubeconfig: Path, kind: str, node: str) -> Ran:
        """The guard's one Job of `kind`, followed from the end of the run that created it."""
        ran = follow(admin, kubeconfig, _the_job(admin, node, kind), time.monotonic())
        for step, seconds in ran.timings.items():
            self.steps[f"{kind}: {step}"] = seconds
        return ran


def test_one_incident_from_the_fault_to_the_load_test_on_the_real_node(
    node: Node,
    prom: LocalPrometheus,
    gpu_node: str,
    admin: client.ApiClient,
    guard_kubeconfig: Path,
) -> None:
    """The CronJob's runs, back to back on the 5-minute grid, and what on-call reads at each:
    the cordon with its evidence Job (verdict in `kubectl logs`, by the run's own `next=` hint),
    the wait for the power cycle, the new boot's conformance Job on this host, the load test the
    node cannot admit, and the node kept cordoned with a Warning that says why."""
    core, clock, kubectl = client.CoreV1Api(admin), Clock(), kubectl_or_skip()
    began = time.monotonic()
    cordon_boot = boot_id(node.plane, gpu_node)

    first = clock.run(prom, guard_kubeconfig, ISOLATE_AT)
    assert _said(first, gpu_node) == [
        ("INFO", "cordon", "xid-79"),
        ("INFO", "event", "xid-79"),
        ("INFO", "append-ledger", "xid-79"),
        ("INFO", "create-job", "xid-79"),
    ]
    assert _said_else(first) == []
    evidence = clock.job(admin, guard_kubeconfig, "evidence", gpu_node)
    name = evidence.job["metadata"]["name"]
    cordon = _line(first, gpu_node, "cordon")
    assert (cordon["gpu"], cordon["held_s"], cordon["next"]) == (fake_host.GPU, 180, f"job/{name}")
    event = _line(first, gpu_node, "event")
    assert (event["type"], event["event_reason"]) == ("Warning", "GuardCordoned")
    assert f"Xid 79 on GPU 4 ({fake_host.GPU} " in event["message"]
    assert event["message"].endswith(f"evidence job/{name}")
    made = _line(first, gpu_node, "create-job")
    assert (made["kind"], made["job"]) == ("evidence", name)
    assert core.read_node(gpu_node).spec.unschedulable is True
    assert evidence.read.status == "succeeded", evidence.pod["status"]
    assert evidence.read.result is not None and evidence.read.result.state == "read"
    # on-call follows the hint: the verdict and the request to the datacentre are in the log
    logs = _as_typed(made["next"], Kubectl(kubectl, node.plane.kubeconfig))
    assert f"Subject: {gpu_node}: GPU {fake_host.GPU} needs cold power cycle" in logs
    assert (
        "Verdict: power-cycle (Xid 79, fallen-off-the-bus record, config space reads all ff)"
        in (logs)
    )

    second = clock.run(prom, guard_kubeconfig, ISOLATE_AT + CYCLE)
    assert _said(second, gpu_node) == [
        ("INFO", "skip", "same-boot"),
        ("INFO", "event", "same-boot"),
        ("INFO", "skip", "already-cordoned"),
    ]
    assert _said_else(second) == [NO_SERVICE_NETWORK]
    waiting = _line(second, gpu_node, "event")
    assert (waiting["type"], waiting["event_reason"]) == ("Normal", "GuardWaitingPowerCycle")
    assert waiting["message"].endswith(f"bootID {cordon_boot} unchanged since cordon")

    # The repair: the node is power-cycled; its kubelet comes back on a new boot ID.
    rebooted = str(uuid.uuid4())
    started = time.monotonic()
    reboot(node, rebooted)
    clock.steps["repair: kubelet stopped, started on the new boot → Node reports it"] = (
        time.monotonic() - started
    )
    assert boot_id(node.plane, gpu_node) == rebooted != cordon_boot
    assert _kubelet_said_rebooted(core, gpu_node, rebooted)

    third = clock.run(prom, guard_kubeconfig, RETURN_AT)
    assert _said(third, gpu_node) == [("INFO", "create-job", "conditions-met")]
    assert _said_else(third) == [NO_SERVICE_NETWORK]
    assert _line(third, gpu_node, "create-job")["kind"] == "conformance"
    conformance = clock.job(admin, guard_kubeconfig, "conformance", gpu_node)
    assert conformance.read.status == "succeeded", conformance.pod["status"]
    assert conformance.read.result is not None and conformance.read.result.passed

    fourth = clock.run(prom, guard_kubeconfig, RETURN_AT + CYCLE)
    assert _said(fourth, gpu_node) == [("INFO", "create-job", "conditions-met")]
    assert _said_else(fourth) == [NO_SERVICE_NETWORK]
    assert _line(fourth, gpu_node, "create-job")["kind"] == "loadtest"
    loadtest = clock.job(admin, guard_kubeconfig, "loadtest", gpu_node)
    lt_name = loadtest.job["metadata"]["name"]
    assert loadtest.read.result is not None and loadtest.read.result.state == "rejected"
    assert core.read_node(gpu_node).spec.unschedulable is True  # not serving meanwhile

    fifth = clock.run(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE)
    assert _said(fifth, gpu_node) == [
        ("WARN", "skip", "job-rejected"),
        ("INFO", "event", "job-rejected"),
    ]
    assert _said_else(fifth) == [NO_SERVICE_NETWORK]
    rejected = _line(fifth, gpu_node, "skip")
    assert rejected["detail"].startswith(f"loadtest job/{lt_name}: pod {lt_name}-")
    assert "rejected by the node's kubelet (OutOfcpu: Pod was rejected" in rejected["detail"]
    assert rejected["next"].startswith("the node stays cordoned")
    said = _line(fifth, gpu_node, "event")
    assert (said["type"], said["event_reason"]) == ("Warning", "GuardJobRejected")
    assert said["message"].startswith(f"gpu-node-guard's loadtest job/{lt_name} could not run: ")
    assert said["message"].endswith("; the node stays cordoned")
    clock.steps["fault's first run → the last run's end"] = time.monotonic() - began

    found = core.read_node(gpu_node)
    assert found.spec.unschedulable is True
    notes = found.metadata.annotations
    assert (notes[KEYS.reason], notes[KEYS.boot_id]) == ("xid-79", cordon_boot)
    assert KEYS.returned not in notes
    events = sorted((e["type"], e["reason"]) for e in node_events(admin, gpu_node))
    assert events == [
        ("Normal", "GuardWaitingPowerCycle"),
        ("Warning", "GuardCordoned"),
        ("Warning", "GuardJobRejected"),
    ]
    MEASURED.append(("incident", clock.steps))


def _kubelet_said_rebooted(core: client.CoreV1Api, node: str, boot: str) -> bool:
    """The kubelet's own Warning `Rebooted` about the node (`kubectl describe node`)."""
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
    return any(e.reason == "Rebooted" and e.message.endswith(boot) for e in events.items)


def _as_typed(hint: str, kubectl: Kubectl) -> str:
    """The output of the one kubectl command of an on-call hint (`next=`)."""
    (command,) = HINT_COMMANDS.findall(hint)
    program, *args = shlex.split(command)
    assert program == "kubectl", hint
    return kubectl.run(*args).stdout
