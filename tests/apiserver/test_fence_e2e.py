"""The host fence end to end on a real kube-apiserver (RBAC and the generated policies) and a real
Prometheus: `gpu-node-guard run --fence-gpu` creates the fence Job with its own token and the
fence policies admit it (Job and Pod); a drain the site's settings ConfigMap does not allow is
refused; the fence is recorded, set again after a reboot, and lifted before the load test.

No kubelet and no Job controller here: the test plays them (`finish`), as
test_lifecycle_e2e.py does.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from kubernetes import client, config

from guard.example.promserver import LocalPrometheus
from guard.jobs import spec_digest
from guard.wire import FenceSummary, render_fence_summary
from tests.apiserver.guard_run import (
    CYCLE,
    EVIDENCE,
    ISOLATE_AT,
    KEYS,
    NO_CF,
    RETURN_AT,
    faulted,
    finish,
    mine,
    node_events,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import JOBS_NS, create, guard_job
from tests.apiserver.test_lifecycle_e2e import command, lifecycle_node, notes, the_job_named

pytestmark = pytest.mark.apiserver
__all__ = ["lifecycle_node"]  # the fixture, shared with the lifecycle tests

FENCED_NODE, DRAIN_NODE, LIFTED_NODE = "fn-fenced", "fn-drain", "fn-lifted"
LATE_NODE = "fn-late-lift"
FENCE = "--fence-gpu"
PCI = "0000:58:00.0"  # GPU 4 of tests.scenario_build's nodes


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(
        faulted(FENCED_NODE), faulted(DRAIN_NODE), faulted(LIFTED_NODE), faulted(LATE_NODE)
    ) as server:
        yield server


def fence_jobs(admin: client.ApiClient, node: str) -> list[str]:
    jobs = client.BatchV1Api(admin).list_namespaced_job(JOBS_NS).items
    return sorted(
        j.metadata.name
        for j in jobs
        if j.metadata.annotations.get(KEYS.node_label) == node
        and j.metadata.labels["app.kubernetes.io/component"] == "fence"
    )


def summary(mode: str, outcome: str, uuid: str) -> str:
    mode_read = "Prohibited" if mode == "set" else "Default"
    return render_fence_summary(FenceSummary(mode, PCI, uuid, outcome, mode_read))


def test_the_fence_job_is_admitted_recorded_set_again_after_a_reboot_and_lifted_before_the_load_test(  # noqa: E501
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = lifecycle_node(FENCED_NODE, boot="boot-1", allocatable=7)
    # The cordon's cycle: the guard's token creates the evidence Job and the fence Job.
    cordon = mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT, FENCE).plan, node)
    assert cordon[0] == ("cordon", "xid-79") and cordon[-1] == ("create-job", "fence-set")
    (evidence,) = [
        j
        for j in client.BatchV1Api(admin).list_namespaced_job(JOBS_NS).items
        if j.metadata.annotations.get(KEYS.node_label) == node
        and j.metadata.labels["app.kubernetes.io/component"] == "evidence"
    ]
    finish(deployed, admin, the_job_named(admin, evidence.metadata.name), EVIDENCE, ok=True)
    (name,) = fence_jobs(admin, node)
    job = the_job_named(admin, name)
    words = command(job)
    assert words[:3] == ["gpu-node-guard", "fence", "set"] and words[3:5] == ["--pci", PCI]
    uuid = words[6]
    made = f"{name} {job['metadata']['uid']} {spec_digest(job)}"
    assert notes(core, node)[KEYS.fence_job] == made  # what the guard made, by uid

    finish(deployed, admin, job, summary("set", "fenced", uuid), ok=True)  # the Pod policy too
    run = run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE, FENCE).plan
    assert ("annotate", "fenced") in mine(run, node)
    assert notes(core, node)[KEYS.fence].startswith("fenced boot-1 ")

    # Rebooted, but one GPU short still: the mode reset with the boot, the fence is set again.
    set_status(core, node, boot="boot-2", allocatable=7)
    again = run_guard(prom, guard_kubeconfig, RETURN_AT, FENCE, NO_CF).plan
    assert mine(again, node)[:2] == [("skip", "gpu-count"), ("create-job", "fence-reapply")]
    (reapplied,) = [n for n in fence_jobs(admin, node) if n != name]
    finish(deployed, admin, the_job_named(admin, reapplied), summary("set", "fenced", uuid), True)

    # Every condition holds now: the fence is recorded for boot-2, then lifted, then the load test.
    set_status(core, node, boot="boot-2", allocatable=8)
    recorded = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE, FENCE, NO_CF).plan
    assert mine(recorded, node)[0] == ("annotate", "fenced")
    lift = run_guard(prom, guard_kubeconfig, RETURN_AT + 2 * CYCLE, FENCE, NO_CF).plan
    assert mine(lift, node) == [("create-job", "fence-lift")]
    (lifter,) = [n for n in fence_jobs(admin, node) if n not in (name, reapplied)]
    assert command(the_job_named(admin, lifter))[2] == "lift"
    assert core.read_node(node).spec.unschedulable is True  # cordoned all along
    finish(deployed, admin, the_job_named(admin, lifter), summary("lift", "lifted", uuid), True)
    lifted = run_guard(prom, guard_kubeconfig, RETURN_AT + 3 * CYCLE, FENCE, NO_CF).plan
    assert mine(lifted, node)[0] == ("annotate", "fence-lifted")
    test = run_guard(prom, guard_kubeconfig, RETURN_AT + 4 * CYCLE, FENCE, NO_CF).plan
    assert ("create-job", "conditions-met") in mine(test, node)  # the load test, only now


def test_a_drain_the_site_did_not_allow_is_refused_by_the_fence_policy(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """The run asks for --drain; the settings ConfigMap (the policies' params) does not say
    GUARD_FENCE_DRAIN=true: the API refuses the Job, the run says so and exits 1."""
    node = lifecycle_node(DRAIN_NODE, boot="boot-1", allocatable=7)
    refused = run_guard(prom, guard_kubeconfig, ISOLATE_AT, FENCE, "--fence-drain", ok=False)
    assert refused.rc == 1
    (create,) = [
        a
        for a in refused.plan["actions"]
        if a["node"] == node and a["type"] == "create-job" and a["reason"] == "fence-set"
    ]
    assert create["outcome"]["status"] == "failed"
    assert "--drain only where the site sets fence_drain" in create["outcome"]["detail"]
    assert fence_jobs(admin, node) == []
    assert core.read_node(node).spec.unschedulable is True  # the cordon stands without it


def test_a_fence_lifted_behind_the_guards_back_is_seen_and_set_again(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """Issue 38: a `fence lift` made with the guard's stolen token (in shape: admitted) after the
    guard's `fenced` record. Its read-back says Default; the guard's record still says fenced.
    The next cycle says so (WARN fence-lifted-foreign, one Warning Event naming the Job) and
    fences the GPU again; the guard's fence Jobs are known by uid (`fence-jobs`), not by time."""
    node = lifecycle_node(LIFTED_NODE, boot="boot-1", allocatable=7)
    run_guard(prom, guard_kubeconfig, ISOLATE_AT, FENCE)
    (name,) = fence_jobs(admin, node)
    job = the_job_named(admin, name)
    uuid = command(job)[6]
    assert notes(core, node)[KEYS.fence_jobs] == job["metadata"]["uid"]  # by identity
    finish(deployed, admin, job, summary("set", "fenced", uuid), ok=True)
    run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE, FENCE)
    assert notes(core, node)[KEYS.fence].startswith("fenced boot-1 ")

    # The stolen token lifts the guard's fence: the guard's own Job, `lift` for `set`.
    stolen = config.new_client_from_config(config_file=str(guard_kubeconfig))
    theirs = {k: job[k] for k in ("apiVersion", "kind", "spec")}
    theirs["metadata"] = {k: job["metadata"][k] for k in ("namespace", "labels", "annotations")} | {
        "name": name[:-8] + "0f0f0f0f"
    }
    theirs["spec"] = {k: v for k, v in job["spec"].items() if k not in ("selector",)}
    template = theirs["spec"]["template"]
    template["metadata"]["labels"] = {
        k: v
        for k, v in template["metadata"]["labels"].items()
        if "controller-uid" not in k and k not in ("batch.kubernetes.io/job-name", "job-name")
    }
    words = template["spec"]["containers"][0]["command"]
    words[2] = "lift"
    create(stolen, theirs)  # admitted: the guard's token, in shape
    lifted = the_job_named(admin, theirs["metadata"]["name"])
    finish(deployed, admin, lifted, summary("lift", "lifted", uuid), ok=True)

    seen = mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT + 2 * CYCLE, FENCE).plan, node)
    assert ("skip", "fence-lifted-foreign") in seen and ("create-job", "fence-reapply") in seen
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardForeignJob"]
    assert event["type"] == "Warning" and f"job/{lifted['metadata']['name']}" in event["note"]
    (again,) = [n for n in fence_jobs(admin, node) if n not in (name, lifted["metadata"]["name"])]
    assert command(the_job_named(admin, again))[2] == "set"
    uids = notes(core, node)[KEYS.fence_jobs].split(" ")
    assert uids == [job["metadata"]["uid"], the_job_named(admin, again)["metadata"]["uid"]]
    assert lifted["metadata"]["uid"] not in uids

    # Set again and read back: the record holds again; the lift is said no more.
    finish(deployed, admin, the_job_named(admin, again), summary("set", "fenced", uuid), ok=True)
    recorded = mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT + 3 * CYCLE, FENCE).plan, node)
    assert ("annotate", "fenced") in recorded
    assert notes(core, node)[KEYS.fence].endswith(f"job/{again}")
    after = mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT + 4 * CYCLE, FENCE).plan, node)
    assert [r for _, r in after if r.startswith("fence")] == [], after
    assert core.read_node(node).spec.unschedulable is True  # cordoned all along


def test_a_lift_made_before_the_guards_set_job_but_ended_after_it_is_seen_and_set_again(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """Issue 38: the stolen token's `fence lift` is made first, the guard's set Job after it,
    and the lift's Pod runs last (the kubelet starts Pods in no promised order). The set Job's
    read-back is recorded `fenced`, yet the lift ended after that Job was made: by its end, not
    its creation, the guard sees the fence may be gone, says so and sets it again."""
    node = lifecycle_node(LATE_NODE, boot="boot-1", allocatable=7)
    stolen = config.new_client_from_config(config_file=str(guard_kubeconfig))
    theirs = guard_job("fence", node, "late-lift")
    theirs["spec"]["template"]["spec"]["containers"][0]["command"][2] = "lift"
    create(stolen, theirs)  # admitted: the guard's token, in shape
    lifted = the_job_named(admin, theirs["metadata"]["name"])
    run_guard(prom, guard_kubeconfig, ISOLATE_AT, FENCE)  # the cordon and the guard's set Job
    (name,) = [n for n in fence_jobs(admin, node) if n != lifted["metadata"]["name"]]
    job = the_job_named(admin, name)
    uuid = command(job)[6]
    finish(deployed, admin, job, summary("set", "fenced", uuid), ok=True)
    run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE, FENCE)
    assert notes(core, node)[KEYS.fence].startswith("fenced boot-1 ")

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # after the set Job was made
    finish(deployed, admin, lifted, summary("lift", "lifted", uuid), ok=True, ended_at=now)
    seen = mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT + 2 * CYCLE, FENCE).plan, node)
    assert ("skip", "fence-lifted-foreign") in seen and ("create-job", "fence-reapply") in seen
    assert core.read_node(node).spec.unschedulable is True  # cordoned all along
