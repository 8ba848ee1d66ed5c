"""The built-in example's dcgm-exporter and kube-state-metrics series, written as OpenMetrics for
promtool: node timelines (step functions in seconds from the start), family by family, in time
order. tests/scenario_build.py writes every other family the tests need."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

Steps = tuple[tuple[int, int], ...]  # (offset_s, value from then on)
XID = "DCGM_FI_DEV_XID_ERRORS"
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# kube-state-metrics reports its own pod, so a real cluster never has an empty phase family.
KSM_POD = (
    'namespace="monitoring",pod="kube-state-metrics-0",uid="90ee5d45-09d5-0605-69f9-c2495f02f349"'
)


@dataclass(frozen=True, slots=True)
class NodeTimeline:
    name: str
    gpus: int = 8
    host_label: str = "Hostname"
    xids: tuple[tuple[int, int, int], ...] = ()  # (offset_s, gpu index, last Xid from then on)
    allocatable: Steps = ()  # default: all GPUs allocatable
    unschedulable: Steps = ()  # default: schedulable

    def gpu_uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.name}/{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def gpu_pci(self, index: int) -> str:
        return f"00000000:{0x18 + index * 0x10:02X}:00.0"


@dataclass(frozen=True, slots=True)
class Scenario:
    start: datetime
    duration_s: int
    nodes: tuple[NodeTimeline, ...]
    scrape_s: int = 15
    extra_uuids: dict[tuple[str, int], str] = field(default_factory=dict)
    extra_pci: dict[tuple[str, int], str] = field(default_factory=dict)


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


def write_openmetrics(sc: Scenario, out: TextIO) -> int:
    """Write the scenario; returns the number of samples."""
    offsets = range(0, sc.duration_s + 1, sc.scrape_s)
    written = 0

    def series(name: str, labels: str, steps: Steps, default: int) -> None:
        nonlocal written
        for offset in offsets:
            value = value_at(steps, offset, default)
            out.write(f"{name}{{{labels}}} {value} {sc.start.timestamp() + offset:.3f}\n")
        written += len(offsets)

    out.write(f"# HELP {XID} Value of the last XID error encountered.\n# TYPE {XID} gauge\n")
    for node in sc.nodes:
        for gpu in range(node.gpus):
            uuid = sc.extra_uuids.get((node.name, gpu)) or node.gpu_uuid(gpu)
            pci = sc.extra_pci.get((node.name, gpu)) or node.gpu_pci(gpu)
            labels = (
                f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="{pci}",device="nvidia{gpu}",'
                f'modelName="NVIDIA GeForce RTX 5090",{node.host_label}="{node.name}"'
            )
            series(XID, labels, tuple((t, v) for t, g, v in node.xids if g == gpu), 0)
    gpus = ',resource="nvidia_com_gpu",unit="integer"'
    for name in ("kube_node_status_capacity", "kube_node_status_allocatable"):
        out.write(f"# TYPE {name} gauge\n")
        for node in sc.nodes:
            steps = node.allocatable if name.endswith("allocatable") else ()
            series(name, f'node="{node.name}"{gpus}', steps, node.gpus)
    out.write("# TYPE kube_node_spec_unschedulable gauge\n")
    for node in sc.nodes:
        series("kube_node_spec_unschedulable", f'node="{node.name}"', node.unschedulable, 0)
    owner = 'node="control-plane-1",created_by_kind="",created_by_name=""'
    out.write("# TYPE kube_pod_info gauge\n")
    series("kube_pod_info", f"{KSM_POD},{owner}", (), 1)
    out.write("# TYPE kube_pod_status_phase gauge\n")
    for phase in POD_PHASES:
        series("kube_pod_status_phase", f'{KSM_POD},phase="{phase}"', (), int(phase == "Running"))
    out.write("# EOF\n")
    return written
