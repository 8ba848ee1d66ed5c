"""The Job, DaemonSet and Pod allowlists against the real API server's OpenAPI v3 schema: every
field of a Job (its spec, pod template, PodSpec, Container, SecurityContext…), of the node
agent's DaemonSet and of a Pod, recursively, is either allowed with a pinned shape
(guard/generate/policies/kinds.py and agent.py) or refused with a reason here. A field a future
Kubernetes adds fails this test until someone decides on it."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from guard.generate.policies import agent
from guard.generate.policies.kinds import KINDS, Kind, job_shape, pod_shape
from guard.generate.policies.shape import Obj, One
from guard.settings import Settings
from tests.apiserver.kube import ADMIN_TOKEN, ControlPlane

pytestmark = pytest.mark.apiserver

Schemas = dict[str, Any]
Refused = dict[str, dict[str, str]]

# Fields a guard Job, its Pods, the agent's DaemonSet or its Pods may not carry where their shape
# does not allow them, each with its reason, by the schema type that has them.
CONTAINER_REFUSED = {
    "args": "the whole argv is in command, matched word by word",
    "envFrom": "would import a Secret or ConfigMap a namespace admin controls",
    "lifecycle": "postStart/preStop hooks run arbitrary commands in the privileged container",
    **dict.fromkeys(
        ("livenessProbe", "readinessProbe", "startupProbe"), "exec probes run arbitrary commands"
    ),
    "ports": "the guard's programs serve nothing (hostPort would bind the node)",
    "resizePolicy": "resources are pinned",
    "restartPolicy": "no sidecars",
    "restartPolicyRules": "no restarts",
    **dict.fromkeys(("stdin", "stdinOnce", "tty"), "no interactive session"),
    "volumeDevices": "no block devices",
    "workingDir": "the image's own",
}
POD_REFUSED = {
    "activeDeadlineSeconds": "the Job's deadline bounds the pod",
    "affinity": "placement is nodeName plus the GPU nodeSelector",
    "dnsConfig": "cluster DNS only",
    "ephemeralContainers": "no debug containers in a privileged pod",
    "hostAliases": "no /etc/hosts edits",
    **dict.fromkeys(("hostIPC", "hostNetwork"), "never"),
    "hostUsers": "the host-reading kinds need the host user namespace; the rest inherit it",
    **dict.fromkeys(("hostname", "hostnameOverride", "setHostnameAsFQDN"), "the pod's own"),
    "initContainers": "one container only",
    "os": "Linux, implied",
    "overhead": "set by RuntimeClass admission, which is refused",
    "priorityClassName": "no priority above other pods (system-node-critical…)",
    "readinessGates": "not a Service backend",
    "resourceClaims": "no devices beyond the GPU resource",
    "resources": "container resources only",
    "runtimeClassName": "the node's default runtime",
    "schedulingGates": "not scheduled (nodeName)",
    "shareProcessNamespace": "one container",
    "subdomain": "no headless Service",
    "topologySpreadConstraints": "placement is nodeName",
}
JOB_SPEC_REFUSED = {
    "backoffLimitPerIndex": "NonIndexed, no retries",
    "managedBy": "only the built-in Job controller runs the guard's Jobs",
    "maxFailedIndexes": "NonIndexed",
    "podFailurePolicy": "no retries to steer",
    "successPolicy": "NonIndexed",
}
META_REFUSED = {
    "generateName": "the guard names its Jobs",
    "ownerReferences": "top-level objects (no CronJob or other owner)",
    "selfLink": "deprecated, never set",
}
_NOT_IN_A_TEMPLATE = (
    "creationTimestamp deletionGracePeriodSeconds deletionTimestamp finalizers generation"
    " managedFields resourceVersion uid"
)
TEMPLATE_META_REFUSED = {
    "annotations": "none (AppArmor, CNI and runtime annotations change the pod)",
    **dict.fromkeys(_NOT_IN_A_TEMPLATE.split(), "not part of a template"),
    **dict.fromkeys(("generateName", "name", "ownerReferences"), "set by the Job controller"),
    "namespace": "the Job's",
    "selfLink": "deprecated, never set",
}
# Refused only where a shape does not allow them (a kind without the host or the files, the
# template against a created Pod, the agent against a Job).
CONTAINER_REFUSED |= {
    **dict.fromkeys(("env", "volumeMounts"), "none for the host readers (no LD_PRELOAD, PATH …)"),
}
POD_REFUSED |= {
    "affinity": "placement is nodeName (the agent: its nodeSelector; the controller adds the node)",
    "hostPID": "only the host-reading kinds (evidence, conformance, fence)",
    "nodeName": "the agent's: the DaemonSet controller and the scheduler place each pod",
    "preemptionPolicy": "set by admission",
    "priority": "set by admission from priorityClassName (refused)",
    "volumes": "none for the load test (no hostPath, ConfigMap, Secret, projected …)",
}
REFUSED = {
    "io.k8s.api.core.v1.Container": CONTAINER_REFUSED,
    "io.k8s.api.core.v1.PodSpec": POD_REFUSED,
    "io.k8s.api.batch.v1.JobSpec": JOB_SPEC_REFUSED,
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": META_REFUSED | TEMPLATE_META_REFUSED,
    "io.k8s.api.core.v1.Probe": {
        "exec": "runs a command in the container",
        **dict.fromkeys(("tcpSocket", "grpc"), "the agent answers GET /healthz"),
        "terminationGracePeriodSeconds": "the pod's grace period applies",
    },
    "io.k8s.api.core.v1.HTTPGetAction": {
        "host": "the kubelet probes the pod itself",
        "httpHeaders": "none needed",
    },
}


def openapi(plane: ControlPlane, path: str) -> Schemas:
    answer = requests.get(
        f"{plane.url}/openapi/v3/{path}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        verify=str(plane.ca_file),
        timeout=30,
    )
    answer.raise_for_status()
    schemas: Schemas = answer.json()["components"]["schemas"]
    return schemas


def _ref(prop: dict[str, Any]) -> str | None:
    """The object type a property holds (directly, through allOf, or as array items)."""
    for candidate in (prop, prop.get("items") or {}):
        ref = candidate.get("$ref") or next(
            (a["$ref"] for a in candidate.get("allOf", []) if "$ref" in a), None
        )
        if ref:
            return str(ref).rsplit("/", 1)[-1]
    return None


def undecided(
    shape: Obj, type_name: str, schemas: Schemas, path: str, refused: Refused = REFUSED
) -> list[str]:
    """Fields of `type_name` that `shape` neither allows nor refuses, recursively; and fields
    it allows that the type does not have (a typo would otherwise pass as 'allowed')."""
    props: dict[str, Any] = schemas[type_name].get("properties") or {}
    if not props:  # a map (labels, nodeSelector, requests): its keys are data, not fields
        return []
    known = set(shape.fields) | set(refused.get(type_name, {}))
    out = [f"{path}.{p} (neither allowed nor refused)" for p in sorted(props) if p not in known]
    out += [f"{path}.{p} (allowed, but not in the schema)" for p in shape.fields if p not in props]
    for name, field in shape.fields.items():
        inner = field.shape.item if isinstance(field.shape, One) else field.shape
        ref = _ref(props.get(name, {}))
        if isinstance(inner, Obj) and ref:
            out += undecided(inner, ref, schemas, f"{path}.{name}", refused)
    return out


def walked(shape: Obj, type_name: str, schemas: Schemas) -> set[str]:
    """The schema types the walk reached (to prove it went all the way down)."""
    seen = {type_name}
    props = schemas[type_name].get("properties") or {}
    for name, field in shape.fields.items():
        inner = field.shape.item if isinstance(field.shape, One) else field.shape
        ref = _ref(props.get(name, {}))
        if isinstance(inner, Obj) and ref:
            seen |= walked(inner, ref, schemas)
    return seen


@pytest.fixture(scope="module")
def batch(apiserver: ControlPlane) -> Schemas:
    return openapi(apiserver, "apis/batch/v1")


@pytest.fixture(scope="module")
def core(apiserver: ControlPlane) -> Schemas:
    return openapi(apiserver, "api/v1")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_job_field_is_decided(batch: Schemas, kind: Kind) -> None:
    shape = job_shape(kind, Settings())
    assert undecided(shape, "io.k8s.api.batch.v1.Job", batch, "Job") == []
    reached = walked(shape, "io.k8s.api.batch.v1.Job", batch)
    assert {
        "io.k8s.api.batch.v1.JobSpec",
        "io.k8s.api.core.v1.PodTemplateSpec",
        "io.k8s.api.core.v1.PodSpec",
        "io.k8s.api.core.v1.Container",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    } <= reached


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_pod_field_is_decided(core: Schemas, kind: Kind) -> None:
    shape = pod_shape(kind, Settings())
    assert undecided(shape, "io.k8s.api.core.v1.Pod", core, "Pod") == []
    assert "io.k8s.api.core.v1.PodSpec" in walked(shape, "io.k8s.api.core.v1.Pod", core)


@pytest.fixture(scope="module")
def apps(apiserver: ControlPlane) -> Schemas:
    return openapi(apiserver, "apis/apps/v1")


def test_every_agent_daemonset_field_is_decided(apps: Schemas) -> None:
    shape = agent.daemonset_shape(Settings())
    assert undecided(shape, "io.k8s.api.apps.v1.DaemonSet", apps, "DaemonSet") == []
    reached = walked(shape, "io.k8s.api.apps.v1.DaemonSet", apps)
    assert {
        "io.k8s.api.apps.v1.DaemonSetSpec",
        "io.k8s.api.apps.v1.DaemonSetUpdateStrategy",
        "io.k8s.api.core.v1.PodSpec",
        "io.k8s.api.core.v1.Container",
        "io.k8s.api.core.v1.Probe",
        "io.k8s.api.core.v1.HTTPGetAction",
    } <= reached


def test_every_agent_pod_field_is_decided(core: Schemas) -> None:
    shape = agent.pod_shape(Settings())
    assert undecided(shape, "io.k8s.api.core.v1.Pod", core, "Pod") == []
    assert "io.k8s.api.core.v1.Probe" in walked(shape, "io.k8s.api.core.v1.Pod", core)


def test_the_check_finds_a_field_nobody_decided_on(batch: Schemas) -> None:
    """What a new Kubernetes field looks like to this test: PodSpec.hostNetwork forgotten."""
    shape = job_shape(KINDS[0], Settings())
    spec = shape.fields["spec"].shape
    assert isinstance(spec, Obj)
    template = spec.fields["template"].shape
    assert isinstance(template, Obj)
    pod = template.fields["spec"].shape
    assert isinstance(pod, Obj)
    forgetful = {**REFUSED, "io.k8s.api.core.v1.PodSpec": dict(POD_REFUSED)}
    del forgetful["io.k8s.api.core.v1.PodSpec"]["hostNetwork"]
    assert undecided(pod, "io.k8s.api.core.v1.PodSpec", batch, "PodSpec", forgetful) == [
        "PodSpec.hostNetwork (neither allowed nor refused)"
    ]
