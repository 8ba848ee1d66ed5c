"""Every out-of-shape guard Job (tests/apiserver/shapes.py) is refused, for the guard's real
token and for an admin of each namespace, by the policy meant to refuse it; the guard's own Jobs
are accepted. Real POSTs; a refusal is checked by status, policy name and the policy's words,
and by reading the object back (404)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from guard.jobs import JobKind
from guard.plan.common import trigger_evidence_args
from tests.apiserver import tally
from tests.apiserver.conftest import Identities
from tests.apiserver.kube import (
    GUARD_NS,
    JOBS_NS,
    as_dict,
    controller_pod,
    create,
    guard_job,
    refusal,
)
from tests.apiserver.shapes import CASES, PSA, Case, refusal_for_job

pytestmark = pytest.mark.apiserver

NODE = "gpu-shape-a"  # the policies look at names, not at Node objects
KINDS: list[JobKind] = ["evidence", "loadtest", "conformance", "fence"]


def policy_of(case: Case) -> str:
    name = "gpu-node-guard-jobs-namespace" if case.gate else f"gpu-node-guard-{case.kind}-job"
    return f"ValidatingAdmissionPolicy '{name}'"


def out_of_shape(case: Case) -> dict[str, object]:
    job = guard_job(case.kind, NODE, uuid.uuid4().hex)
    case.change(job)
    return job


def api_of(identities: Identities, who: str) -> client.ApiClient:
    return {
        "guard-token": identities.guard_token,
        "jobs-ns-admin": identities.jobs_ns_admin,
        "guard-ns-admin": identities.guard_ns_admin,
    }[who]


@pytest.mark.parametrize("who", ["guard-token", "jobs-ns-admin"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_out_of_shape_job_is_refused_by_its_policy(
    identities: Identities, admin: client.ApiClient, case: Case, who: str
) -> None:
    job = out_of_shape(case)
    name = job["metadata"].get("name") or ""  # type: ignore[union-attr]
    status, message = refusal(lambda: create(api_of(identities, who), job))
    tally.record(who, "Jobs", status == 422 and policy_of(case) in message)
    assert (status, policy_of(case) in message) == (422, True), message
    assert ": refused: " in message and refusal_for_job(case) in message, message
    if name:
        missing = refusal(lambda: client.BatchV1Api(admin).read_namespaced_job(name, JOBS_NS))
        assert missing[0] == 404


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_guard_namespace_admin_has_no_jobs_namespace(identities: Identities, case: Case) -> None:
    status, message = refusal(lambda: create(identities.guard_ns_admin, out_of_shape(case)))
    tally.record("guard-ns-admin", "Jobs", status == 403)
    assert status == 403, message
    assert 'cannot create resource "jobs" in API group "batch" in the namespace ' in message


@pytest.mark.parametrize("case", [c for c in CASES if c.beyond_restricted], ids=lambda c: c.id)
def test_privileged_variant_never_runs_in_the_guard_namespace(
    identities: Identities, case: Case, runtime_class: str
) -> None:
    """The guard namespace's admin may run Jobs there, but Pod Security `restricted` refuses
    every Pod asking for more: the Pod the Job controller would make is refused."""
    job = out_of_shape(case)
    job["metadata"]["namespace"] = GUARD_NS  # type: ignore[index]
    job["metadata"]["uid"] = str(uuid.uuid4())  # type: ignore[index]
    if "name" not in job["metadata"]:  # type: ignore[operator]
        job["metadata"]["name"] = "gng-ev-x-00000000"  # type: ignore[index]
    pod = controller_pod(job)  # type: ignore[arg-type]
    status, message = refusal(lambda: create(identities.guard_ns_admin, pod))
    tally.record("guard-ns-admin", "Pods in gpu-node-guard (restricted)", status == 403)
    assert status == 403 and PSA in message, message


@pytest.mark.parametrize(
    ("who", "kind"),
    [("guard-token", k) for k in KINDS] + [("jobs-ns-admin", k) for k in KINDS if k != "fence"],
)
def test_the_guards_own_job_is_accepted(
    identities: Identities, admin: client.ApiClient, kind: JobKind, who: str
) -> None:
    job = guard_job(kind, NODE, uuid.uuid4().hex)
    create(api_of(identities, who), job)
    stored = client.BatchV1Api(admin).read_namespaced_job(job["metadata"]["name"], JOBS_NS)
    assert stored.spec.template.spec.node_name == NODE
    rendered = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert stored.spec.template.spec.containers[0].command == rendered
    client.BatchV1Api(admin).delete_namespaced_job(stored.metadata.name, JOBS_NS)


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_changed_after_creation_is_refused(
    identities: Identities, admin: client.ApiClient, kind: JobKind
) -> None:
    """UPDATE is held to the same shape: no scaling up or suspending an admitted Job."""
    job = as_dict(create(identities.guard_token, guard_job(kind, NODE, uuid.uuid4().hex)))
    name = job["metadata"]["name"]
    batch = client.BatchV1Api(identities.jobs_ns_admin)
    status, message = refusal(
        lambda: batch.patch_namespaced_job(name, JOBS_NS, {"spec": {"parallelism": 50}})
    )
    assert status == 422 and f"'gpu-node-guard-{kind}-job'" in message, message
    assert "spec.parallelism must be exactly 1" in message
    client.BatchV1Api(admin).delete_namespaced_job(name, JOBS_NS)


def test_the_guard_token_creates_no_job_outside_the_jobs_namespace(
    identities: Identities, admin: client.ApiClient, namespace: str
) -> None:
    """A stray RoleBinding elsewhere still does not let the guard run Jobs there."""
    rbac = client.RbacAuthorizationV1Api(admin)
    rule = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "jobs"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "jobs"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "gpu-node-guard", "namespace": GUARD_NS}
            ],
        },
    )
    job = guard_job("evidence", NODE, uuid.uuid4().hex)
    job["metadata"]["namespace"] = namespace
    status, message = 403, ""
    for _ in range(300):  # the grant reaches RBAC by informer
        status, message = refusal(lambda: create(identities.guard_token, job, dry_run=True))
        if status != 403:
            break
    assert status == 422 and "ValidatingAdmissionPolicy 'gpu-node-guard-guard-scope'" in message
    assert "refused: the guard creates Jobs only in namespace gpu-node-guard-jobs" in message


@pytest.mark.parametrize("action", ["set", "lift"])
def test_only_the_guard_creates_a_fence_job_even_in_shape(
    identities: Identities, admin: client.ApiClient, action: str
) -> None:
    """A fence Job changes a GPU's compute mode on the host: a jobs-namespace admin's in-shape
    `fence set` would take a healthy GPU out of service with no record of the guard's, and her
    `fence lift` would undo the guard's fence unnoticed. Both are refused; the guard's pass."""
    job = guard_job("fence", NODE, uuid.uuid4().hex)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    command[command.index("set")] = action
    status, message = refusal(lambda: create(identities.jobs_ns_admin, job, dry_run=True))
    assert status == 422 and "'gpu-node-guard-fence-job'" in message, message
    assert "only the guard's ServiceAccount creates fence Jobs" in message, message
    create(identities.guard_token, job, dry_run=True)


@pytest.mark.parametrize(
    "trigger",
    [["gpu-short", "--expected-gpus", "8"], ["admission-rejected"], ["fabric"]],
    ids=["gpu-short", "admission-rejected", "fabric"],
)
def test_a_node_wide_evidence_job_is_the_guards_alone_and_exactly_its_shape(
    identities: Identities, trigger: list[str]
) -> None:
    """A node trigger's evidence Job (`--trigger`, no GPU): the guard's token creates exactly the
    planner's argv; anyone else's in-shape one, and the guard's with a word more, are refused."""
    job = guard_job("evidence", NODE, uuid.uuid4().hex)
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = ["gpu-node-guard", *trigger_evidence_args(NODE, trigger[0], 8)]
    assert command[-len(trigger) :] == trigger
    container["command"] = command
    create(identities.guard_token, job, dry_run=True)
    status, message = refusal(lambda: create(identities.jobs_ns_admin, job, dry_run=True))
    assert status == 422 and "'gpu-node-guard-evidence-job'" in message, message
    assert "only the guard's ServiceAccount creates evidence Jobs with --trigger" in message
    wider = [
        [*command, "--pci", "0000:99:00.0"],
        [*command, "--host-root", "/tmp"],
        [*command[:6], "xid-79"],
        [*command[:4], "control-plane-1", *command[5:]],
        [*command[:6], "gpu-short", "--expected-gpus", "100"],
    ]
    for argv in wider:
        container["command"] = argv
        status, message = refusal(lambda: create(identities.guard_token, job, dry_run=True))
        assert status == 422 and "command must be gpu-node-guard evidence collect" in message, argv
