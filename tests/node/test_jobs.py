"""The guard's Jobs on a real node: rendered by `gpu-node-guard render`, created with the guard's
ServiceAccount token, admitted by the policies, their Pods made by the real Job controller and
run by a real kubelet + containerd + runc from the image built here (hack/node/build.sh), and read
back as the guard reads them. The apiserver tier plays the kubelet; here nothing does."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from guard import ledger
from guard.evidence.cli import JSON_MARK
from guard.jobs import JobTemplates
from guard.plan.common import node_evidence_job, trigger_evidence_args
from guard.settings import Settings
from guard.wire import parse_evidence_summary, parse_fence_summary, parse_summary
from tests.apiserver.deploy import Kubectl, kubectl_or_skip
from tests.apiserver.kube import JOBS_NS, MERGE_PATCH
from tests.node import fake_host
from tests.node.jobs import record, render, run_job, termination_message
from tests.node.node import Node

pytestmark = pytest.mark.node
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_evidence_reads_the_incident_through_the_node(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """The evidence Job reads the incident of gpu-node-b (kernel log and lspci dump from the
    fixtures, as the node's own tools) through hostPID and `nsenter -t 1 -m`, ends, and its
    summary is read by the guard; `kubectl logs` shows the same verdict."""
    job = render("evidence", node.name, "--pci", fake_host.GPU, "--xid", "79")
    ran = record("evidence", run_job(admin, guard_kubeconfig, job))
    assert ran.read.status == "succeeded", ran.pod["status"]
    assert ran.read.result is not None and ran.read.result.state == "read", ran.read.result
    summary = parse_evidence_summary(termination_message(ran.pod))
    assert (summary.pci, summary.verdict) == (fake_host.GPU, "power-cycle")
    logs = Kubectl(kubectl_or_skip(), node.plane.kubeconfig).run(
        "-n", JOBS_NS, "logs", f"job/{job['metadata']['name']}"
    )
    assert "power-cycle" in logs.stdout


def test_node_wide_evidence_of_a_gpu_short_node_runs_through_the_node(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """A gpu-short cordon's evidence Job, built as the planner builds it (`--trigger gpu-short
    --expected-gpus 8`, no GPU): `lspci -nn -k -d 10de:` in the node's mount namespace lists four
    GPUs, one without its driver, so the verdict is power-cycle with the unbound slot among its
    reasons (docs/evidence.md "Node-wide evidence"); the guard reads the summary (no GPU), and
    `kubectl logs` shows the verdict and the request draft naming the node and the trigger."""
    s, at = Settings(), datetime.now(UTC)
    args = trigger_evidence_args(node.name, ledger.GPU_SHORT, 8)
    job = node_evidence_job(s, JobTemplates.load(), node.name, at, ledger.GPU_SHORT, args).manifest
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][1:] == list(args)
    with fake_host.listing(node.workdir / fake_host.DIRECTORY, FIXTURES):
        ran = record("node-wide evidence", run_job(admin, guard_kubeconfig, job))
    assert ran.read.status == "succeeded", ran.pod["status"]
    assert ran.read.result is not None and ran.read.result.state == "read", ran.read.result
    summary = parse_evidence_summary(termination_message(ran.pod))
    assert (summary.pci, summary.verdict) == ("unknown", "power-cycle")
    logs = Kubectl(kubectl_or_skip(), node.plane.kubeconfig).run(
        "-n", JOBS_NS, "logs", f"job/{job['metadata']['name']}"
    )
    lines = logs.stdout.splitlines()
    head = f"== gpu-node-guard evidence: node {node.name}, trigger gpu-short =="
    verdict = lines[lines.index(head) + 1]
    assert verdict.startswith("verdict: power-cycle ("), verdict
    assert f"lspci: {fake_host.UNBOUND_GPU} listed without" in verdict, verdict
    assert f"  {fake_host.UNBOUND_GPU}: driver none bound" in lines
    assert "  4 GPUs listed, the node's class expects 8" in lines
    (found,) = [json.loads(x.removeprefix(JSON_MARK)) for x in lines if x.startswith(JSON_MARK)]
    assert (found["trigger"], found["pci"], found["verdict"]) == ("gpu-short", None, "power-cycle")
    draft = found["request"]
    assert draft.startswith(f"Subject: {node.name}: gpu-short needs cold power cycle"), draft
    assert (
        f"- {fake_host.UNBOUND_GPU}: driver none bound" in draft
        and "Verdict: power-cycle (" in draft
    )


def test_conformance_runs_on_this_host(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """The conformance Job reads this machine through /proc/1/root and nsenter; its summary is
    the guard's to read, and it agrees with the Job's status."""
    ran = record("conformance", run_job(admin, guard_kubeconfig, render("conformance", node.name)))
    summary = parse_summary(termination_message(ran.pod))
    assert ran.read.result is not None and ran.read.result.state == "read", ran.read.result
    assert ran.read.result.passed is summary.ok
    assert ran.read.status == ("succeeded" if summary.ok else "failed")


def test_fence_without_nvidia_smi_ends_in_error(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """On a host without nvidia-smi the fence Job ends in its documented `error` outcome (never
    `gpu-absent`: a missing nvidia-smi says nothing about the GPU), read as a failed fence."""
    ran = record("fence", run_job(admin, guard_kubeconfig, render("fence", node.name)))
    summary = parse_fence_summary(termination_message(ran.pod))
    assert summary.outcome == "error", summary
    assert ran.read.status == "failed"
    assert ran.read.result is not None
    assert [f.item for f in ran.read.result.failed] == ["error"]


def test_a_job_on_the_guards_cordoned_node_still_runs(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """The guard cordons a node and then runs its Jobs there: the cordon's taint is tolerated
    and nodeName places the Pod without the scheduler."""
    core = client.CoreV1Api(admin)
    taint = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    cordon = {"spec": {"unschedulable": True, "taints": [taint]}}
    core.patch_node(node.name, cordon, _content_type=MERGE_PATCH)
    try:
        ran = record(
            "evidence on a cordoned node",
            run_job(admin, guard_kubeconfig, render("evidence", node.name, "--pci", fake_host.GPU)),
        )
    finally:
        core.patch_node(
            node.name, {"spec": {"unschedulable": None, "taints": None}}, _content_type=MERGE_PATCH
        )
    assert ran.pod["spec"]["nodeName"] == node.name
    assert ran.read.status == "succeeded", ran.pod["status"]


def test_a_load_test_the_node_has_no_cpu_for_is_rejected_by_the_kubelet(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path
) -> None:
    """The load test asks for 2 CPUs; the node offers Pods 1.5 (tests/node/node.py). The kubelet
    refuses the Pod at admission (Failed, OutOfcpu, no container ever made): the guard reads
    it as rejected by the node, with the kubelet's reason, never as a failed load test."""
    job = render("loadtest", node.name)
    ran = record("load test rejected", run_job(admin, guard_kubeconfig, job))
    status = ran.pod["status"]
    assert (status["phase"], status.get("reason")) == ("Failed", "OutOfcpu"), status
    assert status["message"].startswith("Pod was rejected"), status
    assert not status.get("containerStatuses")
    assert ran.read.status == "failed"
    assert ran.read.result is not None
    assert ran.read.result.state == "rejected", ran.read.result
    assert "OutOfcpu" in ran.read.result.problem
    assert not ran.read.result.failed
