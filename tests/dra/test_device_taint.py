"""The guard's device taint on a real v1.37 control plane: the real scheduler keeps the faulted
GPU out of every allocation and gives the node's other seven GPUs to claims; the return deletes
the guard's rule only after that device's load test passed; a person's DeviceTaintRule is never
touched; the breaker and one isolation per cycle count device taints and cordons alike.

Prometheus is not the subject here: each cycle reads the cluster from the real API server and
takes a `PromView` (what guard.read.prom_view would build from dcgm-exporter) as its Prometheus
half; the last test reads that half from a real Prometheus of a DRA-only cluster.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from guard.actions import (
    Action,
    Cordon,
    CreateClaim,
    CreateJob,
    EmitEvent,
    Skip,
    TaintDevice,
    UntaintDevice,
)
from guard.apply import KubeExecutor
from guard.apply.outcome import Outcome
from guard.doors.kube import Kube
from guard.doors.prom import PromClient, PromError
from guard.log import Log
from guard.model import GpuHolder, GpuSample, PromView
from guard.names import FIELD_MANAGER, Annotations
from guard.pci import normalize_pci
from guard.plan import plan_cycle
from guard.read import build_snapshot, read_cluster, read_prom
from guard.settings import Settings
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    ONSET_S,
    end_pod,
    node_events,
    scenario_prometheus,
)
from tests.apiserver.kube import (
    GUARD_NS,
    GUARD_USER,
    JOB_CONTROLLER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    controller_pod,
    create,
    refusal,
)
from tests.builders import TEMPLATES
from tests.scenario_build import NodeTimeline

KEYS = Annotations("gpu-node-guard.io/")
GPUS = 8
FAULTED = 3
T0 = datetime(2026, 9, 21, 5, 0, tzinfo=UTC)
_WAIT_S = 60.0

pytestmark = pytest.mark.dra


def gpu_uuid(node: str, index: int) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}-{index}")
    return "GPU-" + str(digest)


def pci(index: int) -> str:
    return f"0000:{0x18 + index:02x}:00.0"


@pytest.fixture(scope="module")
def admin(dra_plane: ControlPlane) -> Iterator[client.ApiClient]:
    with dra_plane.admin_client() as api:
        yield api


def dra_node(
    api: client.ApiClient,
    name: str,
    boot: str = "boot-1",
    uuid_of: Callable[[str, int], str] | None = None,
    pci_of: Callable[[int], str] = pci,
    faulted_as: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None,
) -> None:
    """A Node as the kubelet registers it (no nvidia.com/gpu: the DRA driver publishes the
    GPUs), and its ResourceSlice as NVIDIA's DRA driver publishes it: gpu-0 … gpu-7 (`uuid_of`
    and `pci_of`: the GPUs' UUID and PCI address, `gpu_uuid` and `pci` unless given;
    `faulted_as`: the devices published for GPU `FAULTED` instead of its own)."""
    uuid_of = uuid_of or gpu_uuid
    core = client.CoreV1Api(api)
    core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            }
        }
    )
    set_boot(api, name, boot)
    # TaintNodesByCondition admission taints a new Node not-ready until the node lifecycle
    # controller sees it Ready; none runs here, so the Ready node is untainted as it would be.
    core.patch_node(name, {"spec": {"taints": None}})
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": uuid_of(name, i)},
                "pcieBusID": {"string": pci_of(i)},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "architecture": {"string": "Hopper"},
                "brand": {"string": "Nvidia"},
                "driverVersion": {"version": "580.95.5"},
                "cudaComputeCapability": {"version": "9.0.0"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(GPUS)
    ]
    if faulted_as is not None:
        devices[FAULTED : FAULTED + 1] = faulted_as(devices[FAULTED])
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    create(api, body)


def set_boot(api: client.ApiClient, name: str, boot: str) -> None:
    status = {
        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
        ],
        "nodeInfo": {
            "bootID": boot,
            "machineID": "m",
            "systemUUID": "s",
            "kernelVersion": "6.8",
            "osImage": "Ubuntu",
            "containerRuntimeVersion": "containerd://2.1",
            "kubeletVersion": "v1.37.2",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }
    client.CoreV1Api(api).patch_node_status(name, {"status": status})


def xid(node: str, index: int = FAULTED, code: int = 79) -> PromView:
    """dcgm-exporter's Xid on one GPU, and GPU loss held for an hour (the hold passed)."""
    g = GpuSample(node, str(index), gpu_uuid(node, index), pci(index), code)
    return PromView(hardware_xids=(g,), loss_since=((node, T0 - timedelta(hours=1)),))


def cycle(
    plane: ControlPlane, prom: PromView, at: datetime = T0, s: Settings | None = None
) -> tuple[Action, ...]:
    """One whole cycle: read the cluster, plan, and write through the executor."""
    plan, outcomes = cycle_outcomes(plane, prom, at, s)
    failed = [o for o in outcomes if o.status == "failed"]
    assert not failed, failed
    return plan


def cycle_outcomes(
    plane: ControlPlane, prom: PromView, at: datetime = T0, s: Settings | None = None
) -> tuple[tuple[Action, ...], list[Outcome]]:
    s = s or Settings(prometheus_url="http://prometheus.invalid")
    # The guard as deployed: its ServiceAccount's token, RBAC and the DRA policies applied.
    kubeconfig = plane.service_account_kubeconfig(GUARD_NS, "gpu-node-guard")
    kube = Kube.connect(str(kubeconfig), in_cluster=False)
    snap = build_snapshot(at, read_cluster(kube, s), prom, s)
    plan = plan_cycle(snap, s, TEMPLATES)
    executor = KubeExecutor(kube, Log("text"), s, snap, "test")
    for action in plan:
        executor.apply(action)
    return plan, executor.outcomes


def device_pass(gpu: str) -> str:
    """The load test's termination message: a pass on the GPU (by UUID) it ran on."""
    return json.dumps(
        {"kind": "loadtest", "verdict": "pass", "reasons": [], "notes": [], "gpus": [gpu]}
    )


def rules(api: client.ApiClient) -> dict[str, dict[str, Any]]:
    found = client.CustomObjectsApi(api).list_cluster_custom_object(
        "resource.k8s.io", "v1", "devicetaintrules"
    )
    return {r["metadata"]["name"]: r for r in found["items"]}


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    """Poll until `check` returns something truthy (the scheduler works asynchronously)."""
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def claim_pod(api: client.ApiClient, node: str, name: str, count: int) -> None:
    """A workload: a ResourceClaim for `count` GPUs of the node and a Pod using it."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "work"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": count,
                        },
                    }
                ]
            }
        },
    }
    create(api, claim)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "work"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
            "containers": [
                {
                    "name": "train",
                    "image": "example.invalid/train:1",
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
        },
    }
    create(api, pod)


def allocated(api: client.ApiClient, namespace: str, name: str) -> list[str] | None:
    claim = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims", name
    )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    return sorted(r["device"] for r in allocation["devices"]["results"])


def unschedulable(api: client.ApiClient, name: str) -> str:
    """The scheduler's message when it found no place for the Pod ("" until then)."""
    pod = client.CoreV1Api(api).read_namespaced_pod(name, "work")
    return next(
        (
            c.message
            for c in pod.status.conditions or []
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        ),
        "",
    )


def isolate(plane: ControlPlane, api: client.ApiClient, node: str) -> dict[str, Any]:
    plan = cycle(plane, xid(node))
    assert [a for a in plan if isinstance(a, TaintDevice)], plan
    assert not [a for a in plan if isinstance(a, Cordon)]
    mine = [
        r
        for r in rules(api).values()
        if r["spec"]["deviceSelector"].get("pool") == node
        and (r["metadata"].get("labels") or {}).get("app.kubernetes.io/name")
    ]
    assert len(mine) == 1
    return mine[0]


def test_the_faulted_gpu_is_excluded_and_the_other_seven_are_allocated(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    node = "dra-a"
    dra_node(admin, node)
    rule = isolate(dra_plane, admin, node)
    assert rule["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{FAULTED}"},
        "taint": {
            "key": KEYS.fault_taint,
            "value": "xid-79",
            "effect": "NoSchedule",
            "timeAdded": rule["spec"]["taint"]["timeAdded"],
        },
    }
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-node-guard"
    read = client.CoreV1Api(admin).read_node(node)
    assert not read.spec.unschedulable  # the node stays in service
    record = read.metadata.annotations[KEYS.device_taint]
    assert gpu_uuid(node, FAULTED) in record and f"gpu.nvidia.com/{node}/gpu-3" in record

    claim_pod(admin, node, "all-eight", GPUS)
    why = wait_for("the 8-GPU pod to be unschedulable", lambda: unschedulable(admin, "all-eight"))
    assert "cannot allocate all claims" in why and "taint" not in why, why
    assert allocated(admin, "work", "all-eight") is None
    claim_pod(admin, node, "seven", GPUS - 1)
    got = wait_for("the 7-GPU claim's allocation", lambda: allocated(admin, "work", "seven"))
    assert got == sorted(f"gpu-{i}" for i in range(GPUS) if i != FAULTED)


def test_the_return_deletes_the_rule_only_after_the_devices_load_test_passed(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    node = "dra-b"
    dra_node(admin, node)
    rule = isolate(dra_plane, admin, node)
    later = T0 + timedelta(minutes=10)
    # Same boot, no reset-done: the device waits; the rule stays.
    plan = cycle(dra_plane, PromView(), later)
    assert [a.reason for a in plan if isinstance(a, Skip) and a.node == node] == [
        "device-waiting-reset"
    ]
    set_boot(admin, node, "boot-2")  # the node was power-cycled
    plan = cycle(dra_plane, PromView(), later)
    job_names = [a.name for a in plan if a.node == node and type(a).__name__ == "CreateJob"]
    assert len(job_names) == 1 and rule["metadata"]["name"] in rules(admin)
    job = client.BatchV1Api(admin).read_namespaced_job(job_names[0], JOBS_NS).to_dict()
    stored = admin.sanitize_for_serialization(
        client.BatchV1Api(admin).read_namespaced_job(job_names[0], JOBS_NS)
    )
    pod = controller_pod(stored)
    del pod["metadata"]["finalizers"]
    with dra_plane.impersonating(JOB_CONTROLLER) as controller:
        made = create(controller, pod)
    # The load test's claim tolerates the guard's taint: the scheduler gives it exactly that GPU.
    got = wait_for("the load test's claim", lambda: allocated(admin, JOBS_NS, job_names[0]))
    assert got == [f"gpu-{FAULTED}"]
    plan = cycle(dra_plane, PromView(), later)
    assert "loadtest-running" in [a.reason for a in plan if a.node == node]
    assert rule["metadata"]["name"] in rules(admin)  # not before the load test passed

    passed(admin, job["metadata"]["name"], pod, made.metadata.name, gpu_uuid(node, FAULTED))
    plan = cycle(dra_plane, PromView(), later)
    assert [a for a in plan if isinstance(a, UntaintDevice)], plan
    assert rule["metadata"]["name"] not in rules(admin)
    notes = client.CoreV1Api(admin).read_node(node).metadata.annotations or {}
    assert KEYS.device_taint not in notes and KEYS.returned in notes


def passed(api: client.ApiClient, job: str, pod: dict[str, Any], made: str, gpu: str) -> None:
    """Play the kubelet and the Job controller: the Job's Pod `made` passed on `gpu`."""
    end_pod(api, {**pod, "metadata": {**pod["metadata"], "name": made}}, device_pass(gpu), True)
    at = "2026-09-21T06:00:00Z"
    status = {
        "startTime": at,
        "completionTime": at,
        "succeeded": 1,
        "conditions": [
            {"type": c, "status": "True", "lastTransitionTime": at}
            for c in ("SuccessCriteriaMet", "Complete")
        ],
    }
    client.BatchV1Api(api).patch_namespaced_job_status(
        job, JOBS_NS, {"status": status}, _content_type=MERGE_PATCH
    )


CLAIMS = ("resource.k8s.io", "v1", JOBS_NS, "resourceclaims")
JOBS_NS_ADMIN = "bob-jobs-ns-admin"  # as tests/apiserver names him
HEALTHY = 5


def on_gpu(claim: dict[str, Any], node: str, index: int) -> dict[str, Any]:
    """The guard's claim as stored, made anew to select another GPU of the node (the swap)."""
    out = copy.deepcopy(claim)
    meta = claim["metadata"]
    out["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels", "annotations")}
    out.pop("status", None)
    selector = out["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    selector["expression"] = selector["expression"].replace(
        gpu_uuid(node, FAULTED), gpu_uuid(node, index)
    )
    assert gpu_uuid(node, index) in selector["expression"]
    return out


RBAC = "rbac.authorization.k8s.io"


def jobs_ns_admin(api: client.ApiClient) -> None:
    """bob administers the jobs namespace: RBAC lets him do anything to its claims (only the
    policy stands between him and the guard's)."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        JOBS_NS,
        {
            "metadata": {"name": "claims-admin"},
            "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["*"], "verbs": ["*"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        JOBS_NS,
        {
            "metadata": {"name": "claims-admin"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "claims-admin"},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": JOBS_NS_ADMIN}],
        },
    )


def test_a_swapped_claim_is_refused_and_one_made_anyway_never_lifts_the_taint(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """Issue #38, 2: the jobs namespace's admin deletes the guard's claim and makes one of the
    same name on a healthy GPU. The policy refuses both; the same swap made with the guard's own
    token (as if the policy were absent) runs the load test on the healthy GPU, and its pass
    keeps the faulted GPU tainted: one WARN line and one Warning Event."""
    node = "dra-swap"
    dra_node(admin, node)
    rule = isolate(dra_plane, admin, node)
    later = T0 + timedelta(minutes=10)
    set_boot(admin, node, "boot-2")
    plan = cycle(dra_plane, PromView(), later)
    (name,) = [a.name for a in plan if a.node == node and isinstance(a, CreateJob)]
    theirs = client.CustomObjectsApi(admin).get_namespaced_custom_object(*CLAIMS, name)
    record = client.CoreV1Api(admin).read_node(node).metadata.annotations[KEYS.loadtest_claim]
    assert record == f"{name} {theirs['metadata']['uid']}"
    swapped = on_gpu(theirs, node, HEALTHY)

    jobs_ns_admin(admin)
    with dra_plane.impersonating(JOBS_NS_ADMIN) as bob:
        bobs = client.CustomObjectsApi(bob)
        status, message = refusal(lambda: bobs.delete_namespaced_custom_object(*CLAIMS, name))
        assert status == 422 and "'gpu-node-guard-device-claims-others'" in message, message
        other = {**swapped, "metadata": {**swapped["metadata"], "name": "bobs-claim"}}
        status, message = refusal(lambda: create(bob, other))
        assert status == 422 and "only gpu-node-guard's ServiceAccount creates" in message
        relabel = {"metadata": {"labels": {"app.kubernetes.io/name": "bob"}}}
        status, message = refusal(
            lambda: bobs.patch_namespaced_custom_object(*CLAIMS, name, relabel)
        )
        assert status == 422, message
    assert client.CustomObjectsApi(admin).get_namespaced_custom_object(*CLAIMS, name)

    with dra_plane.impersonating(GUARD_USER) as guard:
        client.CustomObjectsApi(guard).delete_namespaced_custom_object(*CLAIMS, name)
        wait_for("the claim's delete", lambda: not _claim_exists(admin, name))
        create(guard, swapped)
    stored = admin.sanitize_for_serialization(
        client.BatchV1Api(admin).read_namespaced_job(name, JOBS_NS)
    )
    pod = controller_pod(stored)
    del pod["metadata"]["finalizers"]
    with dra_plane.impersonating(JOB_CONTROLLER) as controller:
        made = create(controller, pod)
    got = wait_for("the swapped claim's allocation", lambda: allocated(admin, JOBS_NS, name))
    assert got == [f"gpu-{HEALTHY}"]  # the load test runs on the healthy GPU
    # Even a summary that names the tainted GPU is no pass on a claim the guard did not make.
    passed(admin, name, pod, made.metadata.name, gpu_uuid(node, FAULTED))
    for _ in range(2):
        plan = cycle(dra_plane, PromView(), later)
        assert not [a for a in plan if isinstance(a, UntaintDevice)], plan
        (skip,) = [a for a in plan if isinstance(a, Skip) and a.node == node]
        assert (skip.reason, skip.level) == ("loadtest-foreign", "WARN")
        assert "it was replaced" in skip.detail, skip.detail
        (event,) = [a for a in plan if isinstance(a, EmitEvent) and a.node == node]
        assert (event.event_type, event.event_reason) == ("Warning", "GuardForeignJob")
    assert rule["metadata"]["name"] in rules(admin)
    notes = client.CoreV1Api(admin).read_node(node).metadata.annotations or {}
    assert KEYS.device_taint in notes and KEYS.returned not in notes


def _claim_exists(api: client.ApiClient, name: str) -> bool:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(*CLAIMS)
    return any(c["metadata"]["name"] == name for c in found["items"])


def test_a_claim_of_the_guards_name_it_did_not_make_is_no_already_done(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """A claim with the load test's name that was there before the guard's create (made with the
    guard's token, or while the policy was absent): the create's 409 is refused, not taken as
    done, and the load-test Job is not created on it; the guard deletes that claim (by uid) and
    the next cycle creates and records its own."""
    node = "dra-early"
    dra_node(admin, node)
    rule = isolate(dra_plane, admin, node)
    later = T0 + timedelta(minutes=10)
    set_boot(admin, node, "boot-2")
    s = Settings(prometheus_url="http://prometheus.invalid")
    kubeconfig = dra_plane.service_account_kubeconfig(GUARD_NS, "gpu-node-guard")
    kube = Kube.connect(str(kubeconfig), in_cluster=False)
    planned = plan_cycle(build_snapshot(later, read_cluster(kube, s), PromView(), s), s, TEMPLATES)
    (claim,) = [a for a in planned if isinstance(a, CreateClaim) and a.node == node]
    with dra_plane.impersonating(GUARD_USER) as guard:
        create(guard, on_gpu(claim.manifest, node, HEALTHY))
    _, outcomes = cycle_outcomes(dra_plane, PromView(), later)
    mine = {o.type_word: o for o in outcomes if o.action.node == node}
    assert (mine["create-claim"].status, mine["create-claim"].reason) == ("failed", "refused")
    assert "not the claim the guard recorded" in mine["create-claim"].detail
    assert (mine["create-job"].status, mine["create-job"].reason) == (
        "skipped",
        "earlier-write-failed",
    )
    assert not [
        j
        for j in client.BatchV1Api(admin).list_namespaced_job(JOBS_NS).items
        if j.metadata.name == claim.name
    ]
    notes = client.CoreV1Api(admin).read_node(node).metadata.annotations or {}
    assert KEYS.loadtest_claim not in notes
    assert rule["metadata"]["name"] in rules(admin)
    wait_for("the foreign claim's delete", lambda: not _claim_exists(admin, claim.name))
    plan = cycle(dra_plane, PromView(), later)
    assert [type(a).__name__ for a in plan if a.node == node] == ["CreateClaim", "CreateJob"]
    ours = client.CustomObjectsApi(admin).get_namespaced_custom_object(*CLAIMS, claim.name)
    notes = client.CoreV1Api(admin).read_node(node).metadata.annotations or {}
    assert notes[KEYS.loadtest_claim] == f"{claim.name} {ours['metadata']['uid']}"
    expression = ours["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    assert gpu_uuid(node, FAULTED) in expression["expression"]


def test_a_persons_device_taint_rule_is_never_touched(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    node = "dra-c"
    dra_node(admin, node)
    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance-dra-c"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node, "device": "gpu-5"},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    create(admin, theirs)
    before = rules(admin)["maintenance-dra-c"]
    isolate(dra_plane, admin, node)
    for _ in range(2):
        cycle(dra_plane, PromView(), T0 + timedelta(minutes=5))
    after = rules(admin)["maintenance-dra-c"]
    # The eviction controller writes its status; nothing else of it changed, and no write of it
    # came from the guard's field manager.
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["metadata"].get("labels") == before["metadata"].get("labels")
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    managers = {m["manager"] for m in after["metadata"].get("managedFields") or []}
    assert FIELD_MANAGER not in managers, managers


def test_breaker_and_one_isolation_per_cycle_count_device_taints_and_cordons(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """With dra-a, dra-b… tainted above, a limit at the current count holds the next device
    taint; one more slot lets exactly one of two faulted DRA nodes be tainted this cycle."""
    for name in ("dra-d", "dra-e"):
        dra_node(admin, name)
    views = [xid("dra-d"), xid("dra-e")]
    both = PromView(
        hardware_xids=views[0].hardware_xids + views[1].hardware_xids,
        loss_since=views[0].loss_since + views[1].loss_since,
    )
    guarded = len([r for r in rules(admin).values() if r["metadata"].get("labels")])
    s = Settings(prometheus_url="http://prometheus.invalid", breaker_max_nodes=guarded)
    plan = cycle(dra_plane, both, T0, s)
    assert not [a for a in plan if isinstance(a, TaintDevice)]
    assert {a.node for a in plan if a.reason == "breaker-open"} == {"dra-d", "dra-e"}
    # No node is cordoned here: the WARN counts what the breaker counts, the device taints.
    warn = next(a for a in plan if isinstance(a, Skip) and a.reason == "breaker-open")
    counted = f"{guarded} isolations (nodes cordoned + devices tainted), limit {guarded}"
    assert warn.detail.startswith(counted), warn.detail
    s = Settings(prometheus_url="http://prometheus.invalid", breaker_max_nodes=guarded + 5)
    plan = cycle(dra_plane, both, T0, s)
    tainted = [a.node for a in plan if isinstance(a, TaintDevice)]
    assert tainted == ["dra-d"]
    assert [a.node for a in plan if a.reason == "one-per-cycle"] == ["dra-e"]


def test_a_cycle_from_prometheus_taints_the_device_of_the_xid_in_a_dra_only_cluster(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """The whole read: a real Prometheus with dcgm-exporter's Xid gauge and kube-state-metrics'
    node series but no nvidia_com_gpu row (every GPU node of this cluster is DRA-only), the
    ResourceSlices from the API server; the guard's rule selects the device whose UUID the Xid
    names, and the same read without a GPU-publishing ResourceSlice stops with its one line."""
    node = "dra-prom"
    timeline = NodeTimeline(node, gpus=GPUS, xids=((ONSET_S, FAULTED, 79),), dra=True)
    dra_node(
        admin,
        node,
        uuid_of=lambda _, i: timeline.gpu_uuid(i),
        pci_of=lambda i: normalize_pci(timeline.gpu_pci(i)),
    )
    with scenario_prometheus(timeline) as prom:
        s = Settings(prometheus_url=prom.url, breaker_max_nodes=100)
        kubeconfig = dra_plane.service_account_kubeconfig(GUARD_NS, "gpu-node-guard")
        objs = read_cluster(Kube.connect(str(kubeconfig), in_cluster=False), s)
        assert objs.dra_gpus()
        names = {n.name for n in objs.nodes}
        view = read_prom(PromClient(prom.url), s, ISOLATE_AT, names, dra_gpus=objs.dra_gpus())
        with pytest.raises(PromError, match=r"no gpu\.nvidia\.com ResourceSlice publishes a GPU"):
            read_prom(PromClient(prom.url), s, ISOLATE_AT, names)
    plan = cycle(dra_plane, view, ISOLATE_AT, s)
    (taint,) = [a for a in plan if isinstance(a, TaintDevice)]
    assert taint.node == node
    assert not [a for a in plan if isinstance(a, Cordon)]
    (rule,) = [r for r in rules(admin).values() if r["spec"]["deviceSelector"].get("pool") == node]
    assert rule["spec"]["deviceSelector"]["device"] == f"gpu-{FAULTED}"
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"


def roomy() -> Settings:
    """The tests above leave their rules: a breaker with room for the tests below."""
    return Settings(prometheus_url="http://prometheus.invalid", breaker_max_nodes=100)


def faults(node: str, *indexes: int) -> PromView:
    return PromView(
        hardware_xids=tuple(g for i in indexes for g in xid(node, i).hardware_xids),
        loss_since=xid(node).loss_since,
    )


@pytest.mark.parametrize("index", [1, 6])
def test_a_second_faulted_gpu_gets_the_warning_and_event_whatever_its_index(
    dra_plane: ControlPlane, admin: client.ApiClient, index: int
) -> None:
    """Issue #38, 6.2: gpu-3 is tainted and still reports its Xid; gpu-1 or gpu-6 faults too:
    either way one WARN `device-isolated` and a GuardNotIsolated Event naming the new GPU."""
    node, s = f"dra-second-{index}", roomy()
    dra_node(admin, node)
    assert [a for a in cycle(dra_plane, xid(node), T0, s) if isinstance(a, TaintDevice)]
    plan = cycle(dra_plane, faults(node, FAULTED, index), T0 + timedelta(minutes=5), s)
    (skip,) = [a for a in plan if isinstance(a, Skip) and a.reason == "device-isolated"]
    assert skip.level == "WARN" and gpu_uuid(node, index) in skip.detail, skip.detail
    events = [e for e in node_events(admin, node) if e["reason"] == "GuardNotIsolated"]
    assert len(events) == 1 and gpu_uuid(node, index) in events[0]["note"], events
    mine = [r for r in rules(admin).values() if r["spec"]["deviceSelector"].get("pool") == node]
    assert len(mine) == 1


def reset_done(api: client.ApiClient, node: str, value: str) -> None:
    client.CoreV1Api(api).patch_node(node, {"metadata": {"annotations": {KEYS.reset_done: value}}})


def failed(api: client.ApiClient, job: str) -> None:
    """Play the Job controller: the Job failed (its Pod's load test did not pass)."""
    at = "2026-09-21T06:00:00Z"
    status = {
        "startTime": at,
        "failed": 1,
        "conditions": [
            {
                "type": c,
                "status": "True",
                "lastTransitionTime": at,
                "reason": "BackoffLimitExceeded",
            }
            for c in ("FailureTarget", "Failed")
        ],
    }
    client.BatchV1Api(api).patch_namespaced_job_status(
        job, JOBS_NS, {"status": status}, _content_type=MERGE_PATCH
    )


def test_a_newer_reset_done_waits_for_the_running_device_load_test(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """Issue #38, 6.4: a reset-done written while the device's load test runs starts no second
    claim or Job for the same GPU; when that Job has ended, the newer reset gets its own."""
    node, s, later = "dra-reset-twice", roomy(), T0 + timedelta(minutes=10)
    dra_node(admin, node)
    assert [a for a in cycle(dra_plane, xid(node), T0, s) if isinstance(a, TaintDevice)]
    reset_done(admin, node, "2026-09-21T05:05:00Z GPU reset")
    (first,) = [
        a.name
        for a in cycle(dra_plane, PromView(), later, s)
        if a.node == node and isinstance(a, CreateJob)
    ]
    reset_done(admin, node, "2026-09-21T05:08:00Z GPU reset again")
    plan = cycle(dra_plane, PromView(), later, s)
    assert [(type(a).__name__, a.reason) for a in plan if a.node == node] == [
        ("Skip", "loadtest-running")
    ]
    mine = [c["metadata"]["name"] for c in _claims(admin) if node in c["metadata"]["name"]]
    assert mine == [first]
    failed(admin, first)
    plan = cycle(dra_plane, PromView(), later, s)
    made = [a.name for a in plan if a.node == node and isinstance(a, CreateClaim | CreateJob)]
    assert len(made) == 2 and first not in made, made


def _claims(api: client.ApiClient) -> list[dict[str, Any]]:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(*CLAIMS)
    return list(found["items"])


def _mig(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU in MIG mode: two MIG devices naming it as their parent, no whole GPU."""
    parent = gpu["attributes"]["uuid"]["string"]
    return [
        {
            "name": f"{gpu['name']}-mig-1g-10gb-{i}",
            "attributes": {
                "type": {"string": "mig"},
                "uuid": {"string": f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, parent + str(i))}"},
                "parentUUID": {"string": parent},
                "profile": {"string": "1g.10gb"},
            },
        }
        for i in range(2)
    ]


def _no_uuid(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    attributes = {k: v for k, v in gpu["attributes"].items() if k != "uuid"}
    return [{**gpu, "attributes": attributes}]


def _two_names(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    return [gpu, {**gpu, "name": f"{gpu['name']}-alias"}]


@pytest.mark.parametrize(
    ("shape", "names"),
    [
        (_mig, ["gpu-3-mig-1g-10gb-0", "gpu-3-mig-1g-10gb-1"]),
        (_no_uuid, ["gpu-3"]),
        (_two_names, ["gpu-3", "gpu-3-alias"]),
    ],
    ids=["mig-only", "no-uuid-attribute", "two-names"],
)
def test_every_published_device_of_the_faulted_gpu_is_tainted(
    dra_plane: ControlPlane,
    admin: client.ApiClient,
    shape: Callable[[dict[str, Any]], list[dict[str, Any]]],
    names: list[str],
) -> None:
    """Issue #39, 4: the faulted GPU published only as MIG devices, without a `uuid`, or under
    two names: the API server takes one guard rule per device (its policy admits each), the node
    stays schedulable, and the breaker counts the GPU once."""
    node, s = f"dra-shape-{shape.__name__.strip('_').replace('_', '-')}", roomy()
    dra_node(admin, node, faulted_as=shape)
    plan = cycle(dra_plane, xid(node), T0, s)
    assert sorted(a.device for a in plan if isinstance(a, TaintDevice)) == [
        f"gpu.nvidia.com/{node}/{n}" for n in names
    ]
    mine = [r for r in rules(admin).values() if r["spec"]["deviceSelector"].get("pool") == node]
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in mine) == names
    assert all(r["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-node-guard" for r in mine)
    read = client.CoreV1Api(admin).read_node(node)
    assert not read.spec.unschedulable and KEYS.device_taint in read.metadata.annotations
    # The next cycle: the same GPU is guarded, nothing more is tainted.
    again = cycle(dra_plane, xid(node), T0 + timedelta(minutes=5), s)
    assert not [a for a in again if isinstance(a, TaintDevice)]


def test_a_faulted_gpu_the_driver_stopped_publishing_is_recorded_and_said_not_isolated(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """Issue #38, 6.5: the driver publishes gpu-0 … gpu-7 but the faulted gpu-3: no rule can
    select it and the guard does not cordon a DRA node (the API would refuse it anyway), but the
    incident is in the ledger (once, from the Xid series' UUID and PCI address) and a Warning
    Event says what the guard did; when the driver publishes it again, it is tainted."""
    node, s = "dra-unpublished", roomy()
    dra_node(admin, node, faulted_as=lambda _: [])
    for minutes in (0, 5):
        plan = cycle(dra_plane, xid(node), T0 + timedelta(minutes=minutes), s)
        (skip,) = [a for a in plan if isinstance(a, Skip) and a.node == node]
        assert (skip.reason, skip.level) == ("device-unpublished", "WARN")
        assert not [a for a in plan if isinstance(a, TaintDevice | Cordon)]
    ledger = client.CoreV1Api(admin).read_namespaced_config_map(s.ledger_configmap, GUARD_NS)
    lines = ledger.data[node].splitlines()
    assert len(lines) == 1 and f"{pci(FAULTED)} {gpu_uuid(node, FAULTED)}" in lines[0], lines
    events = [e for e in node_events(admin, node) if e["reason"] == "GuardNotIsolated"]
    assert events and "publishes no device of this GPU" in events[0]["note"], events
    read = client.CoreV1Api(admin).read_node(node)
    assert not read.spec.unschedulable
    assert not [r for r in rules(admin).values() if r["spec"]["deviceSelector"].get("pool") == node]
    # The driver publishes it again: the next cycle taints it, with no second ledger line.
    api = client.CustomObjectsApi(admin)
    found = api.get_cluster_custom_object(*SLICES, f"{node}-gpu.nvidia.com")
    back = {
        "name": f"gpu-{FAULTED}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, FAULTED)},
            "pcieBusID": {"string": pci(FAULTED)},
        },
    }
    found["spec"]["devices"].append(back)
    api.replace_cluster_custom_object(*SLICES, f"{node}-gpu.nvidia.com", found)
    plan = cycle(dra_plane, xid(node), T0 + timedelta(minutes=10), s)
    assert [a.device for a in plan if isinstance(a, TaintDevice)] == [
        f"gpu.nvidia.com/{node}/gpu-{FAULTED}"
    ]
    ledger = client.CoreV1Api(admin).read_namespaced_config_map(s.ledger_configmap, GUARD_NS)
    assert ledger.data[node].splitlines() == lines


SLICES = ("resource.k8s.io", "v1", "resourceslices")


def test_the_pod_on_the_tainted_gpu_is_told_and_a_node_wide_fault_is_said_not_isolated(
    dra_plane: ControlPlane, admin: client.ApiClient
) -> None:
    """The device-taint unit tells the pod dcgm-exporter names on the faulted GPU (guard scope
    admits its Event in the pod's namespace); a held fabric fault of another DRA node names no
    device: no rule, no cordon, a WARN line and a GuardNotIsolated Event on that node."""
    node, wide, team, s = "dra-told", "dra-fabric", "dra-team", roomy()
    for name in (node, wide):
        dra_node(admin, name)
    try:
        client.CoreV1Api(admin).create_namespace({"metadata": {"name": team}})
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    holder = GpuHolder(node, gpu_uuid(node, FAULTED), team, "train-0")
    fabric = ((wide, T0 - timedelta(hours=1)),)
    view = replace(xid(node), gpu_holders=(holder,), fabric_since=fabric)
    plan = cycle(dra_plane, view, T0, s)
    assert [a.device for a in plan if isinstance(a, TaintDevice)] == [
        f"gpu.nvidia.com/{node}/gpu-{FAULTED}"
    ]
    answer = client.EventsV1Api(admin).list_namespaced_event(team).items
    (told,) = [e for e in answer if e.reason == "GuardGpuIsolated"]
    assert told.regarding.kind == "Pod" and told.regarding.name == "train-0"
    assert "tainted this GPU NoSchedule" in told.note and gpu_uuid(node, FAULTED) in told.note
    assert not client.CoreV1Api(admin).read_node(wide).spec.unschedulable
    (skip,) = [a for a in plan if isinstance(a, Skip) and a.node == wide]
    assert (skip.reason, skip.level) == ("no-gpu-resource", "WARN")
    events = [e for e in node_events(admin, wide) if e["reason"] == "GuardNotIsolated"]
    assert len(events) == 1 and "names no one device to taint" in events[0]["note"], events
