"""Builders with defaults for planner tests: `node("gpu-17", cordoned_for=79)` and friends."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from guard.actions import Action, CreateJob, EmitEvent, to_json
from guard.jobs import JobTemplates
from guard.ledger import parse_ledger
from guard.model import (
    AgentCheck,
    GpuPod,
    GpuSample,
    JobInfo,
    JobRecord,
    JobResult,
    NodeInfo,
    PromView,
    ServicePod,
    Snapshot,
)
from guard.names import Annotations
from guard.plan.returning import plan_return
from guard.read import job_results
from guard.read.objects import node_info
from guard.settings import Settings

NOW = datetime(2026, 9, 21, 5, 55, 0, tzinfo=UTC)
CORDON_AT = "2026-09-21T05:00:00Z"  # older than two cycles: no evidence-Job repair
KEYS = Annotations("gpu-node-guard.io/")
# The return tables take one step at a time: without the default return conformance a rebooted
# node goes straight to its load test. The default order (conformance, load test, uncordon) has
# its own tests (test_plan_returning.py, "return conformance by default").
S = Settings(prometheus_url="http://127.0.0.1:9", return_conformance=False)
HELD_S = 3600  # a GPU loss that has outlasted every hold window
TEMPLATES = JobTemplates.load()
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
PCI = "0000:99:00.0"
LEDGER_LINE = f"{CORDON_AT} xid-79 {PCI} {UUID} gpu-node-guard\n"  # the one of back_node's cordon


def node(
    name: str,
    *,
    gpus: int = 8,
    allocatable: int | None = None,
    cordoned: bool = False,
    ready: bool = True,
    boot: str = "boot-1",
    guarded_xid: int | None = None,
    cordon_boot: str | None = "boot-1",
    capacity_at_cordon: int | None = None,
    hold: str | None = None,
    reset_done: str | None = None,
    extra: dict[str, str] | None = None,
    rv: str = "100",
    patch: dict[str, Any] | None = None,
) -> NodeInfo:
    """A Node as the API would return it, parsed by the guard's own reader.

    `cordon_boot=None` leaves the recorded boot id out; `extra` adds or overrides annotations;
    `patch` is merged into the raw object (for values the API types would not allow).
    """
    notes: dict[str, str] = {}
    if guarded_xid is not None:
        notes.update(
            {
                KEYS.reason: f"xid-{guarded_xid}",
                KEYS.at: CORDON_AT,
                KEYS.gpu_capacity: str(capacity_at_cordon or gpus),
                KEYS.gpu: f"{PCI} {UUID}",
            }
        )
        if cordon_boot is not None:
            notes[KEYS.boot_id] = cordon_boot
    if hold is not None:
        notes[KEYS.hold] = hold
    if reset_done is not None:
        notes[KEYS.reset_done] = reset_done
    notes.update(extra or {})
    free = gpus if allocatable is None else allocatable
    raw = {
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "annotations": notes,
        },
        "spec": {"unschedulable": cordoned},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "nodeInfo": {"bootID": boot},
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(free)},
        },
    }
    return node_info(_merged(raw, patch or {}), KEYS)


def _merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def back_node(name: str = "b", *, card: str = UUID, **kw: Any) -> NodeInfo:
    """A guard-cordoned node (Xid 79) that rebooted and looks healthy; `card` is the faulted GPU,
    `kw` changes any of it."""
    defaults: dict[str, Any] = dict(
        cordoned=True, guarded_xid=79, boot="boot-2", cordon_boot="boot-1"
    )
    if card != UUID:
        defaults["extra"] = {KEYS.gpu: f"{PCI} {card}"}
    return node(name, **{**defaults, **kw})


def xid_cordon(name: str = "b", xid: int = 79) -> list[tuple[str, str, str]]:
    """`brief` of one Xid cordon: the cordon, its Event, its ledger line and its evidence Job."""
    return [
        (kind, name, f"xid-{xid}") for kind in ("cordon", "event", "append-ledger", "create-job")
    ]


def return_job(snap: Snapshot, kind: str = "loadtest", **changes: object) -> str:
    """The name of the `kind` Job the return check creates for `snap`: the Job a later cycle
    finds."""
    actions = plan_return(snap, settings(**changes), TEMPLATES)
    (job,) = [a for a in actions if isinstance(a, CreateJob) and a.job_kind == kind]
    return job.name


def gpu(node_name: str, xid: int, index: int = 4, uuid: str = UUID, pci: str = PCI) -> GpuSample:
    return GpuSample(node_name, str(index), uuid, pci, xid)


def snapshot(
    *nodes: NodeInfo,
    candidates: tuple[GpuSample, ...] = (),
    hardware: tuple[GpuSample, ...] = (),
    remap: tuple[GpuSample, ...] = (),
    held: dict[str, int] | None = None,
    jobs: tuple[JobInfo, ...] = (),
    pods: tuple[GpuPod, ...] = (),
    ledger: dict[str, str] | None = None,
    loss: dict[str, int] | None = None,
    cordoned: tuple[str, ...] = (),
    signals: Signals | None = None,
    own: bool = True,
) -> Snapshot:
    """Facts only; guard.plan.hold decides from them. `candidates`: GPUs with a hardware Xid
    whose node's GPU loss has lasted `HELD_S` (longer than any hold) unless `held` or `loss`
    says how long; `hardware`: more hardware Xids; `held`/`loss`: per node, seconds of GPU loss
    observed up to NOW (`PromView.loss_since`); `cordoned`: nodes kube-state-metrics reports
    unschedulable. `own`: each conformance,
    load-test and evidence Job without a uid is the guard's own (a uid, and its record on its
    node); a Job given with a uid is left as it is (a test of a Job the guard did not make)."""
    if own:
        jobs, nodes = owned(jobs, nodes)
    if ledger is None:  # a guard-cordoned node has its ledger line unless a test says otherwise
        ledger = {
            n.name: f"{CORDON_AT} {n.cordon.reason} {PCI} {UUID} gpu-node-guard\n"
            for n in nodes
            if n.cordon is not None
        }
    lasted = {g.node: HELD_S for g in candidates} | (held or {}) | (loss or {})
    xids = tuple(dict.fromkeys((*hardware, *candidates)))
    since = tuple(sorted((n, NOW - timedelta(seconds=held_s)) for n, held_s in lasted.items()))
    view = PromView(hardware_xids=xids, row_remap=remap, loss_since=since, cordoned=cordoned)
    view = (signals or Signals()).apply(view, nodes)
    return Snapshot(
        NOW, tuple(sorted(nodes, key=lambda n: n.name)), jobs, pods, parse_ledger(ledger), view
    )


PASSED = JobResult("read", passed=True)  # the Pod's own summary: conformance PASS, verdict pass
OUT_OF_CPU = (
    "OutOfcpu",
    "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, "
    "capacity: 2000",
)


def kubelet_rejected(job: str, kind: str, reason: str = "", message: str = "") -> JobResult:
    """What the guard's reader makes of a Pod the node's kubelet refused at admission, in the
    exact shape the kubelet writes (phase Failed, reason, message, no container status)."""
    pod = {
        "kind": "Pod",
        "metadata": {"name": f"{job}-abcde", "labels": {"batch.kubernetes.io/job-name": job}},
        "status": {
            "phase": "Failed",
            "reason": reason or OUT_OF_CPU[0],
            "message": message or OUT_OF_CPU[1],
            "qosClass": "Burstable",
        },
    }
    return job_results.result(kind, pod)


def rejected_job(name: str, kind: str = "loadtest", node_name: str = "b") -> JobInfo:
    """The Job controller's view of it: failed (backoffLimit 0), with that result."""
    return JobInfo(name, kind, node_name, "failed", result=kubelet_rejected(name, kind))


def passed_job(name: str, kind: str = "loadtest", node_name: str = "b") -> JobInfo:
    """A succeeded Job whose Pod's summary says pass (the only pass there is)."""
    return JobInfo(name, kind, node_name, "succeeded", result=PASSED)


DIGEST = "0123456789abcdef"  # the spec digest of the Jobs `owned` makes the guard's


def job_uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def owned(
    jobs: tuple[JobInfo, ...], nodes: tuple[NodeInfo, ...]
) -> tuple[tuple[JobInfo, ...], tuple[NodeInfo, ...]]:
    """The Jobs as the guard made them: a uid and its record on the node (the last Job of each
    kind per node wins, as the guard's one record per kind does); each fence Job's uid also in
    the node's `fence-jobs`, in order."""
    out, records, fences = [], {}, {}
    for j in jobs:
        if not j.uid and j.kind in ("loadtest", "conformance", "evidence", "fence"):
            j = replace(j, uid=job_uid(j.name), digest=DIGEST)
            records[(j.node, j.kind)] = JobRecord(j.kind, j.name, j.uid, DIGEST)
            if j.kind == "fence":
                fences[j.node] = (*fences.get(j.node, ()), j.uid)
        out.append(j)
    mine = []
    for n in nodes:
        found = {r.kind: r for r in n.job_records}
        found.update({kind: r for (node, kind), r in records.items() if node == n.name})
        mine.append(
            replace(
                n,
                job_records=tuple(found[k] for k in sorted(found)),
                fence_jobs=(*n.fence_jobs, *fences.get(n.name, ())),
            )
        )
    return tuple(out), tuple(mine)


@dataclass(frozen=True)
class Signals:
    """The node agent's and the service network's part of the view (guard.plan.mismatch,
    guard.plan.service_network). By default every node has a Ready kube-proxy and CNI pod and
    the agent reports nothing; `service_pods` replaces those pods (`seen` then counts them,
    unless given); `nvml` and `failing` are {node: seconds a mismatch has lasted}
    (`nvml_since`), by name the ones held long enough and the ones not yet: guard.plan.hold
    decides which they are."""

    nvml: dict[str, int] = field(default_factory=dict)
    failing: dict[str, int] = field(default_factory=dict)
    agent: tuple[AgentCheck, ...] = ()
    service_pods: tuple[ServicePod, ...] | None = None
    seen: tuple[tuple[str, int], ...] | None = None

    def apply(self, view: PromView, nodes: Iterable[NodeInfo]) -> PromView:
        pods = self.service_pods
        if pods is None:
            pods = tuple(p for n in nodes for p in network_pods(n.name))
        seen = self.seen
        if seen is None:
            seen = tuple(sorted(Counter(p.selector for p in pods).items()))
        nvml = tuple(sorted({**self.failing, **self.nvml}.items()))
        since = tuple((n, NOW - timedelta(seconds=held)) for n, held in nvml)
        return replace(
            view, nvml_since=since, nvml_status=self.agent, service_pods=pods, service_seen=seen
        )


def network_pods(
    node_name: str, *, kube_proxy: bool = True, cni: bool = True
) -> tuple[ServicePod, ...]:
    """RKE2's kube-proxy static pod and a canal pod on the node, Ready unless told otherwise."""
    return (
        ServicePod("kube-proxy", "kube-system", f"kube-proxy-{node_name}", node_name, kube_proxy),
        ServicePod("cni", "kube-system", f"rke2-canal-{node_name[-5:]}", node_name, cni),
    )


def settings(**changes: object) -> Settings:
    return replace(S, **changes)  # type: ignore[arg-type]


def brief(actions: Iterable[Action]) -> list[tuple[str, str, str]]:
    """(type, node, reason) of each action: the shape of a plan, for whole-plan comparisons."""
    return [(to_json(a)["type"], a.node, a.reason) for a in actions]


def rewritten_event(
    plan: Iterable[Action], cordon_event: EmitEvent, expected: int
) -> EmitEvent | None:
    """The return check's re-write of a lost cordon Event: `expected` (0 or 1) of them, under the
    name, reason and type of the Event the cordon wrote."""
    repairs = [a for a in plan if isinstance(a, EmitEvent) and a.reason == "repair-event"]
    assert len(repairs) == expected
    if not repairs:
        return None
    (again,) = repairs
    assert (again.name, again.event_reason, again.event_type) == (
        cordon_event.name,
        "GuardCordoned",
        "Warning",
    )
    return again


# What `kubectl get nodes,jobs,configmaps,events,pods -A` holds beyond a test's own objects: each
# namespace's CA ConfigMap and other namespaces' Pods (a snapshot without them is warned about).
ALL_NAMESPACES: list[dict[str, Any]] = [
    *(
        {"kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": ns}}
        for ns in ("gpu-node-guard", "gpu-node-guard-jobs")
    ),
    {"kind": "Pod", "metadata": {"name": "coredns-0", "namespace": "kube-system"}},
]
