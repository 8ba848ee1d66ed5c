"""One whole incident on the real node, only the GPU simulated (dcgm-exporter series in a real
Prometheus, and the load-test image's CPU stand-in): Xid 79 → `gpu-node-guard run` (the guard's
token) cordons the node and creates the evidence Job, which the kubelet runs; its verdict is in
`kubectl logs` → the repair (the kubelet restarts on a new boot ID, with room for the load test)
→ the conformance Job of the new boot runs on this host → the load test runs from the CPU
stand-in image (hack/node/image.py: the guard's program on simulated GPUs, its all-reduce over
gloo) and passes → the guard uncordons the node. Each run is the CronJob's command with `--at`
on the 5-minute grid, back to back."""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.wire import parse_loadtest_summary
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
from tests.apiserver.kube import JOBS_NS, MERGE_PATCH
from tests.apiserver.kubectl import HINT_COMMANDS
from tests.node import fake_host
from tests.node.jobs import MEASURED, Ran, follow, termination_message, wait_for
from tests.node.node import (
    ALLOCATABLE_CPU_MILLIS,
    ROOM_CPU_MILLIS,
    Node,
    boot_id,
    pod_cpu,
    reboot,
    restart_kubelet,
    wait_for_images,
)
from tests.tiers import unavailable

pytestmark = pytest.mark.node

# GPU 4 of the timeline at the fixtures' incident address (0000:99:00.0): pci_base + 4 × 0x10.
PCI_BASE = int(fake_host.GPU.split(":")[1], 16) - 4 * 0x10


AGENT = "gpu-node-guard-agent"
# A label no node has: the agent's DaemonSet with it in its nodeSelector runs nowhere.
AGENT_OFF = {"gpu-node-guard.io/test-agent": "off"}


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


def _agent_selector(admin: client.ApiClient, selector: dict[str, str | None]) -> None:
    body = {"spec": {"template": {"spec": {"nodeSelector": selector}}}}
    client.AppsV1Api(admin).patch_namespaced_daemon_set(
        AGENT, JOBS_NS, body, _content_type=MERGE_PATCH
    )


@pytest.fixture
def room(node: Node, admin: client.ApiClient) -> Iterator[Callable[[str], None]]:
    """The repair, with room for the load test: its Pod asks for 2 CPUs, all of a 2-core machine,
    so nothing else may request CPU on the node meanwhile. The node agent (5m) is taken off it
    (one more nodeSelector entry, which its admission policy allows), then the kubelet starts on
    the new boot ID offering Pods 2 CPUs. Afterwards it offers 1.5 again and the agent is back."""
    if (os.cpu_count() or 1) * 1000 < ROOM_CPU_MILLIS:
        unavailable("node", "the load test asks for 2 CPUs; this machine has 1", "2 cores")
    core, used = client.CoreV1Api(admin), []

    def agent_gone() -> bool:
        pods = core.list_namespaced_pod(JOBS_NS, label_selector="app.kubernetes.io/component=agent")
        return not [p for p in pods.items if p.spec.node_name == node.name]

    def repair(new_boot: str) -> None:
        used.append(new_boot)
        _agent_selector(admin, dict(AGENT_OFF))
        wait_for("the agent's Pod gone from the node", agent_gone)
        reboot(node, new_boot, ROOM_CPU_MILLIS)

    try:
        yield repair
    finally:
        if used:
            restart_kubelet(node, ALLOCATABLE_CPU_MILLIS)
            _agent_selector(admin, {k: None for k in AGENT_OFF})


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


def test_one_incident_from_the_fault_to_the_uncordon_on_the_real_node(
    node: Node,
    prom: LocalPrometheus,
    gpu_node: str,
    admin: client.ApiClient,
    guard_kubeconfig: Path,
    room: Callable[[str], None],
) -> None:
    """The CronJob's runs, back to back on the 5-minute grid, and what on-call reads at each:
    the cordon with its evidence Job (verdict in `kubectl logs`, by the run's own `next=` hint),
    the wait for the power cycle, the new boot's conformance Job on this host, the load test run
    by the kubelet from the CPU stand-in image (its verdict in `kubectl logs`), and the node
    returned with a Normal Event that says by which Job."""
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

    # The repair: the node is power-cycled; its kubelet comes back on a new boot ID, with room for
    # the load test.
    rebooted = str(uuid.uuid4())
    started = time.monotonic()
    room(rebooted)
    clock.steps["repair: kubelet stopped, started on the new boot → Node reports it"] = (
        time.monotonic() - started
    )
    assert boot_id(node.plane, gpu_node) == rebooted != cordon_boot
    assert _kubelet_said_rebooted(core, gpu_node, rebooted)
    assert pod_cpu(node.plane, gpu_node) == ROOM_CPU_MILLIS

    third = clock.run(prom, guard_kubeconfig, RETURN_AT)
    assert _said(third, gpu_node) == [("INFO", "create-job", "conditions-met")]
    assert _said_else(third) == [NO_SERVICE_NETWORK]
    assert _line(third, gpu_node, "create-job")["kind"] == "conformance"
    conformance = clock.job(admin, guard_kubeconfig, "conformance", gpu_node)
    assert conformance.read.status == "succeeded", conformance.pod["status"]
    assert conformance.read.result is not None and conformance.read.result.passed

    wait_for_images(node)  # the load-test stand-in, imported beside the first tests
    fourth = clock.run(prom, guard_kubeconfig, RETURN_AT + CYCLE)
    assert _said(fourth, gpu_node) == [("INFO", "create-job", "conditions-met")]
    assert _said_else(fourth) == [NO_SERVICE_NETWORK]
    made = _line(fourth, gpu_node, "create-job")
    assert made["kind"] == "loadtest"
    loadtest = clock.job(admin, guard_kubeconfig, "loadtest", gpu_node)
    lt_name = loadtest.job["metadata"]["name"]
    (container,) = loadtest.job["spec"]["template"]["spec"]["containers"]
    # the guard's own Job: its image and command, the GPUs the node recorded, its 2 CPUs
    assert container["image"] == "ghcr.io/gpu-node-guard/gpu-node-guard-loadtest:0.1.0"
    assert container["command"][:7] == [
        "gpu-node-guard",
        "loadtest",
        "run",
        "--backend",
        "torch",
        "--expected-gpus",
        "8",
    ]
    assert container["resources"]["requests"]["cpu"] == "2"
    assert loadtest.read.status == "succeeded", loadtest.pod["status"]
    assert loadtest.read.result is not None and loadtest.read.result.state == "read"
    assert loadtest.read.result.passed and not loadtest.read.result.failed
    summary = parse_loadtest_summary(termination_message(loadtest.pod))
    assert summary.passed and len(summary.gpus) == 8, summary
    assert core.read_node(gpu_node).spec.unschedulable is True  # not serving meanwhile
    # on-call reads the load test's verdict and its all-reduce in the Job's log
    logs = (
        Kubectl(kubectl, node.plane.kubeconfig).run("-n", JOBS_NS, "logs", f"job/{lt_name}").stdout
    )
    assert "cpu stand-in: 8 simulated GPUs (numpy burn), all-reduce over gloo, not CUDA" in logs
    assert "verdict=pass expected_gpus=8 visible_gpus=8" in logs
    assert "allreduce transport=gloo world=8 " in logs

    fifth = clock.run(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE)
    assert _said(fifth, gpu_node) == [
        ("INFO", "uncordon", "loadtest-passed"),
        ("INFO", "event", "returned"),
    ]
    assert _said_else(fifth) == [NO_SERVICE_NETWORK]
    back = _line(fifth, gpu_node, "uncordon")
    assert f"job/{lt_name}" in str(back), back
    said = _line(fifth, gpu_node, "event")
    assert (said["type"], said["event_reason"]) == ("Normal", "GuardReturned")
    assert f"job/{lt_name}" in said["message"], said
    clock.steps["fault's first run → the last run's end"] = time.monotonic() - began

    found = core.read_node(gpu_node)
    assert not found.spec.unschedulable
    notes = found.metadata.annotations
    when = f"{RETURN_AT + 2 * CYCLE:%Y-%m-%dT%H:%M:%SZ}"
    assert notes[KEYS.returned] == f"{when} job/{lt_name}"
    assert notes[KEYS.checked_boot] == (
        f"{rebooted} {when} job/{conformance.job['metadata']['name']}"
    )
    events = sorted((e["type"], e["reason"]) for e in node_events(admin, gpu_node))
    assert events == [
        ("Normal", "GuardReturned"),
        ("Normal", "GuardWaitingPowerCycle"),
        ("Warning", "GuardCordoned"),
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
