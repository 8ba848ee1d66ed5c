"""A synthetic GPU cluster: who is faulted, and its dcgm-exporter + kube-state-metrics series.

Every node has `gpus` GPUs. A handful of nodes carry a role (the rest are healthy):

  fault-79     Xid 79 and GPU loss all along, uncordoned            → the guard cordons it
  fault-48     Xid 48 and GPU loss, uncordoned                      → waits (one cordon per cycle)
  user-13      Xid 13 (user code), no loss                          → ignored
  guarded-a/b  cordoned by the guard (annotations), Xid 79, loss    → return check: not rebooted yet
  human-48     cordoned by a person, Xid 48, loss                   → left alone
  remap        a GPU with a pending row remap                       → reported, no action

The data cover `data_s` seconds at `scrape_s`, ending at `at` (the instant the guard evaluates).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from bench.openmetrics import Family, SeriesSpec
from guard.codec.queries import HELD_LOOKBACK_S
from guard.settings import Settings

Role = Literal["fault-79", "fault-48", "user-13", "guarded-a", "guarded-b", "human-48", "remap"]
ROLES: tuple[Role, ...] = (
    "fault-79",
    "fault-48",
    "user-13",
    "guarded-a",
    "guarded-b",
    "human-48",
    "remap",
)
XID_OF: dict[Role, int] = {
    "fault-79": 79,
    "fault-48": 48,
    "user-13": 13,
    "guarded-a": 79,
    "guarded-b": 79,
    "human-48": 48,
}
LOSS_ROLES: frozenset[Role] = frozenset(
    {"fault-79", "fault-48", "guarded-a", "guarded-b", "human-48"}
)
CORDONED_ROLES: frozenset[Role] = frozenset({"guarded-a", "guarded-b", "human-48"})
FAULT_GPU = 3
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "570.124.06"
# Inputs the guard reads only at the evaluation instant (no range, no subquery): ten minutes of
# data give the same answer and the same work as an hour (Prometheus's lookback-delta is 5 min).
INSTANT_ONLY_S = 600
LOOKBACK_DELTA_S = 300  # guard.example.promserver starts Prometheus with --query.lookback-delta=5m


def data_seconds() -> int:
    """The longest range the guard reads (the loss-history lookback or the hold window) plus
    Prometheus's 5-minute lookback-delta before its first step, plus a minute: every step of
    every query then sees real data. A shorter TSDB would make those queries look cheaper."""
    longest = max(HELD_LOOKBACK_S, Settings().hold_window_s) + LOOKBACK_DELTA_S
    return -(-longest // 60) * 60 + 60


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    nodes: int
    gpus: int = 8
    scrape_s: int = 60
    data_s: int = field(default_factory=data_seconds)
    # Inside 06:00–08:00Z with the data before it, so promtool writes one TSDB block.
    at: datetime = datetime(2026, 9, 21, 7, 6, 0, tzinfo=UTC)
    row_remap_series: bool = True

    @property
    def start(self) -> datetime:
        return self.at - timedelta(seconds=self.data_s)

    def name(self, index: int) -> str:
        return f"gpu-{index:05d}"

    def roles(self) -> dict[str, Role]:
        """Spread the role nodes through the name order (first, middle, last …)."""
        count = len(ROLES)
        picks = [round(i * (self.nodes - 1) / (count - 1)) for i in range(count)]
        if len(set(picks)) != count:
            raise ValueError(f"need at least {count} nodes, got {self.nodes}")
        return {self.name(i): role for i, role in zip(picks, ROLES, strict=True)}

    def ip(self, index: int) -> str:
        return f"10.{64 + index // 65536}.{index // 256 % 256}.{index % 256}"


def uuid_of(node: str, gpu: int) -> str:
    digits = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


def pci_of(gpu: int) -> str:
    return f"00000000:{0x18 + gpu * 0x10:02X}:00.0"


def families(spec: ClusterSpec) -> list[Family]:
    roles = spec.roles()
    onset = 300  # faults start five minutes into the data and hold to the end
    names = [spec.name(i) for i in range(spec.nodes)]
    result = [
        Family(
            "DCGM_FI_DEV_XID_ERRORS",
            "Value of the last XID error encountered.",
            list(_gpu_series(spec, names, roles, "xid", onset)),
        )
    ]
    if spec.row_remap_series:
        for metric, kind in (("PENDING", "remap"), ("FAILURE", "none")):
            result.append(
                Family(
                    f"DCGM_FI_DEV_ROW_REMAP_{metric}",
                    f"Row remapping {metric.lower()}.",
                    list(_gpu_series(spec, names, roles, kind, onset)),
                    INSTANT_ONLY_S,
                )
            )
    result.extend(_ksm_families(spec, names, roles, onset))
    return result


def _gpu_series(
    spec: ClusterSpec, names: list[str], roles: dict[str, Role], kind: str, onset: int
) -> Iterator[SeriesSpec]:
    for index, node in enumerate(names):
        role = roles.get(node)
        for gpu in range(spec.gpus):
            labels = (
                f'gpu="{gpu}",UUID="{uuid_of(node, gpu)}",pci_bus_id="{pci_of(gpu)}",'
                f'device="nvidia{gpu}",modelName="{MODEL}",Hostname="{node}",'
                f'DCGM_FI_DRIVER_VERSION="{DRIVER}",instance="{spec.ip(index)}:9400",'
                'job="dcgm-exporter"'
            )
            steps: tuple[tuple[int, int], ...] = ()
            if gpu == FAULT_GPU and role is not None:
                if kind == "xid" and role in XID_OF:
                    steps = ((onset, XID_OF[role]),)
                elif kind == "remap" and role == "remap":
                    steps = ((onset, 1),)
            yield SeriesSpec(labels, steps, 0)


def _ksm_families(
    spec: ClusterSpec, names: list[str], roles: dict[str, Role], onset: int
) -> list[Family]:
    ksm = ',instance="10.63.0.10:8080",job="kube-state-metrics"'
    out = []
    for metric in ("capacity", "allocatable"):
        series = []
        for node in names:
            lost = metric == "allocatable" and roles.get(node) in LOSS_ROLES
            steps = ((onset, spec.gpus - 1),) if lost else ()
            gpu = f'node="{node}",resource="nvidia_com_gpu",unit="integer"{ksm}'
            series.append(SeriesSpec(gpu, steps, spec.gpus))
        out.append(Family(f"kube_node_status_{metric}", "", series))
    cordoned = [
        SeriesSpec(f'node="{n}"{ksm}', (), 1 if roles.get(n) in CORDONED_ROLES else 0)
        for n in names
    ]
    out.append(Family("kube_node_spec_unschedulable", "", cordoned, INSTANT_ONLY_S))
    # kube-state-metrics' own pod: the guard requires the pod-phase family (GPU pods come from
    # it); the training pods run on schedulable nodes, which the guard's GPU-pod query skips.
    ksm_pod = 'namespace="monitoring",pod="kube-state-metrics-0",uid="ksm-0",phase="Running"'
    out.append(
        Family("kube_pod_status_phase", "", [SeriesSpec(ksm_pod + ksm, (), 1)], INSTANT_ONLY_S)
    )
    return out
