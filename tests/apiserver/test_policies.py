"""The admission policies in policies/, on a real kube-apiserver, against the guard's real Jobs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from guard.jobs import JobKind
from guard.settings import Settings
from tests.apiserver.kube import create, guard_job, kustomize_documents, refusal

pytestmark = pytest.mark.apiserver

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-node-guard"
JOB_POLICY = "ValidatingAdmissionPolicy 'gpu-node-guard-job-shape'"
POD = ("spec", "template", "spec")
C0 = (*POD, "containers", 0)
COMPONENT = "app.kubernetes.io/component"
DELETE = object()
GUARD_IMAGE = Settings().image
OTHER = {
    "name": "extra",
    "image": GUARD_IMAGE,
    "command": ["gpu-node-guard", "evidence", "collect"],
}


def set_path(doc: Any, path: tuple[str | int, ...], value: object) -> None:
    """Set (or with DELETE remove) doc[path]; a list index one past the end appends."""
    for key in path[:-1]:
        doc = doc.setdefault(key, {}) if isinstance(key, str) else doc[key]
    last = path[-1]
    if value is DELETE:
        del doc[last]
    elif isinstance(last, int) and last == len(doc):
        doc.append(value)
    else:
        doc[last] = value


def unique() -> str:
    return uuid.uuid4().hex[:8]


@pytest.mark.parametrize("kind", ["evidence", "loadtest", "conformance"])
def test_every_rendered_job_is_accepted(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str], kind: JobKind
) -> None:
    node = make_node(unschedulable=True)
    job = guard_job(kind, node, unique())
    create(guard, job)
    stored = client.BatchV1Api(admin).read_namespaced_job(job["metadata"]["name"], NS)
    container = stored.spec.template.spec.containers[0]
    assert stored.spec.template.spec.node_name == node
    assert container.command == job["spec"]["template"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize(
    ("kind", "path", "value", "expected"),
    [
        pytest.param("evidence", (*C0, "securityContext", "privileged"), True,
                     "privileged containers are never allowed", id="privileged"),
        pytest.param("evidence", (*C0, "securityContext", "capabilities", "add"),
                     ["SYS_ADMIN", "NET_ADMIN"],
                     "capabilities add [SYS_ADMIN, NET_ADMIN] goes beyond", id="extra-capability"),
        pytest.param("loadtest", (*C0, "securityContext", "capabilities", "add"), ["SYS_PTRACE"],
                     "a loadtest Job may not add capabilities", id="capability-on-loadtest"),
        pytest.param("evidence", (*POD, "volumes"), [{"name": "host", "hostPath": {"path": "/"}}],
                     "hostPath volume(s) host not allowed", id="hostpath-volume"),
        pytest.param("evidence", (*C0, "image"), "docker.io/library/busybox:1.36",
                     "image docker.io/library/busybox:1.36 is not one of the allowed images",
                     id="other-image"),
        pytest.param("evidence", (*POD, "nodeName"), DELETE,
                     "nodeName must name the node the Job inspects", id="no-node-name"),
        pytest.param("loadtest", (*POD, "hostPID"), True,
                     "hostPID is allowed only for evidence and conformance Jobs, not for a "
                     "loadtest", id="hostpid-on-loadtest"),
        pytest.param("evidence", ("spec", "activeDeadlineSeconds"), DELETE,
                     "activeDeadlineSeconds must be set, between 1 and 3600 (got 0)",
                     id="missing-deadline"),
        pytest.param("loadtest", ("spec", "activeDeadlineSeconds"), 86400,
                     "activeDeadlineSeconds must be set, between 1 and 3600 (got 86400)",
                     id="deadline-too-long"),
        pytest.param("evidence", ("spec", "ttlSecondsAfterFinished"), DELETE,
                     "ttlSecondsAfterFinished must be set, between 1 and 2592000 (got 0)",
                     id="missing-ttl"),
        pytest.param("evidence", (*POD, "containers", 1), OTHER,
                     "exactly one container and no init or ephemeral containers allowed "
                     "(got 2 container(s), 0 init container(s))", id="extra-container"),
        pytest.param("evidence", (*POD, "initContainers"), [OTHER],
                     "(got 1 container(s), 1 init container(s))", id="init-container"),
        pytest.param("evidence", (*C0, "command"), ["sh", "-c", "cat /proc/1/root/etc/shadow"],
                     'component evidence must run "gpu-node-guard evidence collect ..." '
                     '(got "sh -c cat /proc/1/root/etc/shadow")', id="different-command"),
        pytest.param("loadtest", (*C0, "command"), ["gpu-node-guard", "evidence", "collect"],
                     'component loadtest must run "gpu-node-guard loadtest run ..." '
                     '(got "gpu-node-guard evidence collect")',
                     id="command-of-another-component"),
        pytest.param("evidence", (*POD, "hostNetwork"), True,
                     "hostNetwork and hostIPC are never allowed", id="host-network"),
        pytest.param("conformance", (*POD, "hostIPC"), True,
                     "hostNetwork and hostIPC are never allowed", id="host-ipc"),
        pytest.param("evidence", ("metadata", "labels", COMPONENT), "debug",
                     'app.kubernetes.io/component=evidence, loadtest or conformance '
                     '(got component "debug")', id="unknown-component-label"),
        pytest.param("evidence", ("spec", "template", "metadata", "labels", COMPONENT), "loadtest",
                     "the Job and its pod template must be labelled", id="pod-label-disagrees"),
        pytest.param("conformance", ("metadata", "labels", "app.kubernetes.io/name"), DELETE,
                     "must be labelled app.kubernetes.io/name=gpu-node-guard",
                     id="missing-name-label"),
        pytest.param("evidence", (*POD, "serviceAccountName"), "gpu-node-guard",
                     "must run as ServiceAccount gpu-node-guard-job with "
                     'automountServiceAccountToken: false (got "gpu-node-guard")',
                     id="runs-as-the-guard"),
        pytest.param("loadtest", (*POD, "automountServiceAccountToken"), True,
                     "with automountServiceAccountToken: false", id="mounts-a-token"),
    ],
)  # fmt: skip
def test_out_of_shape_job_is_refused(
    guard: client.ApiClient,
    admin: client.ApiClient,
    make_node: Callable[..., str],
    kind: JobKind,
    path: tuple[str | int, ...],
    value: object,
    expected: str,
) -> None:
    job = guard_job(kind, make_node(unschedulable=True), unique())
    set_path(job, path, value)
    name = job["metadata"]["name"]
    status, message = refusal(lambda: create(guard, job))
    assert (status, JOB_POLICY in message) == (422, True), message
    assert f"Job gpu-node-guard/{name}: refused: " in message
    assert expected in message
    assert refusal(lambda: client.BatchV1Api(admin).read_namespaced_job(name, NS))[0] == 404


def test_job_in_another_namespace_is_refused_even_with_rbac(
    guard: client.ApiClient, admin: client.ApiClient, namespace: str
) -> None:
    """A mistaken RoleBinding elsewhere still does not let the guard run Jobs there."""
    rbac = client.RbacAuthorizationV1Api(admin)
    rule = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "jobs"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "jobs"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "gpu-node-guard", "namespace": "gpu-node-guard"}
            ],
        },
    )
    job = guard_job("evidence", "gpu-node-a", unique())
    job["metadata"]["namespace"] = namespace
    status, message = 403, ""
    deadline = time.monotonic() + 30
    while status == 403 and time.monotonic() < deadline:  # the grant reaches RBAC by informer
        status, message = refusal(lambda: create(guard, job, dry_run=True))
        time.sleep(0.1)
    assert status == 422 and JOB_POLICY in message, message
    assert "refused: the guard creates Jobs only in namespace gpu-node-guard" in message


def test_other_users_jobs_are_not_shape_locked(
    admin: client.ApiClient, namespace: str, deployed: object
) -> None:
    job = guard_job("evidence", "gpu-node-a", unique())
    job["metadata"]["namespace"] = namespace
    set_path(job, (*C0, "securityContext", "privileged"), True)
    create(admin, job)
    stored = client.BatchV1Api(admin).read_namespaced_job(job["metadata"]["name"], namespace)
    assert stored.spec.template.spec.containers[0].security_context.privileged is True


@pytest.mark.parametrize("name", ["gpu-node-guard-policy-params-2", "anything"])
def test_guard_writes_no_configmap_but_its_ledger(guard: client.ApiClient, name: str) -> None:
    body = {"metadata": {"name": name}, "data": {"images": "registry.invalid/mine:1"}}
    status, message = refusal(
        lambda: client.CoreV1Api(guard).create_namespaced_config_map("gpu-node-guard", body)
    )
    assert status == 422
    assert "may write only its ledger ConfigMap gpu-fault-ledger" in message


def test_policy_params_list_the_images_the_guard_renders() -> None:
    """The params object, the CronJob's image settings and the guard's defaults agree."""
    params = yaml.safe_load((REPO / "policies" / "params.yaml").read_text())
    cronjob = next(d for d in kustomize_documents(REPO / "manifests") if d["kind"] == "CronJob")
    env = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    settings = Settings()
    allowed = set(params["data"]["images"].split(","))
    assert allowed == {settings.image, settings.loadtest_image}
    assert {
        e["value"] for e in env if e["name"] in {"GUARD_IMAGE", "GUARD_LOADTEST_IMAGE"}
    } == allowed
    assert params["data"]["jobServiceAccount"] == settings.job_service_account
    assert params["data"]["namespace"] == settings.namespace
