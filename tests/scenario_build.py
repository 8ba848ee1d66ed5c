"""Synthetic dcgm-exporter and kube-state-metrics series for the tests and benches, written as
OpenMetrics for promtool: node timelines (step functions in seconds from the start), family by
family, in time order. guard/example/scenario.py writes the built-in example's subset; `incident`
is that example in these classes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TextIO

from guard.example import incident as example
from guard.example import scenario as shipped
from guard.example.scenario import POD_PHASES, XID, Steps, value_at

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
FABRIC = "DCGM_FI_DEV_FABRIC_MANAGER_STATUS"
FABRIC_SUCCESS, FABRIC_FAILURE = 3, 4  # DCGM dcgmFabricManagerStatus_t
NVSWITCH_FATAL = "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS"
NVSWITCH_LINK = "DCGM_FI_DEV_NVSWITCH_LINK_STATUS"
NVSWITCH_LINK_ACTIVE = 2  # DCGM: UNKNOWN -1, OFF 0, SAFE 1, ACTIVE 2, ERROR 3
NVLINK_RECOVERY = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
NVSWITCHES = 4  # an HGX H100 board's


@dataclass(frozen=True, slots=True)
class NodeTimeline(shipped.NodeTimeline):
    """The example's node timeline with every other series the tests write."""

    pci_base: int = 0x18
    # dcgm-exporter's side: the host label's value (default: the node name; an exporter without
    # NODE_NAME says its pod name), a relabelled `node`, which metrics it exports.
    host_value: str = ""
    node_label: str = ""
    xid_gauge: bool = True
    gpu_temp: bool = False
    xid_counts: tuple[tuple[int, int, int, int], ...] = ()  # (offset_s, gpu, xid, count from then)
    first_s: int = 0  # series start here (a node that joined, a Prometheus without older data)
    scrape_offset_s: int = 0  # scraped this long after the scenario's grid
    # The node agent's nvidia-match (docs/agent.md): steps of AGENT_PASS, AGENT_FAIL,
    # AGENT_UNKNOWN (check_info only) or AGENT_GONE (no series); empty: no agent on the node.
    agent: Steps = ()
    dra: bool = False  # GPUs published by the DRA driver only: no nvidia_com_gpu rows
    # GPU counts over time (default: `gpus`): capacity, and the lowest GPUs dcgm-exporter exports.
    capacity: Steps = ()
    exported: Steps = ()
    # Fabric fields on GPU 0, switch 0 or switch 0's port 0 (every other one healthy); empty:
    # not exported on this node.
    fabric: Steps = ()
    nvswitch_fatal: Steps = ()
    nvswitch_link: Steps = ()
    nvlink_recovery: Steps = ()
    gpu_pods: tuple[tuple[int, str, str], ...] = ()  # (gpu, namespace, pod) holding that GPU

    def host(self) -> str:
        return self.host_value or self.name

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
class Scenario(shipped.Scenario):
    """The example's scenario with pods and the exporters' job labels."""

    pods: tuple[PodTimeline, ...] = (KSM_POD,)
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


# The `status.reason` values kube-state-metrics' kube_pod_status_reason has a series for.
POD_REASONS = ("Evicted", "NodeAffinity", "NodeLost", "Shutdown", "UnexpectedAdmissionError")


@dataclass
class _Writer:
    """Writes families and their series' samples, counting the samples."""

    sc: Scenario
    out: TextIO
    written: int = 0

    def family(self, name: str, kind: str = "gauge") -> None:
        self.out.write(f"# TYPE {name} {kind}\n")

    def series(
        self,
        name: str,
        labels: str,
        value: Steps | Callable[[int], int | None],
        default: int = 0,
        node: NodeTimeline | None = None,
        first_s: int = 0,
        job_of: str | None = None,
    ) -> None:
        """One sample per scrape (of `node`'s series, else the scenario's) from `first_s` on: the
        steps' value (`default` before them), or `value` of the offset where it is not None; the
        `job` label of `job_of` (default: `name`; "": none)."""
        labels += job_label(self.sc, name if job_of is None else job_of)
        base = self.sc.start.timestamp()
        shift, first = (node.scrape_offset_s, max(node.first_s, first_s)) if node else (0, first_s)
        for offset in range(shift, self.sc.duration_s + 1, self.sc.scrape_s):
            if offset < first:
                continue
            found = value(offset) if callable(value) else value_at(value, offset, default)
            if found is not None:
                self.out.write(f"{name}{{{labels}}} {found} {base + offset:.3f}\n")
                self.written += 1


def write_openmetrics(sc: Scenario, out: TextIO) -> int:
    """Write the scenario; returns the number of samples."""
    w = _Writer(sc, out)
    out.write("# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n")
    w.family(XID)
    for node in (n for n in sc.nodes if n.xid_gauge):
        for gpu in range(node.gpus):
            steps = tuple((t, v) for t, g, v in node.xids if g == gpu)
            w.series(XID, gpu_labels(sc, node, gpu), _exported(node, gpu, steps), node=node)
    _per_gpu(w, FABRIC, "gauge", "fabric", FABRIC_SUCCESS)
    _write_nvswitch(w)
    _per_gpu(w, NVLINK_RECOVERY, "counter", "nvlink_recovery", 0)
    _per_gpu(w, "DCGM_FI_DEV_GPU_TEMP", "gauge", "gpu_temp", 41)
    if any(n.xid_counts for n in sc.nodes):
        w.family(XID_COUNT)
        for node in sc.nodes:
            for gpu, xid in sorted({(g, x) for _, g, x, _ in node.xid_counts}):
                steps = tuple((t, c) for t, g, x, c in node.xid_counts if (g, x) == (gpu, xid))
                labels = f'{gpu_labels(sc, node, gpu)},window_size_in_ms="300000",xid="{xid}"'
                w.series(XID_COUNT, labels, steps, 0, node)
    gpus = ',resource="nvidia_com_gpu",unit="integer"'
    for name, attr in (
        ("kube_node_status_capacity", "capacity"),
        ("kube_node_status_allocatable", "allocatable"),
    ):
        w.family(name)
        for node in (n for n in sc.nodes if not n.dra):
            w.series(name, f'node="{node.name}"{gpus}', getattr(node, attr), node.gpus, node)
    w.family("kube_node_spec_unschedulable")
    for node in sc.nodes:
        w.series("kube_node_spec_unschedulable", f'node="{node.name}"', node.unschedulable, 0, node)
    _write_agent(w)
    _write_pod_state(w)
    w.family("kube_pod_status_phase")
    for pod in sc.pods:
        for phase in POD_PHASES:
            labels = f'{pod.labels()},phase="{phase}"'
            w.series(
                "kube_pod_status_phase", labels, pod.phase_steps(phase), 0, first_s=pod.first_s
            )
    if any(p.reason for p in sc.pods):
        w.family("kube_pod_status_reason")
        w.family("kube_pod_created")
        for pod in sc.pods:
            for reason in POD_REASONS:
                labels = f'{pod.labels()},reason="{reason}"'
                hit = int(pod.reason == reason)
                w.series("kube_pod_status_reason", labels, (), hit, first_s=pod.first_s)
            created = int(sc.start.timestamp()) + pod.first_s
            w.series("kube_pod_created", pod.labels(), (), created, first_s=pod.first_s)
    if any(p.gpus for p in sc.pods):
        w.family("kube_pod_container_resource_requests")
        for pod in (p for p in sc.pods if p.gpus):
            labels = f'{pod.labels()},container="main",node="{pod.node}"{gpus}'
            w.series(
                "kube_pod_container_resource_requests", labels, (), pod.gpus, first_s=pod.first_s
            )
    out.write("# EOF\n")
    return w.written


def _exported(node: NodeTimeline, gpu: int, steps: Steps) -> Callable[[int], int | None]:
    """The Xid gauge of one GPU, at the scrapes where dcgm-exporter exports it (`exported`)."""
    if not node.exported:
        return lambda t: value_at(steps, t, 0)
    return lambda t: value_at(steps, t, 0) if gpu < value_at(node.exported, t, node.gpus) else None


def _per_gpu(w: _Writer, name: str, kind: str, attr: str, default: int) -> None:
    """A per-GPU family of the nodes where `attr` is set: its steps on GPU 0 (where `attr` is
    steps), `default` on every other GPU."""
    nodes = [n for n in w.sc.nodes if getattr(n, attr)]
    if nodes:
        w.family(name, kind)
    for node in nodes:
        steps = getattr(node, attr)
        for gpu in range(node.gpus):
            mine = steps if gpu == 0 and isinstance(steps, tuple) else ()
            w.series(name, gpu_labels(w.sc, node, gpu), mine, default, node)


def _write_nvswitch(w: _Writer) -> None:
    """The NVSwitch series: per switch (label ``nvswitch``) and per switch port (``nvlink``),
    with the node's host label as dcgm-exporter's switch collector writes it."""
    for name, of, ports, default in (
        (NVSWITCH_FATAL, "nvswitch_fatal", 1, 0),
        (NVSWITCH_LINK, "nvswitch_link", 2, NVSWITCH_LINK_ACTIVE),
    ):
        nodes = [n for n in w.sc.nodes if getattr(n, of)]
        if nodes:
            w.family(name)
        for node in nodes:
            for switch in range(NVSWITCHES):
                for port in range(ports):
                    steps = getattr(node, of) if switch == port == 0 else ()
                    labels = f'nvswitch="{switch}",{node.host_label}="{node.host()}"'
                    labels += f',nvlink="{port}"' if name == NVSWITCH_LINK else ""
                    w.series(name, labels, steps, default, node)


def _write_agent(w: _Writer) -> None:
    """The agent's check_ok and check_info of nvidia-match (a sample only where it exists)."""
    agents = [n for n in w.sc.nodes if n.agent]
    if not agents:
        return

    def labels(node: NodeTimeline) -> str:
        pod = f"gpu-node-guard-agent-{node.gpu_uuid(0)[4:9]}"
        return (
            f'node="{node.name}",check="nvidia-match",namespace="gpu-node-guard-jobs",pod="{pod}"'
        )

    def ok(node: NodeTimeline) -> Callable[[int], int | None]:
        def at(t: int) -> int | None:
            state = value_at(node.agent, t, AGENT_GONE)
            return state if state in (AGENT_PASS, AGENT_FAIL) else None

        return at

    def info(node: NodeTimeline, shown: int) -> Callable[[int], int | None]:
        return lambda t: 1 if value_at(node.agent, t, AGENT_GONE) == shown else None

    w.family("gpu_node_guard_agent_check_ok")
    for node in agents:
        w.series("gpu_node_guard_agent_check_ok", labels(node), ok(node), node=node, job_of="")
    w.family("gpu_node_guard_agent_check_info")
    for node in agents:
        for shown, (status, detail) in AGENT_DETAIL.items():
            named = f'{labels(node)},status="{status}",detail="{detail}"'
            w.series(
                "gpu_node_guard_agent_check_info", named, info(node, shown), node=node, job_of=""
            )


def _write_pod_state(w: _Writer) -> None:
    """kube_pod_info of every pod; kube_pod_status_ready of those with `ready` steps."""
    w.family("kube_pod_info")
    for pod in w.sc.pods:
        kind, owner = pod.created_by
        labels = (
            f'{pod.labels()},node="{pod.node}",created_by_kind="{kind}",created_by_name="{owner}"'
        )
        w.series("kube_pod_info", labels, (), 1, first_s=pod.first_s)
    if not any(p.ready for p in w.sc.pods):
        return
    w.family("kube_pod_status_ready")
    for pod in (p for p in w.sc.pods if p.ready):
        for condition in ("true", "false", "unknown"):
            labels = f'{pod.labels()},condition="{condition}"'
            w.series("kube_pod_status_ready", labels, _ready(pod, condition), job_of="kube_pod_")


def _ready(pod: PodTimeline, condition: str) -> Callable[[int], int]:
    """kube_pod_status_ready of one condition: 1 for the pod's state, 0 for the others."""

    def at(t: int) -> int:
        ready = value_at(pod.ready, t, 0)
        return {"true": ready, "false": 1 - ready}.get(condition, 0)

    return at


def incident(**kwargs: Any) -> Scenario:
    """The built-in example (guard/example/incident.py) as a scenario of this module."""
    sc = example.incident(**kwargs)
    nodes = tuple(NodeTimeline(**{f.name: getattr(n, f.name) for f in fields(n)}) for n in sc.nodes)
    return Scenario(**{f.name: getattr(sc, f.name) for f in fields(sc)} | {"nodes": nodes})
