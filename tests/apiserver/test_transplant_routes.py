"""Every gate that takes a Job's result trusts only the guard's own Job and that Job's own Pod's
pass, end to end: real guard cycles (`gpu-node-guard run` with its ServiceAccount's token) on a
cluster as clusters run (ServiceAccount admission, NodeRestriction, the real Job controller
making and adopting the Pods), a real Prometheus; the test plays only the kubelet, and the
attacker is an admin of the jobs namespace (docs/security.md, "Job results").

The gates: the return's load test (`--no-return-conformance`) and its conformance Job (on by
default), the onboarding gate's conformance Job and its burn-in load test, the after-reboot
check's conformance Job. The routes:
- replace: delete the guard's Job and create an in-shape Job of the same name, which passes;
- orphan adoption: an in-shape Job on a healthy node passes there; its Pod is rewritten to carry
  the guard Job's labels, for the Job controller to adopt it. The Pod policy refuses the
  rewrite; and where no policy held it (its binding removed), the adopted Pod still ran on
  another node, so its pass is not the Job's;
- no attacker: the guard's own Job succeeds but its Pod's summary says fail, or is garbage.
Each ends with the node as the gate keeps it (cordoned, gated, its boot unchecked) and no guard
write but, for a Job or Pod the guard did not make, one WARN line and a Warning Event naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.example.promserver import LocalPrometheus
from tests.apiserver.conftest import JOBS_NS_ADMIN, wait_for_enforcement
from tests.apiserver.controllers import (
    WAIT_S,
    create_as,
    job_succeeded,
    run_to_the_end,
)
from tests.apiserver.guard_run import (
    CYCLE,
    EVIDENCE,
    ISOLATE_AT,
    KEYS,
    LOADTEST_FAIL,
    LOADTEST_PASS,
    NO_CF,
    NO_IPVS,
    PASS,
    RETURN_AT,
    GuardRun,
    as_site_settings,
    copy_of,
    faulted,
    forget_guard_state,
    guard_jobs,
    healthy,
    mine,
    node_events,
    retargeted,
    run_guard,
    scenario_prometheus,
    set_status,
    site_settings,
)
from tests.apiserver.kube import JOBS_NS, ControlPlane, refusal

pytestmark = pytest.mark.apiserver

GATE_TAINT = {"key": "gpu-node-guard.io/onboarding", "value": "pending", "effect": "NoSchedule"}
CHECKED = "boot-1 2026-09-20T00:00:00Z job/gng-cf-tr-00000000"
ELSEWHERE = "tr-healthy"  # where the attacker's own Job passes; no node of that name is needed
PERSON, OTHER = "tr-person-a", "tr-person-b"  # sorted so: the person's node comes first


@dataclass(frozen=True, slots=True)
class Gate:
    """A gate that takes a Job's result: which Job, how the guard is run, its skip words."""

    name: str
    kind: str  # of the gate's Job
    returns: bool  # a cordoned node's return (else the node serves or is gated)
    flags: tuple[str, ...]
    word: str  # the gate's skip prefix: <word>-foreign, -running, -unreadable
    passed: str  # the test's pass of this Job kind; fail and garbage below
    failed: str
    garbage: str


GATES = (
    Gate(
        "return-loadtest",
        "loadtest",
        True,
        (NO_CF,),
        "loadtest",
        LOADTEST_PASS,
        LOADTEST_FAIL,
        "verdict: pass",
    ),
    Gate("return-conformance", "conformance", True, (), "conformance", PASS, NO_IPVS, "PASS"),
    Gate("onboarding", "conformance", False, (), "onboarding", PASS, NO_IPVS, "PASS"),
    Gate(
        "onboarding-burn-in",
        "loadtest",
        False,
        (),
        "onboarding",
        LOADTEST_PASS,
        LOADTEST_FAIL,
        "verdict: pass",
    ),
    Gate("after-reboot", "conformance", False, (), "boot-check", PASS, NO_IPVS, "PASS"),
)
ROUTES = ("replace", "adopt", "fail", "garbage")


def node_name(route: str, gate: Gate) -> str:
    return f"tr-{route}-{gate.name}"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    timelines = tuple(
        faulted(node_name(r, g)) if g.returns else healthy(node_name(r, g))
        for r in ROUTES
        for g in GATES
    )
    others = (healthy(ELSEWHERE), healthy(PERSON), healthy(OTHER))
    with scenario_prometheus(*timelines, *others) as server:
        yield server


@pytest.fixture(scope="module")
def kubeconfig(cluster: ControlPlane) -> Path:
    """A token of the guard's own ServiceAccount, as the CronJob runs."""
    return cluster.service_account_kubeconfig("gpu-node-guard", "gpu-node-guard")


@pytest.fixture(scope="module")
def admin(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    with cluster.admin_client() as api:
        yield api


@dataclass(frozen=True, slots=True)
class AtGate:
    """A node whose gate just got the guard's Job (`job`, as stored), and how to run the guard."""

    node: str
    job: dict[str, Any]
    run: Callable[..., GuardRun]
    status: Callable[[], dict[str, Any]]  # `gpu-node-guard status -o json` at the last cycle


@pytest.fixture
def at_gate(
    cluster: ControlPlane, admin: client.ApiClient, prom: LocalPrometheus, kubeconfig: Path
) -> Iterator[Callable[[str, Gate], AtGate]]:
    """Bring a node to its gate's Job: a return's node cordoned for Xid 79, its evidence Job
    passed, power-cycled into boot-2; an onboarding node registered with the gate taint; a
    serving node rebooted since its checked boot. The node goes afterwards, with the guard's
    Jobs, its ledger and Events."""
    core, made = client.CoreV1Api(admin), []

    def bring(route: str, gate: Gate) -> AtGate:
        name = node_name(route, gate)
        cycles, last = iter(RETURN_AT + n * CYCLE for n in range(1, 10)), [RETURN_AT]

        def run(*extra: str) -> GuardRun:
            last.append(next(cycles))
            return run_guard(prom, kubeconfig, last[-1], *gate.flags, *extra)

        def status() -> dict[str, Any]:
            with site_settings(core, as_site_settings(gate.flags)):
                return _status()

        def _status() -> dict[str, Any]:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "guard",
                    "status",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--prometheus-url",
                    prom.url,
                    "--at",
                    last[-1].isoformat(),
                    "-o",
                    "json",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            (found,) = [n for n in json.loads(proc.stdout)["nodes"] if n["node"] == name]
            return dict(found)

        notes = {KEYS.checked_boot: CHECKED} if gate.name == "after-reboot" else {}
        gated = gate.name.startswith("onboarding")
        spec = {"taints": [GATE_TAINT]} if gated else {}
        core.create_node(
            {
                "metadata": {
                    "name": name,
                    "annotations": notes,
                    "labels": {"nvidia.com/gpu.present": "true"},
                },
                "spec": spec,
            }
        )
        made.append(name)
        rebooted = gate.name == "after-reboot"
        set_status(
            core,
            name,
            boot="boot-2" if rebooted else "boot-1",
            allocatable=7 if gate.returns else 8,
        )
        if gate.returns:
            isolated = run_guard(prom, kubeconfig, ISOLATE_AT, *gate.flags).plan
            assert mine(isolated, name)[0] == ("cordon", "xid-79")
            run_to_the_end(cluster, admin, the_job(admin, name, "evidence"), EVIDENCE, ok=True)
            set_status(core, name, boot="boot-2", allocatable=8)  # power-cycled
        first = run_guard(prom, kubeconfig, RETURN_AT, *gate.flags).plan
        assert ("create-job", _made_for(gate)) in mine(first, name)
        if gate.name == "onboarding-burn-in":  # after the gate's conformance Job passed
            run_to_the_end(cluster, admin, the_job(admin, name, "conformance"), PASS, ok=True)
            assert mine(run().plan, name) == [("create-job", "onboarding")]
        return AtGate(name, the_job(admin, name, gate.kind), run, status)

    yield bring
    for name in made:
        core.delete_node(name)
    forget_guard_state(core, admin)


def _made_for(gate: Gate) -> str:
    if gate.name.startswith("onboarding"):
        return "onboarding"
    return "new-boot" if gate.name == "after-reboot" else "conditions-met"


def the_job(admin: client.ApiClient, node: str, kind: str) -> dict[str, Any]:
    (job,) = [
        j
        for j in guard_jobs(admin, node)
        if j.metadata.labels["app.kubernetes.io/component"] == kind
    ]
    return dict(admin.sanitize_for_serialization(job))


def guard_notes(admin: client.ApiClient, node: str) -> dict[str, str]:
    found = client.CoreV1Api(admin).read_node(node).metadata.annotations or {}
    return {k: v for k, v in found.items() if k.startswith(KEYS.prefix)}


def kept_as_the_gate_keeps_it(
    admin: client.ApiClient, at: AtGate, gate: Gate, before: dict[str, str]
) -> None:
    """Cordoned, gated, or serving with its boot unchecked; no guard key written."""
    node = client.CoreV1Api(admin).read_node(at.node)
    assert bool(node.spec.unschedulable) == gate.returns
    taints = [t.key for t in node.spec.taints or []]
    assert (GATE_TAINT["key"] in taints) == gate.name.startswith("onboarding")
    assert guard_notes(admin, at.node) == before


def named_in_a_warning(
    run: GuardRun, admin: client.ApiClient, at: AtGate, gate: Gate, said: str
) -> None:
    """One WARN line and one Warning Event, each naming the guard's Job, the first saying why."""
    word, job = f"{gate.word}-foreign", at.job["metadata"]["name"]
    assert mine(run.plan, at.node) == [("skip", word), ("event", word)]
    (warn,) = [a for a in run.plan["actions"] if a["node"] == at.node and a["type"] == "skip"]
    assert warn["level"] == "WARN" and said in warn["detail"], warn
    assert f"kubectl -n {JOBS_NS} delete job {job}" in warn["next"]
    (event,) = [e for e in node_events(admin, at.node) if e["reason"] == "GuardForeignJob"]
    assert event["type"] == "Warning" and f"job/{job}" in event["note"]
    shown = at.status()  # what a person reads: why, and what to do
    assert shown["state"] == "job-not-made-by-the-guard", shown
    assert f"delete job {job}" in shown["next"], shown


@pytest.mark.parametrize("gate", GATES, ids=lambda g: g.name)
def test_a_replaced_job_is_no_pass(
    cluster: ControlPlane,
    admin: client.ApiClient,
    at_gate: Callable[[str, Gate], AtGate],
    gate: Gate,
) -> None:
    """Replace: the jobs-namespace admin deletes the guard's Job and creates one of the same
    name and shape; the Job controller runs it, its Pod passes. Another uid than the guard's
    record: a WARN line and a Warning Event, the node kept as its gate keeps it."""
    at = at_gate("replace", gate)
    before = guard_notes(admin, at.node)
    name = at.job["metadata"]["name"]
    client.BatchV1Api(admin).delete_namespaced_job(name, JOBS_NS, propagation_policy="Background")
    _gone(admin, name)
    impostor = create_as(cluster, JOBS_NS_ADMIN, copy_of(at.job))
    assert impostor["metadata"]["uid"] != at.job["metadata"]["uid"]
    run_to_the_end(cluster, admin, impostor, gate.passed, ok=True)

    run = at.run()
    named_in_a_warning(run, admin, at, gate, "replaced")
    kept_as_the_gate_keeps_it(admin, at, gate, before)


def _gone(admin: client.ApiClient, name: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            client.BatchV1Api(admin).read_namespaced_job(name, JOBS_NS)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        assert time.monotonic() < deadline, f"job/{name} still there"
        time.sleep(0.2)


@pytest.mark.parametrize("gate", GATES, ids=lambda g: g.name)
def test_an_adopted_pod_is_no_pass(
    cluster: ControlPlane,
    admin: client.ApiClient,
    at_gate: Callable[[str, Gate], AtGate],
    gate: Gate,
) -> None:
    """Orphan adoption: the admin's in-shape Job passes on a healthy node; its Pod, rewritten
    with the guard Job's labels and no owner, would be adopted into the guard's Job. The Pod
    policy refuses the rewrite (the guard's Job keeps waiting for its own Pod). With that policy
    unbound, the real Job controller adopts the Pod and counts the guard's Job succeeded; the
    Pod ran on another node than the Job's, so its pass is not the Job's: WARN, Warning Event,
    the node kept as its gate keeps it."""
    at = at_gate("adopt", gate)
    before = guard_notes(admin, at.node)
    decoy = create_as(cluster, JOBS_NS_ADMIN, retargeted(at.job, ELSEWHERE))
    pod = run_to_the_end(cluster, admin, decoy, gate.passed, ok=True)
    forged = adopted_by(pod, at.job)
    with cluster.impersonating(JOBS_NS_ADMIN) as bob:
        status, message = refusal(lambda: replace_pod(bob, forged))
    assert status in (403, 422) and f"gpu-node-guard-{gate.kind}-pod" in message, message
    assert mine(at.run().plan, at.node) == [("skip", f"{gate.word}-running")]
    kept_as_the_gate_keeps_it(admin, at, gate, before)

    with unbound(cluster, admin, f"gpu-node-guard-{gate.kind}-pod"):
        with cluster.impersonating(JOBS_NS_ADMIN) as bob:
            _eventually(lambda: replace_pod(bob, forged))
        job_succeeded(admin, at.job)  # the controller adopted the Pod and counted it
    owners = client.CoreV1Api(admin).read_namespaced_pod(pod["metadata"]["name"], JOBS_NS)
    assert [o.uid for o in owners.metadata.owner_references] == [at.job["metadata"]["uid"]]

    run = at.run()
    named_in_a_warning(run, admin, at, gate, f"ran on node {ELSEWHERE}")
    kept_as_the_gate_keeps_it(admin, at, gate, before)


def adopted_by(pod: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """`pod` as an orphan carrying `job`'s labels and tracking finalizer, named as its Pods are:
    what the Job controller of `job` adopts and counts."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    meta = dict(pod["metadata"])
    meta["ownerReferences"] = None
    meta["generateName"] = f"{name}-"
    meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    meta["labels"] = {
        **meta["labels"],
        "job-name": name,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
    }
    return {**pod, "metadata": meta}


def replace_pod(api: client.ApiClient, pod: dict[str, Any]) -> Any:
    """PUT `pod` over the stored one (its resourceVersion cleared: no conflict on a retry)."""
    body = {**pod, "metadata": {**pod["metadata"], "resourceVersion": None}}
    return client.CoreV1Api(api).replace_namespaced_pod(pod["metadata"]["name"], JOBS_NS, body)


def _eventually(call: Callable[[], object]) -> None:
    """`call` until the API server admits it (a removed binding leaves admission by informer)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            call()
            return
        except ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@contextmanager
def unbound(plane: ControlPlane, admin: client.ApiClient, binding: str) -> Iterator[None]:
    """The ValidatingAdmissionPolicyBinding `binding` removed meanwhile (a cluster without that
    policy); bound again, and every policy enforcing, afterwards."""
    api = client.AdmissionregistrationV1Api(admin)
    stored = admin.sanitize_for_serialization(api.read_validating_admission_policy_binding(binding))
    keep = {k: v for k, v in stored["metadata"].items() if k in ("name", "labels", "annotations")}
    api.delete_validating_admission_policy_binding(binding)
    try:
        yield
    finally:
        api.create_validating_admission_policy_binding({**stored, "metadata": keep})
        wait_for_enforcement(plane, admin)


@pytest.mark.parametrize("route", ["fail", "garbage"])
@pytest.mark.parametrize("gate", GATES, ids=lambda g: g.name)
def test_a_succeeded_job_whose_pod_says_no_pass_is_no_pass(
    cluster: ControlPlane,
    admin: client.ApiClient,
    at_gate: Callable[[str, Gate], AtGate],
    gate: Gate,
    route: str,
) -> None:
    """No attacker: the guard's own Job succeeds (its Pod exited 0), but the Pod's summary says
    fail, or is no summary. Job success alone is no pass: a WARN line, the node kept as its gate
    keeps it, no guard write."""
    at = at_gate(route, gate)
    before = guard_notes(admin, at.node)
    message = gate.failed if route == "fail" else gate.garbage
    run_to_the_end(cluster, admin, at.job, message, ok=True)
    run = at.run()
    assert mine(run.plan, at.node) == [("skip", f"{gate.word}-unreadable")]
    (warn,) = [a for a in run.plan["actions"] if a["node"] == at.node]
    assert warn["level"] == "WARN"
    kept_as_the_gate_keeps_it(admin, at, gate, before)


# ── A person's cordon is a person's ─────────────────────────────────────────────────────────


def test_a_persons_cordon_takes_no_cordon_of_the_cycle(
    cluster: ControlPlane, admin: client.ApiClient, prom: LocalPrometheus, kubeconfig: Path
) -> None:
    """Two serving nodes rebooted; both conformance Jobs fail (the real Job controller ends
    them). A person cordoned the first meanwhile: the guard writes nothing there (no cordon the
    node-scope policy would refuse), exits 0, and the cycle's one conformance cordon goes to the
    second."""
    core, nodes = client.CoreV1Api(admin), (PERSON, OTHER)
    try:
        for name in nodes:
            notes, labels = {KEYS.checked_boot: CHECKED}, {"nvidia.com/gpu.present": "true"}
            core.create_node({"metadata": {"name": name, "annotations": notes, "labels": labels}})
            set_status(core, name, boot="boot-2", allocatable=8)
        first = run_guard(prom, kubeconfig, RETURN_AT).plan
        assert [mine(first, n) for n in nodes] == [[("create-job", "new-boot")]] * 2
        core.patch_node(PERSON, {"spec": {"unschedulable": True}})  # a person, meanwhile
        for name in nodes:
            run_to_the_end(cluster, admin, the_job(admin, name, "conformance"), NO_IPVS, ok=False)
        before = core.read_node(PERSON).metadata.resource_version
        run = run_guard(prom, kubeconfig, RETURN_AT + CYCLE)  # asserts exit 0, no failed write
        assert mine(run.plan, PERSON) == [("skip", "already-cordoned")]
        assert mine(run.plan, OTHER) == [
            ("cordon", "conformance-ipvs-loaded"),
            ("event", "conformance-ipvs-loaded"),
        ]
        assert core.read_node(PERSON).metadata.resource_version == before
        assert core.read_node(OTHER).spec.unschedulable is True
        assert [e["reason"] for e in node_events(admin, PERSON)] == []
    finally:
        for name in nodes:
            core.delete_node(name)
        forget_guard_state(core, admin)
