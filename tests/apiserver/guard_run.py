"""Running the guard against the apiserver tier: a scenario Prometheus, GPU nodes made by hand,
`gpu-node-guard run` as a process (or one cycle in this process, through a test's own client), and
reading back what it wrote (Jobs, ledger, Events)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from guard.actions import Action
from guard.apply import KubeExecutor
from guard.apply.outcome import Outcome
from guard.doors.kube import Kube
from guard.doors.lease import slot_key
from guard.doors.prom import PromClient
from guard.example.promserver import LocalPrometheus
from guard.jobs import job_name, node_label
from guard.log import Log
from guard.model import Snapshot
from guard.names import CYCLE_LEASE, Annotations
from guard.plan import plan_cycle
from guard.read import build_snapshot, read_cluster, read_prom
from guard.settings import Settings
from guard.wire import Finding, Summary, render_summary
from tests.apiserver.kube import (
    JOB_CONTROLLER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    controller_pod,
    create,
)
from tests.builders import TEMPLATES
from tests.engines import scenario_server
from tests.scenario_build import KSM_POD, NodeTimeline, PodTimeline, Scenario, Steps
from tests.tiers import require_engine

T0 = datetime(2026, 9, 21, 5, 0, tzinfo=UTC)
ONSET_S = 30 * 60
ISOLATE_AT = T0 + timedelta(seconds=ONSET_S + 180)  # Xid 79 and 1 GPU lost for 3 minutes
RETURN_AT = T0 + timedelta(seconds=ONSET_S + 40 * 60)  # after the power cycle: Xid gone, 8/8
# The return's load-test step alone, without the new boot's conformance Job before it.
NO_CF = "--no-return-conformance"
CYCLE = timedelta(minutes=5)
KEYS = Annotations("gpu-node-guard.io/")
# What the guard's programs leave as their Pod's termination message.
NO_IPVS = render_summary(
    Summary(
        False,
        failed=(Finding("ipvs-loaded", "ip_vs is not loaded: kube-proxy in IPVS mode exits"),),
    )
)
PASS = render_summary(Summary(True))
LOADTEST_PASS = json.dumps({"kind": "loadtest", "verdict": "pass", "reasons": [], "notes": []})
EVIDENCE = json.dumps(
    {
        "schema": "gpu-node-guard/evidence-summary/v1",
        "pci": "0000:58:00.0",
        "verdict": "power-cycle",
        "links": [
            {"pci": "0000:18:00.0", "link": "16GT/s,x16"},
            {"pci": "0000:2a:00.0", "link": "32GT/s,x16"},
        ],
    }
)
LOADTEST_FAIL = json.dumps(
    {
        "kind": "loadtest",
        "verdict": "fail",
        "notes": [],
        "reasons": ["slow gpu=3 ratio=0.61 min_ratio=0.8"],
    }
)
NS = "gpu-node-guard"
LEDGER = "gpu-fault-ledger"


def faulted(name: str, unschedulable: Steps = ()) -> NodeTimeline:
    """Xid 79 on GPU 4 and 7/8 GPUs from ONSET_S; power-cycled (8/8, no Xid) 20 minutes later.

    `unschedulable`: kube-state-metrics' view of the cordon (its GPU pods are read only there).
    """
    recovered = ONSET_S + 20 * 60
    return NodeTimeline(
        name,
        gpus=8,
        xids=((ONSET_S, 4, 79), (recovered, 4, 0)),
        allocatable=((ONSET_S, 7), (recovered, 8)),
        unschedulable=unschedulable,
    )


def healthy(name: str) -> NodeTimeline:
    return NodeTimeline(name, gpus=8)


@contextmanager
def scenario_prometheus(
    *nodes: NodeTimeline, pods: tuple[PodTimeline, ...] = ()
) -> Iterator[LocalPrometheus]:
    """Prometheus 2 over `nodes` and `pods` (kube-state-metrics' own pod always among them)."""
    require_engine("prometheus2")
    scenario = Scenario(start=T0, duration_s=90 * 60, nodes=nodes, pods=(KSM_POD, *pods))
    with scenario_server(scenario) as server:
        yield server


def set_status(core: client.CoreV1Api, name: str, *, boot: str, allocatable: int) -> None:
    status = node_status(boot=boot, allocatable=allocatable)
    core.patch_node_status(name, {"status": status}, _content_type=MERGE_PATCH)


def node_status(*, boot: str, allocatable: int) -> dict[str, Any]:
    """A Ready GPU node's status: 8 GPUs of capacity, `allocatable` of them, boot `boot`."""
    return {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "ok",
                "lastHeartbeatTime": "2026-09-21T05:00:00Z",
                "lastTransitionTime": "2026-09-21T05:00:00Z",
            }
        ],
        "nodeInfo": {
            "bootID": boot,
            "machineID": "m",
            "systemUUID": "s",
            "kernelVersion": "6.8",
            "osImage": "Ubuntu",
            "containerRuntimeVersion": "containerd://2",
            "kubeletVersion": "v1.34.4",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
        "allocatable": {
            "nvidia.com/gpu": str(allocatable),
            "cpu": "64",
            "memory": "512Gi",
            "pods": "110",
        },
    }


def make_gpu_node(
    core: client.CoreV1Api,
    name: str,
    *,
    boot: str = "boot-1",
    allocatable: int = 7,
    annotations: dict[str, str] | None = None,
) -> str:
    body = {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"unschedulable": bool(annotations)},
    }
    core.create_node(body)
    set_status(core, name, boot=boot, allocatable=allocatable)
    return name


def guard_cordoned(at: datetime, xid: int = 79, boot: str = "boot-1") -> dict[str, str]:
    """The annotations of a cordon the guard made at `at` (GPU 4 of a `faulted` node)."""
    return {
        KEYS.reason: f"xid-{xid}",
        KEYS.at: at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        KEYS.boot_id: boot,
        KEYS.gpu_capacity: "8",
        KEYS.gpu: "0000:58:00.0 GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
    }


@dataclass(frozen=True, slots=True)
class GuardRun:
    rc: int
    plan: dict[str, Any]
    log: list[dict[str, Any]]  # the JSON log lines

    def lines(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.log if line.get("event") == event]


def run_guard(
    prom: LocalPrometheus,
    kubeconfig: Path,
    at: datetime,
    *extra: str,
    ok: bool = True,
    env: dict[str, str] | None = None,
    keep_slot: bool = False,
) -> GuardRun:
    """`gpu-node-guard run --output json --log-format json` as the CronJob runs it; `env`: the
    CronJob's own values (GUARD_IMAGE, GUARD_CYCLE_DEADLINE_S…) its manifest would give.

    A replay that writes takes the slot guard (one isolation per cron slot of its instant), and
    tests replay one instant again to show a plan settled: each replay here is its own slot (the
    Lease's slot record forgotten before it) unless `keep_slot`."""
    if not keep_slot:
        forget_slot(kubeconfig)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            str(kubeconfig),
            "--at",
            at.isoformat(),
            "--output",
            "json",
            "--log-format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    log = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    plan = dict(json.loads(proc.stdout)) if proc.stdout.strip() else {}
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert plan["counts"]["failed"] == 0, proc.stderr
    return GuardRun(proc.returncode, plan, log)


def forget_slot(kubeconfig: Path) -> None:
    """The cycle Lease without its slot record (guard/doors/lease.py), holder and times kept;
    nothing when there is no Lease, or no API server or credentials to ask (a test's point)."""
    key = slot_key(KEYS.prefix)
    try:
        leases = client.CoordinationV1Api(config.new_client_from_config(str(kubeconfig)))
        lease = leases.read_namespaced_lease(CYCLE_LEASE, NS)
        if key in (lease.metadata.annotations or {}):
            del lease.metadata.annotations[key]
            leases.replace_namespaced_lease(CYCLE_LEASE, NS, lease)
    except (ApiException, urllib3.exceptions.HTTPError, config.ConfigException, OSError) as exc:
        if isinstance(exc, ApiException) and exc.status not in (401, 403, 404):
            raise


def mine(plan: dict[str, Any], node: str) -> list[tuple[str, str]]:
    return [(a["type"], a["reason"]) for a in plan["actions"] if a["node"] == node]


def outcomes(plan: dict[str, Any], node: str) -> list[tuple[str, str]]:
    return [(a["type"], a["outcome"]["status"]) for a in plan["actions"] if a["node"] == node]


def guard_jobs(admin: client.ApiClient, node: str) -> list[Any]:
    jobs = client.BatchV1Api(admin).list_namespaced_job(JOBS_NS).items
    return [j for j in jobs if j.metadata.annotations.get(KEYS.node_label) == node]


def ledger_text(core: client.CoreV1Api, node: str) -> str:
    cm = core.read_namespaced_config_map(LEDGER, NS)
    return str((cm.data or {}).get(node, ""))


def node_events(admin: client.ApiClient, node: str) -> list[dict[str, Any]]:
    """The guard's events.k8s.io Events about `node`, as plain dicts."""
    answer = client.EventsV1Api(admin).list_namespaced_event(
        "default", label_selector="app.kubernetes.io/name=gpu-node-guard", _preload_content=False
    )
    items = json.loads(answer.data)["items"]
    return [e for e in items if e["regarding"]["name"] == node]


def forget_guard_state(core: client.CoreV1Api, admin: client.ApiClient) -> None:
    """Remove the guard's Jobs, the ledger, its archives, the guard's Events and the cycle's
    Lease (it records the slot of the last cordon), so the next test starts clean. Jobs go with
    propagation Background: the default (orphan) leaves them behind a finalizer that only the
    absent garbage collector would clear."""
    client.BatchV1Api(admin).delete_collection_namespaced_job(
        JOBS_NS,
        label_selector="app.kubernetes.io/name=gpu-node-guard",
        propagation_policy="Background",
    )
    for cm in core.list_namespaced_config_map(NS).items:
        if cm.metadata.name.startswith(LEDGER):
            core.delete_namespaced_config_map(cm.metadata.name, NS)
    try:
        client.CoordinationV1Api(admin).delete_namespaced_lease(CYCLE_LEASE, NS)
    except ApiException as exc:
        if exc.status != 404:
            raise
    events = client.EventsV1Api(admin)
    try:
        events.delete_collection_namespaced_event(
            "default", label_selector="app.kubernetes.io/name=gpu-node-guard"
        )
    except ApiException as exc:  # nothing to delete is fine
        if exc.status != 404:
            raise


def guard_kube(kubeconfig: Path) -> Kube:
    """The guard's own client, from the guard's kubeconfig."""
    return Kube.connect(str(kubeconfig), in_cluster=False)


def read_and_plan(
    kube: Kube, prom: LocalPrometheus, at: datetime, s: Settings
) -> tuple[Snapshot, tuple[Action, ...]]:
    """One cycle's read (the cluster through `kube`, then `prom`) and its plan, in this process."""
    snap = build_snapshot(at, read_cluster(kube, s), read_prom(PromClient(prom.url), s, at), s)
    return snap, plan_cycle(snap, s, TEMPLATES)


def cycle_in_process(kube: Kube, prom: LocalPrometheus, at: datetime) -> list[Outcome]:
    """One whole cycle in this process, written through `kube`; the outcome of every action."""
    s = Settings(prometheus_url=prom.url)
    snap, plan = read_and_plan(kube, prom, at, s)
    executor = KubeExecutor(kube, Log("text"), s, snap, "test")
    for action in plan:
        executor.apply(action)
    return executor.outcomes


ENDED_AT = "2026-09-21T06:00:00Z"


def end_pod(admin: client.ApiClient, pod: dict[str, Any], message: str, ok: bool) -> None:
    """Play the kubelet: the Pod's one container ended (exit 0 when `ok`) with `message` as its
    termination message, the Pod Succeeded or Failed."""
    container = pod["spec"]["containers"][0]
    ended = {
        "exitCode": 0 if ok else 1,
        "reason": "Completed" if ok else "Error",
        "message": message,
        "startedAt": ENDED_AT,
        "finishedAt": ENDED_AT,
    }
    status = {
        "phase": "Succeeded" if ok else "Failed",
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": ended},
            }
        ],
    }
    client.CoreV1Api(admin).patch_namespaced_pod_status(
        pod["metadata"]["name"], JOBS_NS, {"status": status}, _content_type=MERGE_PATCH
    )


def finish(
    deployed: ControlPlane,
    admin: client.ApiClient,
    job: dict[str, Any],
    message: str,
    ok: bool,
    mark_job: bool = True,
    ended_at: str = ENDED_AT,
) -> None:
    """Play the Job controller and the kubelet: the Pod, its ended container, the Job's end at
    `ended_at` (`mark_job=False`: the Job already ended; only its Pod is made)."""
    pod = controller_pod(job)
    del pod["metadata"]["finalizers"]  # no controller here would remove it
    with deployed.impersonating(JOB_CONTROLLER) as controller:
        made = create(controller, pod)
    end_pod(
        admin, {**pod, "metadata": {**pod["metadata"], "name": made.metadata.name}}, message, ok
    )
    if mark_job:
        _end_job(admin, job, ok, ended_at)


def reject(
    deployed: ControlPlane, admin: client.ApiClient, job: dict[str, Any], reason: str, message: str
) -> None:
    """Play the Job controller and a kubelet that refuses the Pod at admission (pkg/kubelet
    rejectPod): the Pod Failed with `reason` and `message` and no container status, written
    through the status subresource; the Job failed (backoffLimit 0)."""
    pod = controller_pod(job)
    del pod["metadata"]["finalizers"]  # no controller here would remove it
    with deployed.impersonating(JOB_CONTROLLER) as controller:
        made = create(controller, pod)
    status = {"phase": "Failed", "reason": reason, "message": message}
    client.CoreV1Api(admin).patch_namespaced_pod_status(
        made.metadata.name, JOBS_NS, {"status": status}, _content_type=MERGE_PATCH
    )
    _end_job(admin, job, ok=False)


def _end_job(admin: client.ApiClient, job: dict[str, Any], ok: bool, at: str = ENDED_AT) -> None:
    done = ("SuccessCriteriaMet", "Complete") if ok else ("FailureTarget", "Failed")
    job_status = {
        "startTime": at,
        **({"completionTime": at, "succeeded": 1} if ok else {"failed": 1}),
        "conditions": [
            {
                "type": c,
                "status": "True",
                "lastTransitionTime": at,
                **({} if ok else {"reason": "BackoffLimitExceeded"}),
            }
            for c in done
        ],
    }
    client.BatchV1Api(admin).patch_namespaced_job_status(
        job["metadata"]["name"], JOBS_NS, {"status": job_status}, _content_type=MERGE_PATCH
    )


# What the API server adds to a Job's template and selector at creation (generateSelector): a
# Job sent again with them is refused, so a copy leaves them out.
_CONTROLLER_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)


def copy_of(job: dict[str, Any]) -> dict[str, Any]:
    """A stored Job as a person sends it again: same name, labels, annotations and spec, without
    what the API server added (uid, selector, the controller's labels)."""
    spec = json.loads(json.dumps({k: v for k, v in job["spec"].items() if k != "selector"}))
    labels = spec["template"]["metadata"].get("labels") or {}
    spec["template"]["metadata"]["labels"] = {
        k: v for k, v in labels.items() if k not in _CONTROLLER_LABELS
    }
    meta = {k: job["metadata"][k] for k in ("name", "namespace", "labels", "annotations")}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def retargeted(job: dict[str, Any], node: str) -> dict[str, Any]:
    """`copy_of(job)` for another node: the name made for that node, its node label, annotation
    and `nodeName`; what its containers run unchanged (an in-shape Job the policies admit)."""
    copy = copy_of(job)
    meta, template = copy["metadata"], copy["spec"]["template"]
    kind = meta["labels"]["app.kubernetes.io/component"]
    meta["name"] = job_name(kind, node, job["metadata"]["name"])
    for labels in (meta["labels"], template["metadata"]["labels"]):
        labels[KEYS.node_label] = node_label(node)
    meta["annotations"] = {**meta["annotations"], KEYS.node_label: node}
    template["spec"]["nodeName"] = node
    return copy


def as_site_settings(flags: tuple[str, ...]) -> dict[str, str]:
    """A run's decision flags as the CronJob's ConfigMap says them (`status` takes no decision
    flag: it decides with the ConfigMap's): `--x v` → GUARD_X=v, `--no-x` → GUARD_X=false,
    `--x` alone → GUARD_X=true."""
    out: dict[str, str] = {}
    rest = list(flags)
    while rest:
        flag = rest.pop(0).removeprefix("--")
        if flag.startswith("no-"):
            key, value = flag.removeprefix("no-"), "false"
        elif rest and not rest[0].startswith("--"):
            key, value = flag, rest.pop(0)
        else:
            key, value = flag, "true"
        out["GUARD_" + key.replace("-", "_").upper()] = value
    return out


@contextmanager
def site_settings(core: client.CoreV1Api, data: dict[str, str]) -> Iterator[None]:
    """The settings ConfigMap holds `data` (made if absent) for the block; then as before."""
    from guard.names import SETTINGS_CONFIGMAP

    try:
        before: dict[str, str] | None = dict(
            core.read_namespaced_config_map(SETTINGS_CONFIGMAP, NS).data or {}
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
        before = None
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=SETTINGS_CONFIGMAP), data={})
        core.create_namespaced_config_map(NS, body)
    core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, NS, {"data": data})
    try:
        yield
    finally:
        if before is None:
            core.delete_namespaced_config_map(SETTINGS_CONFIGMAP, NS)
        else:  # None removes a key the block added (a merge patch)
            undo: dict[str, str | None] = {k: before.get(k) for k in data}
            core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, NS, {"data": undo})


def guard_token(cluster: ControlPlane) -> Path:
    """A kubeconfig with a token of the guard's own ServiceAccount, as the CronJob runs."""
    return cluster.service_account_kubeconfig("gpu-node-guard", "gpu-node-guard")


@contextmanager
def one_gpu_node(cluster: ControlPlane, name: str, allocatable: int) -> Iterator[client.ApiClient]:
    """An admin client, with the Ready GPU node `name` (boot-1, `allocatable` of 8 GPUs) for the
    block; then the node and every trace of the guard gone."""
    with cluster.admin_client() as api:
        core = client.CoreV1Api(api)
        core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}})
        set_status(core, name, boot="boot-1", allocatable=allocatable)
        yield api
        core.delete_node(name)
        forget_guard_state(core, api)
