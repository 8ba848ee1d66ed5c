"""The lifecycle checks end to end on a real kube-apiserver (RBAC and the generated policies) and a
real Prometheus: a reboot into a missing ip_vs, an onboarding node, the PCIe links of a cordon,
and the node-scope rules behind them.

There is no kubelet and no Job controller here, so each test plays them: it creates the Job's Pod
as the Job controller would (admitted by the kind's Pod policy), writes the container's
termination message into its status the way the kubelet does, and marks the Job finished.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.actions import RemoveTaint
from guard.apply import node_patch
from guard.doors.kube import Kube
from guard.example.promserver import LocalPrometheus
from guard.jobs import JobTemplates, spec_digest
from guard.names import Annotations
from guard.plan.common import render_example_job
from guard.read.objects import node_info
from guard.settings import Settings
from guard.wire import Finding, Summary, render_summary
from tests.apiserver.guard_run import (
    CYCLE,
    EVIDENCE,
    ISOLATE_AT,
    KEYS,
    LOADTEST_PASS,
    NO_CF,
    NO_IPVS,
    PASS,
    RETURN_AT,
    copy_of,
    faulted,
    finish,
    forget_guard_state,
    guard_cordoned,
    guard_jobs,
    healthy,
    mine,
    node_events,
    reject,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import (
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    create,
    refusal,
)
from tests.apiserver.kubectl import follow_hint

pytestmark = pytest.mark.apiserver

REBOOT, GATE, GATE_FAIL, LINKS = "lc-reboot", "lc-gate", "lc-gate-fail", "lc-links"
REPLACED, REJECTED = "lc-replaced", "lc-rejected"
RETURN, RETURN_FAIL = "lc-return", "lc-return-fail"
GATE_TAINT = {"key": "gpu-node-guard.io/onboarding", "value": "pending", "effect": "NoSchedule"}
SITE_TAINT = {"key": "example.com/reserved", "value": "ml", "effect": "NoSchedule"}
SCOPE = "ValidatingAdmissionPolicy 'gpu-node-guard-node-scope'"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    timelines = (
        healthy(REBOOT),
        healthy(GATE),
        healthy(GATE_FAIL),
        faulted(LINKS),
        faulted(REPLACED),
        faulted(REJECTED),
        faulted(RETURN),
        faulted(RETURN_FAIL),
    )
    with scenario_prometheus(*timelines) as server:
        yield server


@pytest.fixture
def lifecycle_node(
    core: client.CoreV1Api, admin: client.ApiClient, deployed: ControlPlane
) -> Iterator[Callable[..., str]]:
    """A Ready GPU node with 8 of 8 GPUs, its annotations and taints; removed afterwards with
    the Pods this test made for its Jobs (no finalizers, grace 0: no kubelet ends them)."""
    made: list[str] = []

    def make(
        name: str,
        *,
        boot: str,
        annotations: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        allocatable: int = 8,
    ) -> str:
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        core.create_node(
            {
                "metadata": {
                    "name": name,
                    "annotations": annotations or {},
                    "labels": {"nvidia.com/gpu.present": "true"},
                },
                "spec": spec,
            }
        )
        made.append(name)
        set_status(core, name, boot=boot, allocatable=allocatable)
        return name

    yield make
    for name in made:
        core.delete_collection_namespaced_pod(
            JOBS_NS, label_selector=f"{KEYS.node_label}={name}", grace_period_seconds=0
        )
        core.delete_node(name)
    forget_guard_state(core, admin)


def the_job(admin: client.ApiClient, node: str, kind: str) -> dict[str, Any]:
    """The one guard Job of `kind` on `node`, as stored (plain JSON)."""
    (job,) = [
        j
        for j in guard_jobs(admin, node)
        if j.metadata.labels["app.kubernetes.io/component"] == kind
    ]
    raw = client.BatchV1Api(admin).read_namespaced_job(
        job.metadata.name, JOBS_NS, _preload_content=False
    )
    return dict(json.loads(raw.data))


JOB_RECORDS = (KEYS.loadtest_job, KEYS.conformance_job)


def notes(core: client.CoreV1Api, node: str, records: bool = False) -> dict[str, str]:
    """The guard's annotations of `node`; the records of the Jobs it made only with `records`
    (test_a_replaced_load_test_job_is_no_pass checks those)."""
    found = core.read_node(node).metadata.annotations or {}
    return {
        k: v
        for k, v in found.items()
        if k.startswith(KEYS.prefix) and (records or k not in JOB_RECORDS)
    }


def command(job: dict[str, Any]) -> list[str]:
    return list(job["spec"]["template"]["spec"]["containers"][0]["command"])


def _names(admin: client.ApiClient, node: str, kind: str) -> list[str]:
    return [
        j.metadata.name
        for j in guard_jobs(admin, node)
        if j.metadata.labels["app.kubernetes.io/component"] == kind
    ]


def the_job_named(admin: client.ApiClient, name: str) -> dict[str, Any]:
    raw = client.BatchV1Api(admin).read_namespaced_job(name, JOBS_NS, _preload_content=False)
    return dict(json.loads(raw.data))


# ── After every reboot ──────────────────────────────────────────────────────────────────────


def test_a_reboot_into_a_missing_ip_vs_is_cordoned_within_one_cycle_of_its_conformance_job(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    checked = {KEYS.checked_boot: "boot-1 2026-09-20T00:00:00Z job/gng-cf-lc-reboot-00000000"}
    node = lifecycle_node(REBOOT, boot="boot-2", annotations=checked)  # rebooted since
    first = run_guard(prom, guard_kubeconfig, RETURN_AT).plan
    assert mine(first, node) == [("create-job", "new-boot")]
    job = the_job(admin, node, "conformance")
    assert command(job)[:3] == ["gpu-node-guard", "conformance", "--root"]
    finish(deployed, admin, job, NO_IPVS, ok=False)

    cordoned = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan
    assert mine(cordoned, node) == [
        ("cordon", "conformance-ipvs-loaded"),
        ("event", "conformance-ipvs-loaded"),
    ]
    assert core.read_node(node).spec.unschedulable is True
    at = f"{RETURN_AT + CYCLE:%Y-%m-%dT%H:%M:%SZ}"
    name = job["metadata"]["name"]
    assert notes(core, node) == {
        **checked,
        KEYS.reason: "conformance-ipvs-loaded",
        KEYS.at: at,
        KEYS.boot_id: "boot-2",
        KEYS.gpu_capacity: "8",
        KEYS.conformance_failed: f"{at} job/{name} ipvs-loaded",
    }
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
    assert event["type"] == "Warning" and "ipvs-loaded (ip_vs is not loaded" in event["note"]

    # Fixed on the host and rebooted: the next boot passes and the node returns.
    set_status(core, node, boot="boot-3", allocatable=8)
    again = run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE).plan
    assert mine(again, node) == [("create-job", "conditions-met")]
    recheck = next(
        j
        for j in (the_job_named(admin, j) for j in _names(admin, node, "conformance"))
        if j["metadata"]["name"] != name
    )
    finish(deployed, admin, recheck, PASS, ok=True)
    back = run_guard(prom, guard_kubeconfig, RETURN_AT + 3 * CYCLE).plan
    assert mine(back, node) == [("uncordon", "conformance-passed"), ("event", "returned")]
    found = core.read_node(node)
    assert not found.spec.unschedulable
    when = f"{RETURN_AT + 3 * CYCLE:%Y-%m-%dT%H:%M:%SZ}"
    assert notes(core, node) == {
        KEYS.checked_boot: f"boot-3 {when} job/{recheck['metadata']['name']}",
        KEYS.returned: f"{when} job/{recheck['metadata']['name']}",
    }
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT + 4 * CYCLE).plan, node) == []


def test_a_failed_boot_check_on_a_node_a_person_cordoned_meanwhile_is_no_guard_cordon(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """A person's cordon is a person's: the node-scope policy would refuse the guard's cordon of
    an unschedulable node (422) every cycle, and the run would exit 1. No guard write, one skip
    line, exit 0."""
    checked = {KEYS.checked_boot: "boot-1 2026-09-20T00:00:00Z job/gng-cf-lc-reboot-00000000"}
    node = lifecycle_node(REBOOT, boot="boot-2", annotations=checked)
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT).plan, node) == [
        ("create-job", "new-boot")
    ]
    core.patch_node(node, {"spec": {"unschedulable": True}})  # a person, meanwhile
    finish(deployed, admin, the_job(admin, node, "conformance"), NO_IPVS, ok=False)
    before = core.read_node(node).metadata.resource_version
    run = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE)  # asserts exit 0, no failed write
    assert mine(run.plan, node) == [("skip", "already-cordoned")]
    assert core.read_node(node).metadata.resource_version == before
    assert [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"] == []


def test_a_passing_boot_is_recorded_and_not_checked_again(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = lifecycle_node(REBOOT, boot="boot-7")  # never checked: the first deployment
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT).plan, node) == [
        ("create-job", "never-checked")
    ]
    job = the_job(admin, node, "conformance")
    assert job["spec"]["ttlSecondsAfterFinished"] == Settings().boot_check_job_ttl_s
    finish(deployed, admin, job, PASS, ok=True)
    recorded = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan
    assert mine(recorded, node) == [("record-boot", "boot-check-passed")]
    assert notes(core, node) == {
        KEYS.checked_boot: f"boot-7 {RETURN_AT + CYCLE:%Y-%m-%dT%H:%M:%SZ} job/"
        f"{job['metadata']['name']}"
    }
    assert core.read_node(node).spec.unschedulable is not True
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE).plan, node) == []


# ── The return of a power-cycled node (return conformance, on by default) ──────────────────


def _power_cycled(
    prom: Any,
    guard_kubeconfig: Path,
    lifecycle_node: Callable[..., str],
    core: Any,
    admin: client.ApiClient,
    deployed: ControlPlane,
    name: str,
) -> tuple[str, dict[str, Any]]:
    """An Xid 79 cordon whose evidence Job finished, power-cycled into boot-2; the first return
    cycle's Job (the conformance Job of boot-2), which runs before any load test."""
    node = lifecycle_node(name, boot="boot-1", allocatable=7)
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    finish(deployed, admin, the_job(admin, node, "evidence"), EVIDENCE, ok=True)
    set_status(core, node, boot="boot-2", allocatable=8)
    first = run_guard(prom, guard_kubeconfig, RETURN_AT).plan
    assert ("create-job", "conditions-met") in mine(first, node)
    assert _names(admin, node, "loadtest") == []
    return node, the_job(admin, node, "conformance")


def test_a_power_cycled_node_passes_the_conformance_of_its_new_boot_before_it_serves(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node, conformance = _power_cycled(
        prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, RETURN
    )
    assert command(conformance)[:3] == ["gpu-node-guard", "conformance", "--root"]
    finish(deployed, admin, conformance, PASS, ok=True)
    second = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan
    assert mine(second, node) == [("create-job", "conditions-met")]
    loadtest = the_job(admin, node, "loadtest")
    assert core.read_node(node).spec.unschedulable is True  # not serving yet
    finish(deployed, admin, loadtest, LOADTEST_PASS, ok=True)
    back = run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE).plan
    assert mine(back, node) == [("uncordon", "loadtest-passed"), ("event", "returned")]
    assert not core.read_node(node).spec.unschedulable
    when = f"{RETURN_AT + 2 * CYCLE:%Y-%m-%dT%H:%M:%SZ}"
    found = notes(core, node)
    # The uncordon records boot-2 as checked, by the conformance Job that ran on it.
    assert found[KEYS.checked_boot] == f"boot-2 {when} job/{conformance['metadata']['name']}"
    assert found[KEYS.returned] == f"{when} job/{loadtest['metadata']['name']}"
    # So the after-reboot check starts no second conformance Job while the node serves.
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT + 3 * CYCLE).plan, node) == []


def test_a_failing_conformance_of_the_new_boot_keeps_the_power_cycled_node_cordoned(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node, conformance = _power_cycled(
        prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, RETURN_FAIL
    )
    finish(deployed, admin, conformance, NO_IPVS, ok=False)
    failed = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan
    assert mine(failed, node)[0] == ("annotate", "conformance-failed")
    found = core.read_node(node)
    assert found.spec.unschedulable is True
    kept = notes(core, node)
    assert kept[KEYS.reason] == "xid-79"  # the cordon keeps its reason
    assert kept[KEYS.conformance_result].startswith(f"failed job/{conformance['metadata']['name']}")
    later = run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE).plan
    assert mine(later, node) == [("skip", "conformance-failed")]
    assert _names(admin, node, "loadtest") == []


# ── The onboarding gate ─────────────────────────────────────────────────────────────────────


def test_a_gated_node_serves_only_after_conformance_and_the_burn_in(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = lifecycle_node(GATE, boot="boot-1", taints=[SITE_TAINT, GATE_TAINT])
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT).plan, node) == [
        ("create-job", "onboarding")
    ]
    check = the_job(admin, node, "conformance")
    tolerations = check["spec"]["template"]["spec"]["tolerations"]
    assert {**GATE_TAINT, "operator": "Equal"} in tolerations
    finish(deployed, admin, check, PASS, ok=True)
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan, node) == [
        ("create-job", "onboarding")
    ]
    burn = the_job(admin, node, "loadtest")
    words = command(burn)
    assert words[words.index("--duration-s") + 1] == str(Settings().onboarding_burnin_s)
    # the API server's TaintNodesByCondition added node.kubernetes.io/not-ready at creation
    before = [(t.key, t.value, t.effect, t.time_added) for t in core.read_node(node).spec.taints]
    assert (GATE_TAINT["key"], "pending", "NoSchedule", None) in before and len(before) == 3
    finish(deployed, admin, burn, LOADTEST_PASS, ok=True)

    admitted = run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE).plan
    assert mine(admitted, node) == [("remove-taint", "onboarding-passed"), ("event", "onboarded")]
    stored = core.read_node(node)
    after = [(t.key, t.value, t.effect, t.time_added) for t in stored.spec.taints]
    assert after == [t for t in before if t[0] != GATE_TAINT["key"]]
    at = f"{RETURN_AT + 2 * CYCLE:%Y-%m-%dT%H:%M:%SZ}"
    assert notes(core, node) == {KEYS.checked_boot: f"boot-1 {at} job/{check['metadata']['name']}"}
    assert [e["reason"] for e in node_events(admin, node)] == ["GuardOnboarded"]
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT + 3 * CYCLE).plan, node) == []


def test_a_gated_node_that_fails_keeps_its_taint_with_the_failed_items(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, kubectl_binary
):
    node = lifecycle_node(GATE_FAIL, boot="boot-1", taints=[GATE_TAINT])
    run_guard(prom, guard_kubeconfig, RETURN_AT)
    check = the_job(admin, node, "conformance")
    public = render_summary(
        Summary(
            False, failed=(Finding("dns-upstream", "nameserver 8.8.8.8 is outside 10.0.0.0/8"),)
        )
    )
    finish(deployed, admin, check, public, ok=False)
    failed = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan
    assert mine(failed, node) == [("annotate", "onboarding-failed"), ("event", "onboarding-failed")]
    at = f"{RETURN_AT + CYCLE:%Y-%m-%dT%H:%M:%SZ}"
    assert notes(core, node) == {
        KEYS.onboarding_failed: f"{at} job/{check['metadata']['name']} dns-upstream"
    }
    assert GATE_TAINT["key"] in [t.key for t in core.read_node(node).spec.taints]
    (event,) = node_events(admin, node)
    assert event["type"] == "Warning" and "8.8.8.8" in event["note"]
    later = run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE)
    assert mine(later.plan, node) == [("skip", "onboarding-failed")]
    assert guard_jobs(admin, node) and len(guard_jobs(admin, node)) == 1  # no burn-in
    # The hint, followed as written, checks the node again in this boot: a new Job, no failure.
    (skip,) = [x for x in later.lines("skip") if x.get("node") == node]
    follow_hint(skip["next"], kubectl_binary, deployed.kubeconfig)
    again = run_guard(prom, guard_kubeconfig, RETURN_AT + 3 * CYCLE).plan
    assert mine(again, node) == [("create-job", "onboarding")], mine(again, node)
    assert KEYS.onboarding_failed not in notes(core, node)


# ── PCIe links of a cordon ──────────────────────────────────────────────────────────────────


def test_the_links_the_evidence_job_read_reach_the_load_test_as_expect_link(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = lifecycle_node(LINKS, boot="boot-1", allocatable=7)
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    finish(deployed, admin, the_job(admin, node, "evidence"), EVIDENCE, ok=True)
    set_status(core, node, boot="boot-2", allocatable=8)  # power-cycled
    plan = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan  # straight to the load test
    assert mine(plan, node) == [("annotate", "pcie-links"), ("create-job", "conditions-met")]
    assert notes(core, node)[KEYS.pcie_links] == "0000:18:00.0=16GT/s,x16 0000:2a:00.0=32GT/s,x16"
    words = command(the_job(admin, node, "loadtest"))
    assert words[-4:] == [
        "--expect-link",
        "0000:18:00.0=16GT/s,x16",
        "--expect-link",
        "0000:2a:00.0=32GT/s,x16",
    ]
    assert "--allreduce" in words
    volumes = the_job(admin, node, "loadtest")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in volumes


def test_a_replaced_load_test_job_is_no_pass(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """The replace route (docs/security.md, "Job results"): a namespace admin deletes the
    guard's load-test Job and makes one of the same name, which succeeds with a passing Pod. The
    guard took its result from the uid it recorded at the create: the node stays cordoned, one
    WARN line and a Warning Event name the Job, and the run exits 0."""
    node = lifecycle_node(REPLACED, boot="boot-1", allocatable=7)
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    finish(deployed, admin, the_job(admin, node, "evidence"), EVIDENCE, ok=True)
    set_status(core, node, boot="boot-2", allocatable=8)  # power-cycled
    created = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert mine(created, node) == [("annotate", "pcie-links"), ("create-job", "conditions-met")]
    made = the_job(admin, node, "loadtest")
    name, uid = made["metadata"]["name"], made["metadata"]["uid"]
    assert notes(core, node, records=True)[KEYS.loadtest_job] == f"{name} {uid} {spec_digest(made)}"

    batch = client.BatchV1Api(admin)
    batch.delete_namespaced_job(name, JOBS_NS, propagation_policy="Background")
    create(admin, copy_of(made))
    impostor = the_job(admin, node, "loadtest")
    assert impostor["metadata"]["name"] == name and impostor["metadata"]["uid"] != uid
    finish(deployed, admin, impostor, LOADTEST_PASS, ok=True)

    run = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE, NO_CF)
    assert mine(run.plan, node) == [("skip", "loadtest-foreign"), ("event", "loadtest-foreign")]
    assert core.read_node(node).spec.unschedulable is True
    (warn,) = [a for a in run.plan["actions"] if a["node"] == node and a["type"] == "skip"]
    assert warn["level"] == "WARN" and "replaced" in warn["detail"]
    assert f"kubectl -n {JOBS_NS} delete job {name}" in warn["next"]
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardForeignJob"]
    assert event["type"] == "Warning" and f"job/{name}" in event["note"]


OUT_OF_CPU = (
    "OutOfcpu",
    "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, "
    "capacity: 2000",
)


def test_a_load_test_pod_the_node_rejects_could_not_run_and_the_node_stays_cordoned(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """A node short of the load test's 2 CPUs: its kubelet refuses the Pod at admission, the
    Job fails within a second with no container run. The guard's next cycle reads that as
    `job-rejected` (one WARN line, a Warning Event), records no load-test failure, and the node
    stays cordoned."""
    node = lifecycle_node(REJECTED, boot="boot-1", allocatable=7)
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    finish(deployed, admin, the_job(admin, node, "evidence"), EVIDENCE, ok=True)
    set_status(core, node, boot="boot-2", allocatable=8)  # power-cycled
    created = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert mine(created, node) == [("annotate", "pcie-links"), ("create-job", "conditions-met")]
    name = the_job(admin, node, "loadtest")["metadata"]["name"]
    reject(deployed, admin, the_job(admin, node, "loadtest"), *OUT_OF_CPU)

    run = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE, NO_CF)
    assert mine(run.plan, node) == [("skip", "job-rejected"), ("event", "job-rejected")]
    assert core.read_node(node).spec.unschedulable is True
    assert KEYS.loadtest_result not in notes(core, node)  # no load-test failure recorded
    (line,) = [x for x in run.lines("skip") if x.get("node") == node]
    assert line["level"] == "WARN" and line["reason"] == "job-rejected"
    assert f"loadtest job/{name}: pod " in line["detail"] and OUT_OF_CPU[1] in line["detail"]
    assert line["next"].startswith("the node stays cordoned")
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardJobRejected"]
    assert event["type"] == "Warning" and f"job/{name} could not run" in event["note"]


def loadtest_with_links(node: str, count: int) -> dict[str, Any]:
    job = render_example_job(
        Settings(),
        JobTemplates.load(),
        "loadtest",
        (node, "0000:99:00.0", 79, 8),
        key=f"links-{count}",
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    for i in range(count):
        container["command"] += ["--expect-link", f"0000:{0x10 + i:02x}:00.0=32GT/s,x16"]
    return job


@pytest.mark.parametrize(("count", "admitted"), [(16, True), (17, False)])
def test_the_loadtest_policy_takes_up_to_sixteen_recorded_links(
    guard: client.ApiClient, make_node: Callable[..., str], count: int, admitted: bool
) -> None:
    job = loadtest_with_links(make_node(), count)
    if admitted:
        create(guard, job, dry_run=True)
        return
    status, message = refusal(lambda: create(guard, job, dry_run=True))
    assert status == 422 and "'gpu-node-guard-loadtest-job'" in message, message
    assert "[--expect-link <pci>=<speed>GT/s,x<width>]*16" in message


# ── Node scope: exactly the gate taint, the checked boot, the links ─────────────────────────

K = Annotations("gpu-node-guard.io/")
OTHER = {"key": "example.com/maintenance", "effect": "NoExecute"}


def patch(api: client.ApiClient, node: str, body: dict[str, Any]) -> Any:
    return client.CoreV1Api(api).patch_node(node, body, _content_type=MERGE_PATCH)


def test_the_guard_removes_exactly_the_gate_taint(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    node = make_node()
    patch(admin, node, {"spec": {"taints": [SITE_TAINT, GATE_TAINT, OTHER]}})
    patch(guard, node, {"spec": {"taints": [SITE_TAINT, OTHER]}})
    assert [t.key for t in client.CoreV1Api(admin).read_node(node).spec.taints] == [
        SITE_TAINT["key"],
        OTHER["key"],
    ]


REFUSED_TAINTS = [
    pytest.param(
        [SITE_TAINT, GATE_TAINT, OTHER, {"key": "gpu-node-guard.io/x", "effect": "NoSchedule"}],
        id="add-a-taint",
    ),
    pytest.param([GATE_TAINT, OTHER], id="remove-another-taint"),
    pytest.param([OTHER], id="remove-the-gate-and-another"),
    pytest.param([SITE_TAINT, {**GATE_TAINT, "value": "done"}, OTHER], id="change-the-gate-value"),
    pytest.param(
        [SITE_TAINT, {**GATE_TAINT, "effect": "PreferNoSchedule"}, OTHER],
        id="change-the-gate-effect",
    ),
    pytest.param([SITE_TAINT, {**OTHER, "effect": "NoSchedule"}], id="gate-gone-another-changed"),
    pytest.param([OTHER, SITE_TAINT, GATE_TAINT], id="reorder"),
    pytest.param([], id="remove-every-taint"),
]


@pytest.mark.parametrize("taints", REFUSED_TAINTS)
def test_the_guard_changes_no_other_taint(
    guard: client.ApiClient,
    admin: client.ApiClient,
    make_node: Callable[..., str],
    taints: list[dict[str, str]],
) -> None:
    node = make_node()
    patch(admin, node, {"spec": {"taints": [SITE_TAINT, GATE_TAINT, OTHER]}})
    before = client.CoreV1Api(admin).read_node(node).metadata.resource_version
    status, message = refusal(lambda: patch(guard, node, {"spec": {"taints": taints}}))
    assert (status, SCOPE in message) == (422, True), message
    assert "the guard changes no taint but removing the onboarding gate" in message
    assert client.CoreV1Api(admin).read_node(node).metadata.resource_version == before


CHECKED = "boot-1 2026-09-21T06:00:00Z job/gng-cf-x-00000000"
LINKS_VALUE = "0000:18:00.0=16GT/s,x16"
CORDON = guard_cordoned(ISOLATE_AT)


def test_the_guard_writes_the_new_records_where_they_belong(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    serving = make_node()
    patch(guard, serving, {"metadata": {"annotations": {K.checked_boot: CHECKED}}})
    held = make_node(unschedulable=True, annotations=CORDON)
    patch(guard, held, {"metadata": {"annotations": {K.pcie_links: LINKS_VALUE}}})
    back = {**dict.fromkeys(CORDON), K.pcie_links: None, K.checked_boot: CHECKED}
    patch(guard, held, {"metadata": {"annotations": back}, "spec": {"unschedulable": False}})
    stored = client.CoreV1Api(admin).read_node(held).metadata.annotations
    assert stored == {K.checked_boot: CHECKED}
    with pytest.raises(ApiException):  # and a cordon for conformance is an ordinary cordon
        patch(guard, serving, {"spec": {"unschedulable": True}})
    cordon = {
        K.reason: "conformance-ipvs-loaded",
        K.at: "2026-09-21T06:05:00Z",
        K.boot_id: "boot-1",
        K.gpu_capacity: "8",
        K.conformance_failed: "2026-09-21T06:05:00Z job/gng-cf-x-0 ipvs-loaded",
    }
    patch(guard, serving, {"metadata": {"annotations": cordon}, "spec": {"unschedulable": True}})
    assert client.CoreV1Api(admin).read_node(serving).spec.unschedulable is True


def test_a_taint_added_while_the_gate_is_removed_is_kept(
    guard_kubeconfig: Path, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    """The removal is guarded by the node's resourceVersion: a taint someone adds between the
    guard's read and its patch makes a 409; the guard re-reads and removes only the gate."""
    node = make_node()
    patch(admin, node, {"spec": {"taints": [SITE_TAINT, GATE_TAINT]}})
    kube = Kube.connect(str(guard_kubeconfig), in_cluster=False)
    read = node_info(kube.node(node), K)
    gate = next(t for t in read.taints if t.key == GATE_TAINT["key"])
    action = RemoveTaint(
        node,
        "onboarding-passed",
        read.resource_version,
        gate,
        tuple(t for t in read.taints if t != gate),
        read.boot_id,
        ((K.checked_boot, CHECKED),),
    )
    patch(admin, node, {"spec": {"taints": [SITE_TAINT, GATE_TAINT, OTHER]}})  # the race
    done = node_patch.patch(kube, K, action)
    assert done.outcome.status == "applied"
    stored = client.CoreV1Api(admin).read_node(node)
    assert [t.key for t in stored.spec.taints] == [SITE_TAINT["key"], OTHER["key"]]
    assert stored.metadata.annotations[K.checked_boot] == CHECKED
