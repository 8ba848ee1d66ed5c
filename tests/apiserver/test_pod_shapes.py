"""Pods in the jobs namespace: only the Job controller creates them, only in the exact shape of
their kind (as that controller makes them from an admitted Job), never changed into anything
else afterwards, never entered (exec, attach, port-forward, ephemeral containers); no other
workload kind may exist there to make Pods of its own."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.jobs import JobKind
from tests.apiserver import tally
from tests.apiserver.conftest import Identities, make_service_account
from tests.apiserver.kube import (
    GUARD_NS,
    JOB_CONTROLLER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    as_dict,
    controller_pod,
    create,
    guard_device_job,
    guard_job,
    refusal,
)
from tests.apiserver.shapes import CASES, PSA, SHELL, Case, pod_view, refusal_for_pod

pytestmark = pytest.mark.apiserver

NODE = "gpu-shape-b"
KINDS: list[JobKind] = ["evidence", "loadtest", "conformance", "fence"]
GATE = "ValidatingAdmissionPolicy 'gpu-node-guard-jobs-namespace'"
NOT_DIRECT = (
    "Pods here are created only by the controller of their kind (the Job controller; "
    "the DaemonSet controller for the agent)"
)
POD_CASES = [c for c in CASES if c.pod_too]


@pytest.fixture(scope="module")
def jobs(identities: Identities, runtime_class: str) -> dict[str, dict[str, Any]]:
    """One admitted guard Job per kind, as the API server stored it (uid, generated labels)."""
    made = {k: guard_job(k, NODE, f"pods-{uuid.uuid4().hex}") for k in KINDS}
    return {k: as_dict(create(identities.guard_token, job)) for k, job in made.items()}


@pytest.fixture(scope="module")
def job_controller(deployed: ControlPlane) -> client.ApiClient:
    with deployed.impersonating(JOB_CONTROLLER) as api:
        yield api


def pod_of(jobs: dict[str, dict[str, Any]], case: Case) -> dict[str, Any]:
    pod = controller_pod(jobs[case.kind])
    case.change(pod_view(pod))
    return pod


def policy_of(case: Case) -> str:
    if case.gate or case.pod_gate:
        return GATE
    return f"ValidatingAdmissionPolicy 'gpu-node-guard-{case.kind}-pod'"


@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: c.id)
def test_out_of_shape_pod_from_the_job_controller_is_refused(
    jobs: dict[str, dict[str, Any]], job_controller: client.ApiClient, case: Case
) -> None:
    """Had an out-of-shape Job got in (made before the policies, say), its Pods still would not."""
    status, message = refusal(lambda: create(job_controller, pod_of(jobs, case)))
    tally.record("job-controller", "Pods", status == 422 and policy_of(case) in message)
    assert (status, policy_of(case) in message) == (422, True), message
    assert refusal_for_pod(case) in message, message


@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: c.id)
def test_a_jobs_namespace_admin_creates_no_pod(
    identities: Identities, jobs: dict[str, dict[str, Any]], case: Case
) -> None:
    """Refused twice over (not the Job controller; not in shape): the answer names either."""
    status, message = refusal(lambda: create(identities.jobs_ns_admin, pod_of(jobs, case)))
    by_gate = (
        GATE in message and ("label must name a guard kind" if case.gate else NOT_DIRECT) in message
    )
    by_shape = policy_of(case) in message and refusal_for_pod(case) in message
    tally.record("jobs-ns-admin", "Pods", status == 422 and (by_gate or by_shape))
    assert status == 422 and (by_gate or by_shape), message


def test_a_jobs_namespace_admin_creates_no_pod_even_in_shape(
    identities: Identities, jobs: dict[str, dict[str, Any]]
) -> None:
    for kind in KINDS:
        pod = controller_pod(jobs[kind])
        status, message = refusal(lambda: create(identities.jobs_ns_admin, pod))  # noqa: B023
        tally.record("jobs-ns-admin", "Pods", status == 422 and GATE in message)
        assert (status, GATE in message) == (422, True), message
        assert f"{NOT_DIRECT}, never directly; sent by bob-jobs-ns-admin" in message


@pytest.mark.parametrize("who", ["guard-token", "guard-ns-admin"])
@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: c.id)
def test_the_guard_and_the_guard_namespace_admin_create_no_pod_there(
    identities: Identities, jobs: dict[str, dict[str, Any]], case: Case, who: str
) -> None:
    api = identities.guard_token if who == "guard-token" else identities.guard_ns_admin
    status, message = refusal(lambda: create(api, pod_of(jobs, case)))
    tally.record(who, "Pods", status == 403)
    assert status == 403 and 'cannot create resource "pods"' in message, message


def _retarget(**owner: object) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"][0].update(owner)

    return change


def _meta(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["metadata"][key] = copy.deepcopy(value)

    return change


def _spec(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"][key] = copy.deepcopy(value)

    return change


def _rename_job(pod: dict[str, Any]) -> None:
    for label in ("batch.kubernetes.io/job-name", "job-name"):
        pod["metadata"]["labels"][label] = "debug-shell"
    pod["metadata"]["ownerReferences"][0]["name"] = "debug-shell"
    pod["metadata"]["generateName"] = "debug-shell-"


POD_ONLY = [
    pytest.param(
        "evidence",
        _retarget(kind="ReplicaSet", apiVersion="apps/v1"),
        "metadata.ownerReferences must be the one Job that owns it",
        id="owned-by-rs",
    ),
    pytest.param(
        "evidence",
        _retarget(uid=str(uuid.uuid4())),
        "metadata.ownerReferences must be the one Job that owns it",
        id="owner-uid-not-the-label",
    ),
    pytest.param(
        "loadtest",
        _retarget(controller=False),
        "metadata.ownerReferences must be the one Job that owns it",
        id="owner-not-controller",
    ),
    pytest.param(
        "evidence",
        _rename_job,
        "the owning Job must be a guard evidence Job (gng-ev-…), got debug-shell",
        id="owned-by-another-job",
    ),
    pytest.param(
        "evidence",
        _meta("generateName", "other-"),
        "metadata.name must be the Job's name and a generated suffix",
        id="other-generate-name",
    ),
    pytest.param(
        "conformance",
        _meta("annotations", {"kubectl.kubernetes.io/default-container": "conformance"}),
        "metadata.annotations must be absent when the Pod is created",
        id="annotation-at-create",
    ),
    pytest.param(
        "evidence",
        _meta("finalizers", ["example.com/keep"]),
        "metadata.finalizers must be only the Job controller's job-tracking finalizer",
        id="other-finalizer",
    ),
    pytest.param(
        "evidence",
        _spec(
            "tolerations",
            [
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                },
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                },
            ],
        ),
        "spec.tolerations must be",
        id="not-ready-tolerated-forever",
    ),
]


@pytest.mark.parametrize(("kind", "change", "says"), POD_ONLY)
def test_pod_not_as_its_job_controller_makes_it_is_refused(
    jobs: dict[str, dict[str, Any]],
    job_controller: client.ApiClient,
    kind: JobKind,
    change: Callable[[dict[str, Any]], None],
    says: str,
) -> None:
    pod = controller_pod(jobs[kind])
    change(pod)
    status, message = refusal(lambda: create(job_controller, pod))
    policy = f"ValidatingAdmissionPolicy 'gpu-node-guard-{kind}-pod'"
    tally.record("job-controller", "Pods", status == 422 and policy in message)
    assert (status, policy in message) == (422, True), message
    assert says in message


@pytest.mark.parametrize(
    "user",
    [
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:serviceaccount:kube-system:statefulset-controller",
    ],
)
def test_in_shape_pod_from_another_controller_is_refused(
    deployed: ControlPlane, jobs: dict[str, dict[str, Any]], user: str
) -> None:
    with deployed.impersonating(user) as api:
        status, message = refusal(lambda: create(api, controller_pod(jobs["evidence"])))
    tally.record("other controllers", "Pods", status == 422 and GATE in message)
    assert (status, GATE in message) == (422, True), message
    assert f"{NOT_DIRECT}, never directly; sent by {user}" in message


@pytest.fixture(scope="module")
def kcm_may_create_pods(admin: client.ApiClient) -> None:
    """A controller-manager on its own credentials holds the Job controller's rights."""
    client.RbacAuthorizationV1Api(admin).create_cluster_role_binding(
        {
            "metadata": {"name": "test-kcm-job-controller"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:controller:job-controller",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "system:kube-controller-manager",
                }
            ],
        }
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "controller", [JOB_CONTROLLER, "system:kube-controller-manager"], ids=["sa", "kcm"]
)
def test_the_guards_own_pods_are_accepted(
    kcm_may_create_pods: None,
    deployed: ControlPlane,
    admin: client.ApiClient,
    jobs: dict[str, dict[str, Any]],
    kind: JobKind,
    controller: str,
) -> None:
    with deployed.impersonating(controller) as api:
        pod = controller_pod(jobs[kind])
        made: dict[str, Any] = {}
        for _ in range(300):  # a new ClusterRoleBinding reaches RBAC by informer
            try:
                made = as_dict(create(api, pod))
                break
            except ApiException as exc:
                if exc.status != 403:
                    raise
    stored = client.CoreV1Api(admin).read_namespaced_pod(made["metadata"]["name"], JOBS_NS)
    assert stored.metadata.owner_references[0].uid == jobs[kind]["metadata"]["uid"]
    assert (
        stored.spec.containers[0].command
        == (jobs[kind]["spec"]["template"]["spec"]["containers"][0]["command"])
    )
    # the template's two (the cordon, the onboarding gate) and the two admission adds
    assert stored.spec.priority == 0 and len(stored.spec.tolerations) == 4
    client.CoreV1Api(admin).delete_namespaced_pod(stored.metadata.name, JOBS_NS)


@pytest.fixture
def running_pod(
    admin: client.ApiClient, job_controller: client.ApiClient, jobs: dict[str, dict[str, Any]]
) -> Any:
    made = as_dict(create(job_controller, controller_pod(jobs["evidence"])))
    yield made["metadata"]["name"]
    client.CoreV1Api(admin).delete_namespaced_pod(made["metadata"]["name"], JOBS_NS)


SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CHANGES = [
    pytest.param(
        {"spec": {"containers": [{"name": "evidence", "image": "busybox:1.36"}]}},
        "ValidatingAdmissionPolicy 'gpu-node-guard-evidence-pod'",
        "spec.containers[0].image must be the image in this policy's `image`",
        id="image-swapped",
    ),
    pytest.param(
        [{"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}],
        "ValidatingAdmissionPolicy 'gpu-node-guard-evidence-pod'",
        "spec.tolerations must be",
        id="tolerate-everything",
    ),
    pytest.param(
        {"spec": {"activeDeadlineSeconds": 999999}},
        "ValidatingAdmissionPolicy 'gpu-node-guard-evidence-pod'",
        "spec may not hold field(s) activeDeadlineSeconds",
        id="deadline-added",
    ),
    pytest.param(
        {"metadata": {"labels": {"app.kubernetes.io/component": "debug"}}},
        GATE,
        "label must name a guard kind",
        id="relabelled-out-of-the-policy",
    ),
]


@pytest.mark.parametrize(("patch", "policy", "says"), CHANGES)
def test_an_admitted_pod_cannot_be_changed_into_another(
    identities: Identities, running_pod: str, patch: Any, policy: str, says: str
) -> None:
    core = client.CoreV1Api(identities.jobs_ns_admin)
    kind = JSON_PATCH if isinstance(patch, list) else SMP
    status, message = refusal(
        lambda: core.patch_namespaced_pod(running_pod, JOBS_NS, patch, _content_type=kind)
    )
    tally.record("jobs-ns-admin", "Pod updates", status == 422 and policy in message)
    assert (status, policy in message) == (422, True), message
    assert says in message


def test_an_admitted_pod_still_takes_a_cni_annotation_and_loses_its_finalizer(
    admin: client.ApiClient, job_controller: client.ApiClient, running_pod: str
) -> None:
    """What a CNI plugin (Calico's pod IP annotation) and the Job controller do stays possible."""
    note = {"metadata": {"annotations": {"cni.projectcalico.org/podIP": "10.42.0.7/32"}}}
    client.CoreV1Api(admin).patch_namespaced_pod(
        running_pod, JOBS_NS, note, _content_type=MERGE_PATCH
    )
    client.CoreV1Api(job_controller).patch_namespaced_pod(
        running_pod, JOBS_NS, {"metadata": {"finalizers": None}}, _content_type=MERGE_PATCH
    )
    stored = client.CoreV1Api(admin).read_namespaced_pod(running_pod, JOBS_NS)
    assert stored.metadata.annotations["cni.projectcalico.org/podIP"] == "10.42.0.7/32"
    assert not stored.metadata.finalizers


def test_no_ephemeral_container_joins_a_privileged_pod(
    identities: Identities, admin: client.ApiClient, running_pod: str
) -> None:
    """The namespace admin has no such right (RBAC); a cluster admin meets the gate."""
    debug = {
        "spec": {
            "ephemeralContainers": [
                {
                    "name": "debug",
                    "image": "busybox:1.36",
                    "command": SHELL,
                    "targetContainerName": "evidence",
                }
            ]
        }
    }

    def attach(api: client.ApiClient) -> object:
        return client.CoreV1Api(api).patch_namespaced_pod_ephemeralcontainers(
            running_pod, JOBS_NS, debug, _content_type=SMP
        )

    status, message = refusal(lambda: attach(identities.jobs_ns_admin))
    tally.record("jobs-ns-admin", "Pod updates", status == 403)
    assert status == 403 and 'cannot patch resource "pods/ephemeralcontainers"' in message
    status, message = refusal(lambda: attach(admin))
    tally.record("cluster-admin", "Pod updates", status == 422 and GATE in message)
    assert (status, GATE in message) == (422, True), message
    assert "no ephemeral (debug) containers in the guard's privileged pods" in message


@pytest.mark.parametrize("verb", ["exec", "attach", "portforward", "proxy"])
def test_no_one_enters_a_privileged_pod(
    identities: Identities, admin: client.ApiClient, running_pod: str, verb: str
) -> None:
    """Even a cluster admin's exec is refused: a shell with hostPID and SYS_ADMIN is root on the
    node. (Admission runs before the API server dials the kubelet, so no kubelet is needed.)"""
    for who, api in (("jobs-ns-admin", identities.jobs_ns_admin), ("cluster-admin", admin)):
        status, message = refusal(lambda: _enter(client.CoreV1Api(api), verb, running_pod))  # noqa: B023
        tally.record(who, "exec/attach/port-forward/proxy", status == 422 and GATE in message)
        assert (status, GATE in message) == (422, True), message
        words = f"no exec, attach, port-forward or proxy into the guard's privileged pods ({verb})"
        assert words in message


def _enter(core: client.CoreV1Api, verb: str, pod: str) -> object:
    if verb == "exec":
        return core.connect_post_namespaced_pod_exec(pod, JOBS_NS, command=["sh"], stdout=True)
    if verb == "attach":
        return core.connect_post_namespaced_pod_attach(pod, JOBS_NS, stdout=True)
    if verb == "proxy":  # the pod's HTTP, through the API server
        return core.connect_get_namespaced_pod_proxy(pod, JOBS_NS)
    return core.connect_post_namespaced_pod_portforward(pod, JOBS_NS, ports="22")


def _workload(kind: str, pod_template: dict[str, Any]) -> dict[str, Any]:
    selector = {"matchLabels": pod_template["metadata"]["labels"]}
    api = (
        "batch/v1"
        if kind == "CronJob"
        else "v1"
        if kind in {"ReplicationController", "PodTemplate"}
        else "apps/v1"
    )
    meta = {"name": f"w-{uuid.uuid4().hex[:8]}", "namespace": JOBS_NS}
    if kind == "PodTemplate":
        return {"apiVersion": api, "kind": kind, "metadata": meta, "template": pod_template}
    if kind == "CronJob":
        spec: dict[str, Any] = {
            "schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": pod_template}},
        }
    elif kind == "ReplicationController":
        spec = {"selector": selector["matchLabels"], "template": pod_template}
    else:
        spec = {"selector": selector, "template": pod_template}
        if kind == "StatefulSet":
            spec["serviceName"] = "x"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    "kind",
    ["CronJob", "Deployment", "ReplicaSet", "StatefulSet", "ReplicationController", "PodTemplate"],
)
def test_no_other_workload_lives_in_the_jobs_namespace(
    identities: Identities, admin: client.ApiClient, kind: str
) -> None:
    """A privileged CronJob or Deployment would make Pods by another controller. (The `admin`
    role grants no PodTemplates: RBAC refuses the namespace admin those, the gate everyone.)
    DaemonSets are the node agent's: tests/apiserver/test_agent_policies.py."""
    template = copy.deepcopy(guard_job("evidence", NODE, "w")["spec"]["template"])
    template["spec"]["restartPolicy"] = "OnFailure" if kind == "CronJob" else "Always"
    template["spec"]["containers"][0]["command"] = SHELL
    template["spec"]["containers"][0]["securityContext"]["privileged"] = True
    for who, api in (("jobs-ns-admin", identities.jobs_ns_admin), ("cluster-admin", admin)):
        status, message = refusal(lambda: create(api, _workload(kind, template)))  # noqa: B023
        if who == "jobs-ns-admin" and kind == "PodTemplate":
            tally.record(who, "other workloads", status == 403)
            assert status == 403 and 'cannot create resource "podtemplates"' in message
            continue
        tally.record(who, "other workloads", status == 422 and GATE in message)
        assert (status, GATE in message) == (422, True), message
        assert f"namespace {JOBS_NS} runs only the guard's Jobs and their Pods; no {kind} " in (
            message
        )


def test_a_privileged_cronjob_in_the_guard_namespace_gets_no_pod(identities: Identities) -> None:
    """The guard namespace's admin may keep CronJobs; Pod Security refuses their Pods."""
    template = copy.deepcopy(guard_job("evidence", NODE, "w")["spec"]["template"])
    template["spec"]["restartPolicy"] = "OnFailure"
    template["spec"]["containers"][0]["command"] = SHELL
    cron = _workload("CronJob", template)
    cron["metadata"]["namespace"] = GUARD_NS
    create(identities.guard_ns_admin, cron)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "cron-", "namespace": GUARD_NS},
        "spec": cron["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    }
    status, message = refusal(lambda: create(identities.guard_ns_admin, pod))
    tally.record("guard-ns-admin", "Pods in gpu-node-guard (restricted)", status == 403)
    assert status == 403 and PSA in message, message


def test_load_test_pod_passes_pod_security_restricted(
    admin: client.ApiClient, jobs: dict[str, dict[str, Any]], namespace: str
) -> None:
    """Admitted where Pod Security enforces `restricted`; the evidence pod, as a control, not."""
    client.CoreV1Api(admin).patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    make_service_account(admin, namespace, "gpu-node-guard-job")  # for ServiceAccount admission
    pods = {}
    for kind in ("loadtest", "evidence"):
        pod = controller_pod(jobs[kind])
        pod["metadata"]["namespace"] = namespace
        pods[kind] = pod
    create(admin, pods["loadtest"], dry_run=True)
    status, message = refusal(lambda: create(admin, pods["evidence"], dry_run=True))
    assert status == 403 and PSA in message and "hostPID" in message, message


def test_the_cronjob_pod_passes_the_guard_namespaces_restricted(
    admin: client.ApiClient, deployed: ControlPlane
) -> None:
    cron = client.BatchV1Api(admin).read_namespaced_cron_job("gpu-node-guard", GUARD_NS)
    template = admin.sanitize_for_serialization(cron.spec.job_template.spec.template)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cycle", "namespace": GUARD_NS},
        "spec": template["spec"],
    }
    try:
        create(admin, pod, dry_run=True)
    except ApiException as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"the CronJob's pod is refused in {GUARD_NS}: {exc.body}")


def long_node(length: int) -> str:
    """A node name of `length` characters (a DNS subdomain of 60-character labels)."""
    name = ("n" * 59 + "." + "a") * 5
    return name[: length - 1] + "z"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length", [92, 253])
def test_a_long_node_names_jobs_and_pods_are_accepted(
    identities: Identities,
    admin: client.ApiClient,
    job_controller: client.ApiClient,
    runtime_class: str,
    kind: JobKind,
    length: int,
) -> None:
    """Node names reach 253 characters, label values 63: the label is guard.jobs.node_label of
    the name and the policies check it by the same rule; nodeName and the annotation are full."""
    from guard.jobs import node_label

    node = long_node(length)
    job = as_dict(create(identities.guard_token, guard_job(kind, node, uuid.uuid4().hex)))
    assert len(job["metadata"]["name"]) <= 57
    assert job["metadata"]["labels"]["gpu-node-guard.io/node"] == node_label(node)
    assert job["metadata"]["annotations"]["gpu-node-guard.io/node"] == node
    pod = as_dict(create(job_controller, controller_pod(job)))
    assert pod["spec"]["nodeName"] == node
    assert pod["metadata"]["labels"]["gpu-node-guard.io/node"] == node_label(node)
    client.CoreV1Api(admin).delete_namespaced_pod(pod["metadata"]["name"], JOBS_NS)
    client.BatchV1Api(admin).delete_namespaced_job(job["metadata"]["name"], JOBS_NS)


def test_a_long_node_names_label_cut_short_is_refused(identities: Identities) -> None:
    node = long_node(92)
    job = guard_job("evidence", node, uuid.uuid4().hex)
    job["metadata"]["labels"]["gpu-node-guard.io/node"] = node[:63].rstrip(".")
    status, message = refusal(lambda: create(identities.guard_token, job))
    assert status == 422 and "'gpu-node-guard-evidence-job'" in message, message
    assert "metadata.labels[gpu-node-guard.io/node] must be the pod's nodeName, or" in message


# ── the load test of one DRA device (guard.plan.device_taint): its GPU by a ResourceClaim ─────
DEVICE_NODE = "gpu-dra-a"


def test_the_device_load_test_job_and_its_pod_are_accepted(
    identities: Identities, admin: client.ApiClient, job_controller: client.ApiClient
) -> None:
    job = as_dict(create(identities.guard_token, guard_device_job(DEVICE_NODE, uuid.uuid4().hex)))
    spec = job["spec"]["template"]["spec"]
    assert "nodeName" not in spec
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": job["metadata"]["name"]}]
    pod = as_dict(create(job_controller, controller_pod(job)))
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == DEVICE_NODE
    client.CoreV1Api(admin).delete_namespaced_pod(pod["metadata"]["name"], JOBS_NS)
    client.BatchV1Api(admin).delete_namespaced_job(job["metadata"]["name"], JOBS_NS)


def _claim_of_another(spec: dict[str, Any]) -> None:
    spec["resourceClaims"][0]["resourceClaimName"] = "someone-elses-claim"


def _two_claims(spec: dict[str, Any]) -> None:
    spec["resourceClaims"].append({"name": "more", "resourceClaimName": "more"})


def _gpu_limit_too(spec: dict[str, Any]) -> None:
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"


def _pinned_too(spec: dict[str, Any]) -> None:
    spec["nodeName"] = DEVICE_NODE


def _other_hostname(spec: dict[str, Any]) -> None:
    spec["nodeSelector"]["kubernetes.io/hostname"] = "another-node"


def _eight_gpus(spec: dict[str, Any]) -> None:
    cmd = spec["containers"][0]["command"]
    cmd[cmd.index("--expected-gpus") + 1] = "8"


def _no_container_claim(spec: dict[str, Any]) -> None:
    del spec["containers"][0]["resources"]["claims"]


def _claim_template(spec: dict[str, Any]) -> None:
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "all-gpus"}]


def _claim_without_shape(spec: dict[str, Any]) -> None:
    """A device-plugin Job with a claim added: the claim shape is all or nothing."""
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "x"}]


@pytest.mark.parametrize(
    "change",
    [
        _claim_of_another,
        _two_claims,
        _gpu_limit_too,
        _pinned_too,
        _other_hostname,
        _eight_gpus,
        _no_container_claim,
        _claim_template,
    ],
)
def test_an_out_of_shape_device_load_test_is_refused(
    identities: Identities, change: Callable[[dict[str, Any]], None]
) -> None:
    job = guard_device_job(DEVICE_NODE, uuid.uuid4().hex)
    change(job["spec"]["template"]["spec"])  # type: ignore[index]
    status, message = refusal(lambda: create(identities.guard_token, job))
    assert status == 422 and "'gpu-node-guard-loadtest-job'" in message, message


def test_a_device_plugin_load_test_may_not_add_a_claim(identities: Identities) -> None:
    job = guard_job("loadtest", DEVICE_NODE, uuid.uuid4().hex)
    _claim_without_shape(job["spec"]["template"]["spec"])
    status, message = refusal(lambda: create(identities.guard_token, job))
    assert status == 422 and "'gpu-node-guard-loadtest-job'" in message, message


def test_a_device_load_test_pod_made_directly_is_refused(
    job_controller: client.ApiClient, identities: Identities
) -> None:
    job = as_dict(create(identities.guard_token, guard_device_job(DEVICE_NODE, uuid.uuid4().hex)))
    pod = controller_pod(job)
    pod["spec"]["nodeName"] = DEVICE_NODE  # pinned past the scheduler, which allocates the claim
    status, message = refusal(lambda: create(job_controller, pod))
    assert status == 422 and "'gpu-node-guard-loadtest-pod'" in message, message
