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


@dataclass(frozen=True, slots=True)
class NodeTimeline:
    name: str
    gpus: int = 8
    host_label: str = "Hostname"
    xids: tuple[tuple[int, int, int], ...] = ()  # (offset_s, gpu index, last Xid from then on)
    allocatable: Steps = ()  # default: all GPUs allocatable
    unschedulable: Steps = ()  # default: schedulable
    pci_base: int = 0x18

    def gpu_uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.name}/{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def gpu_pci(self, index: int) -> str:
        return f"00000000:{self.pci_base + index * 0x10:02X}:00.0"


@dataclass(frozen=True, slots=True)
class Scenario:
    start: datetime
    duration_s: int
    nodes: tuple[NodeTimeline, ...]
    scrape_s: int = 15
    extra_uuids: dict[tuple[str, int], str] = field(default_factory=dict)
    extra_pci: dict[tuple[str, int], str] = field(default_factory=dict)

    def uuid(self, node: NodeTimeline, index: int) -> str:
        return self.extra_uuids.get((node.name, index)) or node.gpu_uuid(index)

    def pci(self, node: NodeTimeline, index: int) -> str:
        return self.extra_pci.get((node.name, index)) or node.gpu_pci(index)


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


def _stamps(sc: Scenario) -> Iterator[tuple[int, float]]:
    base = sc.start.timestamp()
    for offset in range(0, sc.duration_s + 1, sc.scrape_s):
        yield offset, base + offset


def write_openmetrics(sc: Scenario, out: TextIO) -> int:
    """Write the scenario; returns the number of samples."""
    written = 0
    out.write("# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n")
    out.write("# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n")
    for node in sc.nodes:
        for gpu in range(node.gpus):
            steps = tuple((t, v) for t, g, v in node.xids if g == gpu)
            labels = (
                f'gpu="{gpu}",UUID="{sc.uuid(node, gpu)}",pci_bus_id="{sc.pci(node, gpu)}",'
                f'device="nvidia{gpu}",modelName="NVIDIA GeForce RTX 5090",'
                f'{node.host_label}="{node.name}"'
            )
            for offset, stamp in _stamps(sc):
                out.write(
                    f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {value_at(steps, offset, 0)} {stamp:.3f}\n"
                )
                written += 1
    families = (
        (
            "kube_node_status_capacity",
            lambda n, o: n.gpus,
            ',resource="nvidia_com_gpu",unit="integer"',
        ),
        (
            "kube_node_status_allocatable",
            lambda n, o: value_at(n.allocatable, o, n.gpus),
            ',resource="nvidia_com_gpu",unit="integer"',
        ),
        ("kube_node_spec_unschedulable", lambda n, o: value_at(n.unschedulable, o, 0), ""),
    )
    for name, value, extra in families:
        out.write(f"# TYPE {name} gauge\n")
        for node in sc.nodes:
            for offset, stamp in _stamps(sc):
                out.write(
                    f'{name}{{node="{node.name}"{extra}}} {value(node, offset)} {stamp:.3f}\n'
                )
                written += 1
    out.write("# EOF\n")
    return written
