"""Synthetic dcgm-exporter and kube-state-metrics series, written as OpenMetrics for promtool.

A scenario is a set of node timelines (step functions in seconds from the start); the writer
streams samples family by family, series by series, in time order, as
``promtool tsdb create-blocks-from openmetrics`` requires.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

Steps = tuple[tuple[int, int], ...]  # (offset_s, value from then on)
XID = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
FABRIC = "DCGM_FI_DEV_FABRIC_MANAGER_STATUS"
FABRIC_SUCCESS, FABRIC_FAILURE = 3, 4  # DCGM dcgmFabricManagerStatus_t
NVSWITCH_FATAL = "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS"
NVSWITCH_LINK = "DCGM_FI_DEV_NVSWITCH_LINK_STATUS"
NVSWITCH_LINK_ACTIVE = 2  # DCGM: UNKNOWN -1, OFF 0, SAFE 1, ACTIVE 2, ERROR 3
NVLINK_RECOVERY = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
NVSWITCHES = 4  # an HGX H100 board's


@dataclass(frozen=True, slots=True)
class NodeTimeline:
    name: str
    gpus: int = 8
    host_label: str = "Hostname"
    xids: tuple[tuple[int, int, int], ...] = ()  # (offset_s, gpu index, last Xid from then on)
    allocatable: Steps = ()  # default: all GPUs allocatable
    unschedulable: Steps = ()  # default: schedulable
    pci_base: int = 0x18
    # dcgm-exporter's side: the host label's value (default: the node name; an old exporter
    # without NODE_NAME says its pod name), a `node` label put there by a scrape relabel,
    # which metrics it exports, and DCGM_EXP_XID_ERRORS_COUNT steps
    # (offset_s, gpu index, xid, count from then on).
    host_value: str = ""
    node_label: str = ""
    xid_gauge: bool = True
    gpu_temp: bool = False
    xid_counts: tuple[tuple[int, int, int, int], ...] = ()
    # Series start at `first_s` (a node that joined, or a Prometheus without older data) and
    # are scraped `scrape_offset_s` after the scenario's grid (pods never start on the minute).
    first_s: int = 0
    scrape_offset_s: int = 0
    # The node agent's nvidia-match (docs/agent.md), scraped with the node's series: steps of
    # AGENT_PASS, AGENT_FAIL, AGENT_UNKNOWN (no check_ok, check_info says UNKNOWN) or AGENT_GONE
    # (no series: pod gone, scrape failing); empty: no agent on the node.
    agent: Steps = ()
    # Its GPUs published by the DRA driver only: kube-state-metrics has no nvidia_com_gpu
    # capacity or allocatable row for it (dcgm-exporter still exports its GPUs).
    dra: bool = False
    # GPU counts over time (default: `gpus` all along): kube-state-metrics' capacity, and how
    # many of the node's GPUs dcgm-exporter exports (the lowest indexes).
    capacity: Steps = ()
    exported: Steps = ()
    # dcgm-exporter's DCGM_FI_DEV_FABRIC_MANAGER_STATUS of GPU 0 over time (every other GPU in
    # Success, 3); empty: the exporter does not expose the field on this node.
    fabric: Steps = ()
    # The other fabric fields, each empty where the exporter does not expose it: the SXid of
    # DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS of switch 0 (every other switch 0), the
    # DCGM_FI_DEV_NVSWITCH_LINK_STATUS of switch 0's port 0 (every other port ACTIVE), and the
    # DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL counter of GPU 0 (every other GPU 0).
    nvswitch_fatal: Steps = ()
    nvswitch_link: Steps = ()
    nvlink_recovery: Steps = ()
    # dcgm-exporter's pod mapping: (gpu index, namespace, pod) of a pod holding that GPU; its
    # series carry the pod's `namespace` and `pod` labels (one pod per GPU here).
    gpu_pods: tuple[tuple[int, str, str], ...] = ()

    def host(self) -> str:
        return self.host_value or self.name

    def gpu_uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.name}/{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def gpu_pci(self, index: int) -> str:
        return f"00000000:{self.pci_base + index * 0x10:02X}:00.0"


AGENT_PASS, AGENT_FAIL, AGENT_UNKNOWN, AGENT_GONE = 1, 0, -1, -2
AGENT_DETAIL = {
    AGENT_PASS: ("PASS", "module 580.159.03 == NVML 580.159.03 (/usr/lib/x86_64-linux-gnu)"),
    AGENT_FAIL: ("FAIL", "module 580.126.09 != NVML 580.159.03 (/usr/lib/x86_64-linux-gnu)"),
    AGENT_UNKNOWN: ("UNKNOWN", "/sys/module/nvidia/version: permission denied"),
}


@dataclass(frozen=True, slots=True)
class PodTimeline:
    """A pod as kube-state-metrics reports it: phase series, `kube_pod_info` with its owner,
    with GPUs its requests, and where `ready` is given its Ready condition."""

    namespace: str
    name: str
    node: str
    gpus: int = 0
    running: Steps = ((0, 1),)  # 1: phase Running from then on; 0: Succeeded
    created_by: tuple[str, str] = ("", "")  # kube_pod_info's created_by_kind, created_by_name
    ready: Steps = ()  # kube_pod_status_ready: 1 Ready (condition true) from then on, 0 not
    # A pod kubelet refused: phase Failed with this `status.reason` (UnexpectedAdmissionError,
    # OutOfcpu, NodeAffinity, …); its series start at `first_s`, when it was created.
    reason: str = ""
    first_s: int = 0

    def phase_steps(self, phase: str) -> Steps:
        """kube_pod_status_phase{phase=…}: Running while `running` is 1, then Succeeded."""
        if self.reason:
            return ((0, 1),) if phase == "Failed" else ()
        if phase == "Running":
            return self.running
        if phase == "Succeeded":
            return tuple((t, 1 - v) for t, v in self.running)
        return ()

    def labels(self) -> str:
        return f'namespace="{self.namespace}",pod="{self.name}",uid="{self.uid}"'

    @property
    def uid(self) -> str:
        digest = hashlib.sha256(f"{self.namespace}/{self.name}".encode()).hexdigest()
        return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


# kube-state-metrics reports its own pod, so a real cluster never has an empty phase family.
KSM_POD = PodTimeline("monitoring", "kube-state-metrics-0", "control-plane-1")


@dataclass(frozen=True, slots=True)
class Scenario:
    start: datetime
    duration_s: int
    nodes: tuple[NodeTimeline, ...]
    scrape_s: int = 15
    pods: tuple[PodTimeline, ...] = (KSM_POD,)
    extra_uuids: dict[tuple[str, int], str] = field(default_factory=dict)
    extra_pci: dict[tuple[str, int], str] = field(default_factory=dict)
    # The `job` label a scrape gives each exporter's series (`JOBS`), for the exporter pins
    # (--dcgm-selector, --ksm-selector); off by default, as in promtool's unit-test series.
    job_labels: bool = False

    def uuid(self, node: NodeTimeline, index: int) -> str:
        return self.extra_uuids.get((node.name, index)) or node.gpu_uuid(index)

    def pci(self, node: NodeTimeline, index: int) -> str:
        return self.extra_pci.get((node.name, index)) or node.gpu_pci(index)


# The jobs of the GPU Operator's dcgm-exporter ServiceMonitor and kube-prometheus-stack's
# kube-state-metrics, by metric-name prefix.
JOBS = (("DCGM_", "nvidia-dcgm-exporter"), ("kube_", "kube-state-metrics"))


def job_label(sc: Scenario, metric: str) -> str:
    """``,job="…"`` for a metric of a pinned exporter in a scenario with job labels, else ""."""
    if not sc.job_labels:
        return ""
    job = next((j for prefix, j in JOBS if metric.startswith(prefix)), "")
    return f',job="{job}"' if job else ""


def value_at(steps: Steps, offset_s: int, default: int) -> int:
    """The step function's value at `offset_s`.

    >>> value_at(((60, 7), (600, 8)), 59, 8), value_at(((60, 7), (600, 8)), 60, 8)
    (8, 7)
    """
    value = default
    for start, v in steps:
        if offset_s >= start:
            value = v
    return value


def _stamps(sc: Scenario, node: NodeTimeline | None = None) -> Iterator[tuple[int, float]]:
    """(offset_s, timestamp) of every scrape of a node's series (of the scenario's by default)."""
    base = sc.start.timestamp()
    shift, first = (node.scrape_offset_s, node.first_s) if node else (0, 0)
    for offset in range(shift, sc.duration_s + 1, sc.scrape_s):
        if offset >= first:
            yield offset, base + offset


def gpu_labels(sc: Scenario, node: NodeTimeline, gpu: int) -> str:
    """dcgm-exporter's labels of one GPU, in the exporter's order."""
    labels = (
        f'gpu="{gpu}",UUID="{sc.uuid(node, gpu)}",pci_bus_id="{sc.pci(node, gpu)}",'
        f'device="nvidia{gpu}",modelName="NVIDIA GeForce RTX 5090",'
        f'{node.host_label}="{node.host()}"'
    )
    held = next(((ns, pod) for g, ns, pod in node.gpu_pods if g == gpu), None)
    if held is not None:
        labels += f',container="main",namespace="{held[0]}",pod="{held[1]}"'
    return labels + (f',node="{node.node_label}"' if node.node_label else "")


def _write_nvswitch(sc: Scenario, out: TextIO) -> int:
    """The NVSwitch series: per switch (label ``nvswitch``) and per switch port (``nvlink``),
    with the node's host label as dcgm-exporter's switch collector writes it."""
    written = 0
    for name, of, ports, default in (
        (NVSWITCH_FATAL, "nvswitch_fatal", 1, 0),
        (NVSWITCH_LINK, "nvswitch_link", 2, NVSWITCH_LINK_ACTIVE),
    ):
        nodes = [n for n in sc.nodes if getattr(n, of)]
        if nodes:
            out.write(f"# TYPE {name} gauge\n")
        for node in nodes:
            for switch in range(NVSWITCHES):
                for port in range(ports):
                    steps = getattr(node, of) if switch == port == 0 else ()
                    labels = f'nvswitch="{switch}",{node.host_label}="{node.host()}"'
                    labels += f',nvlink="{port}"' if name == NVSWITCH_LINK else ""
                    labels += job_label(sc, name)
                    for offset, stamp in _stamps(sc, node):
                        value = value_at(steps, offset, default)
                        out.write(f"{name}{{{labels}}} {value} {stamp:.3f}\n")
                        written += 1
    return written


POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# The `status.reason` values kube-state-metrics' kube_pod_status_reason has a series for.
POD_REASONS = ("Evicted", "NodeAffinity", "NodeLost", "Shutdown", "UnexpectedAdmissionError")


def write_openmetrics(sc: Scenario, out: TextIO) -> int:
    """Write the scenario; returns the number of samples."""
    written = 0

    def series(
        name: str,
        labels: str,
        steps: Steps,
        default: int,
        node: NodeTimeline | None = None,
        first_s: int = 0,
    ) -> None:
        nonlocal written
        labels += job_label(sc, name)
        for offset, stamp in _stamps(sc, node):
            if offset >= first_s:
                out.write(f"{name}{{{labels}}} {value_at(steps, offset, default)} {stamp:.3f}\n")
                written += 1

    out.write("# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n")
    out.write("# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n")
    for node in (n for n in sc.nodes if n.xid_gauge):
        for gpu in range(node.gpus):
            steps = tuple((t, v) for t, g, v in node.xids if g == gpu)
            if node.exported:
                written += _exported(sc, node, gpu, steps, out)
                continue
            series(XID, gpu_labels(sc, node, gpu), steps, 0, node)
    if any(n.fabric for n in sc.nodes):
        out.write("# TYPE DCGM_FI_DEV_FABRIC_MANAGER_STATUS gauge\n")
        for node in (n for n in sc.nodes if n.fabric):
            for gpu in range(node.gpus):
                steps = node.fabric if gpu == 0 else ()
                series(FABRIC, gpu_labels(sc, node, gpu), steps, FABRIC_SUCCESS, node)
    written += _write_nvswitch(sc, out)
    if any(n.nvlink_recovery for n in sc.nodes):
        out.write(f"# TYPE {NVLINK_RECOVERY} counter\n")
        for node in (n for n in sc.nodes if n.nvlink_recovery):
            for gpu in range(node.gpus):
                steps = node.nvlink_recovery if gpu == 0 else ()
                series(NVLINK_RECOVERY, gpu_labels(sc, node, gpu), steps, 0, node)
    if any(n.gpu_temp for n in sc.nodes):
        out.write("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n")
        for node in (n for n in sc.nodes if n.gpu_temp):
            for gpu in range(node.gpus):
                series("DCGM_FI_DEV_GPU_TEMP", gpu_labels(sc, node, gpu), (), 41, node)
    if any(n.xid_counts for n in sc.nodes):
        out.write("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n")
        for node in sc.nodes:
            for gpu, xid in sorted({(g, x) for _, g, x, _ in node.xid_counts}):
                steps = tuple((t, c) for t, g, x, c in node.xid_counts if (g, x) == (gpu, xid))
                labels = f'{gpu_labels(sc, node, gpu)},window_size_in_ms="300000",xid="{xid}"'
                series(XID_COUNT, labels, steps, 0, node)
    gpus = ',resource="nvidia_com_gpu",unit="integer"'
    out.write("# TYPE kube_node_status_capacity gauge\n")
    for node in (n for n in sc.nodes if not n.dra):
        labels = f'node="{node.name}"{gpus}'
        series("kube_node_status_capacity", labels, node.capacity, node.gpus, node)
    out.write("# TYPE kube_node_status_allocatable gauge\n")
    for node in (n for n in sc.nodes if not n.dra):
        labels = f'node="{node.name}"{gpus}'
        series("kube_node_status_allocatable", labels, node.allocatable, node.gpus, node)
    out.write("# TYPE kube_node_spec_unschedulable gauge\n")
    for node in sc.nodes:
        labels = f'node="{node.name}"'
        series("kube_node_spec_unschedulable", labels, node.unschedulable, 0, node)
    written += _write_agent(sc, out)
    written += _write_pod_state(sc, out)
    out.write("# TYPE kube_pod_status_phase gauge\n")
    for pod in sc.pods:
        for phase in POD_PHASES:
            labels = f'namespace="{pod.namespace}",pod="{pod.name}",uid="{pod.uid}",phase="{phase}"'
            series("kube_pod_status_phase", labels, pod.phase_steps(phase), 0, first_s=pod.first_s)
    if any(p.reason for p in sc.pods):
        out.write("# TYPE kube_pod_status_reason gauge\n")
        out.write("# TYPE kube_pod_created gauge\n")
        for pod in sc.pods:
            for reason in POD_REASONS:
                labels = f'{pod.labels()},reason="{reason}"'
                hit = int(pod.reason == reason)
                series("kube_pod_status_reason", labels, (), hit, first_s=pod.first_s)
            created = int(sc.start.timestamp()) + pod.first_s
            series("kube_pod_created", pod.labels(), (), created, first_s=pod.first_s)
    if any(p.gpus for p in sc.pods):
        out.write("# TYPE kube_pod_container_resource_requests gauge\n")
        for pod in (p for p in sc.pods if p.gpus):
            labels = (
                f'namespace="{pod.namespace}",pod="{pod.name}",uid="{pod.uid}",container="main",'
                f'node="{pod.node}"{gpus}'
            )
            series(
                "kube_pod_container_resource_requests", labels, (), pod.gpus, first_s=pod.first_s
            )
    out.write("# EOF\n")
    return written


def _exported(sc: Scenario, node: NodeTimeline, gpu: int, steps: Steps, out: TextIO) -> int:
    """The Xid gauge of one GPU at the scrapes where dcgm-exporter exports it (`exported`)."""
    written = 0
    labels = gpu_labels(sc, node, gpu) + job_label(sc, XID)
    for offset, stamp in _stamps(sc, node):
        if gpu < value_at(node.exported, offset, node.gpus):
            out.write(f"{XID}{{{labels}}} {value_at(steps, offset, 0)} {stamp:.3f}\n")
            written += 1
    return written


def _write_agent(sc: Scenario, out: TextIO) -> int:
    """The agent's check_ok and check_info of nvidia-match (a sample only where it exists)."""
    agents = [n for n in sc.nodes if n.agent]
    if not agents:
        return 0
    written = 0

    def labels(node: NodeTimeline) -> str:
        pod = f"gpu-node-guard-agent-{node.gpu_uuid(0)[4:9]}"
        return (
            f'node="{node.name}",check="nvidia-match",namespace="gpu-node-guard-jobs",pod="{pod}"'
        )

    out.write("# TYPE gpu_node_guard_agent_check_ok gauge\n")
    for node in agents:
        for offset, stamp in _stamps(sc, node):
            state = value_at(node.agent, offset, AGENT_GONE)
            if state in (AGENT_PASS, AGENT_FAIL):
                out.write(f"gpu_node_guard_agent_check_ok{{{labels(node)}}} {state} {stamp:.3f}\n")
                written += 1
    out.write("# TYPE gpu_node_guard_agent_check_info gauge\n")
    for node in agents:
        for state, (status, detail) in AGENT_DETAIL.items():
            info = f'{labels(node)},status="{status}",detail="{detail}"'
            for offset, stamp in _stamps(sc, node):
                if value_at(node.agent, offset, AGENT_GONE) == state:
                    out.write(f"gpu_node_guard_agent_check_info{{{info}}} 1 {stamp:.3f}\n")
                    written += 1
    return written


def _write_pod_state(sc: Scenario, out: TextIO) -> int:
    """kube_pod_info of every pod; kube_pod_status_ready of those with `ready` steps."""
    written = 0
    out.write("# TYPE kube_pod_info gauge\n")
    for pod in sc.pods:
        kind, owner = pod.created_by
        labels = (
            f'{pod.labels()},node="{pod.node}",created_by_kind="{kind}",created_by_name="{owner}"'
        ) + job_label(sc, "kube_pod_info")
        for offset, stamp in _stamps(sc):
            if offset >= pod.first_s:
                out.write(f"kube_pod_info{{{labels}}} 1 {stamp:.3f}\n")
                written += 1
    if not any(p.ready for p in sc.pods):
        return written
    out.write("# TYPE kube_pod_status_ready gauge\n")
    for pod in (p for p in sc.pods if p.ready):
        for condition in ("true", "false", "unknown"):
            labels = f'{pod.labels()},condition="{condition}"' + job_label(sc, "kube_pod_")
            for offset, stamp in _stamps(sc):
                ready = value_at(pod.ready, offset, 0)
                value = ready if condition == "true" else (1 - ready if condition == "false" else 0)
                out.write(f"kube_pod_status_ready{{{labels}}} {value} {stamp:.3f}\n")
                written += 1
    return written
