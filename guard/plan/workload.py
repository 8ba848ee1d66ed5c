"""Tell the workload: a Warning Event on each running pod that holds the GPU the guard isolates,
once per isolation; the guard never drains or evicts (docs/isolation.md, "Telling the workload").
"""

from __future__ import annotations

from dataclasses import replace

from guard.actions import EmitEvent, PodRef
from guard.model import GpuSample, NodeInfo, Snapshot
from guard.names import GPU_ISOLATED_EVENT
from guard.settings import Settings
from guard.states import Decision

NOTIFIED = Decision.WORKLOAD_NOTIFIED
ADVICE = (
    "the pod is not evicted: it keeps running until it ends; "
    "checkpoint and restart it (new pods go to healthy GPUs)"
)
HOLDS = "this pod holds the GPU (dcgm-exporter)"
ON_NODE = "this pod holds GPUs of the node (no pod named on the faulted GPU)"


def pods_on(
    snap: Snapshot, s: Settings, node: str, gpu: GpuSample | None
) -> tuple[tuple[PodRef, ...], bool]:
    """The pods on the isolated GPU (dcgm-exporter's labels), else the node's GPU pods; and
    whether the exporter named them."""
    uids = {(p.namespace, p.name): p.uid for p in snap.gpu_pods if p.node == node}
    on_gpu = (node, gpu.uuid.lower()) if gpu is not None else None
    holders = snap.prom.gpu_holders
    named = {(h.namespace, h.pod) for h in holders if (h.node, h.uuid.lower()) == on_gpu}
    found = named or set(uids)
    mine = ((ns, name) for ns, name in sorted(found) if ns != s.jobs_namespace)
    refs = tuple(PodRef(ns, name, uids.get((ns, name), "")) for ns, name in mine)
    return refs, bool(named)


def notify(
    snap: Snapshot,
    s: Settings,
    node: NodeInfo,
    gpu: GpuSample | None,
    fault: str,
    decision: str,
    incident: str,
) -> tuple[EmitEvent, ...]:
    """One Warning Event per pod on the isolated GPU (docs/isolation.md). `fault` says what
    was seen (xid-79 …), `decision` what the guard did; `incident` makes the Event's name one per
    isolation (the GPU and the cycle's time)."""
    pods, named = pods_on(snap, s, node.name, gpu)
    where = f"GPU {gpu.gpu} {gpu.uuid} ({gpu.pci})" if gpu is not None else "its GPUs"
    message = (
        f"{where} on node {node.name}: {fault}; gpu-node-guard {decision}; "
        f"{HOLDS if named else ON_NODE}. {ADVICE}"
    )
    event = EmitEvent(node.name, NOTIFIED, "Warning", GPU_ISOLATED_EVENT, message, incident)
    return tuple(replace(event, pod=p) for p in pods)
