"""The Job, DaemonSet and Pod allowlists against the real API server's OpenAPI v3 schema: every
field of a Job (its spec, pod template, PodSpec, Container, SecurityContext…), of the node
agent's DaemonSet and of a Pod, recursively, is either allowed with a pinned shape or refused
with a reason in guard/generate/policies/kinds.py and agent.py. A field a future Kubernetes adds
fails this test until someone decides on it."""

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


def undecided(shape: Obj, type_name: str, schemas: Schemas, path: str) -> list[str]:
    """Fields of `type_name` that `shape` neither allows nor refuses, recursively; and fields
    it allows that the type does not have (a typo would otherwise pass as 'allowed')."""
    props: dict[str, Any] = schemas[type_name].get("properties") or {}
    if not props:  # a map (labels, nodeSelector, requests): its keys are data, not fields
        return []
    known = set(shape.fields) | set(shape.refused)
    out = [f"{path}.{p} (neither allowed nor refused)" for p in sorted(props) if p not in known]
    out += [f"{path}.{p} (allowed, but not in the schema)" for p in shape.fields if p not in props]
    for name, field in shape.fields.items():
        inner = field.shape.item if isinstance(field.shape, One) else field.shape
        ref = _ref(props.get(name, {}))
        if isinstance(inner, Obj) and ref:
            out += undecided(inner, ref, schemas, f"{path}.{name}")
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
    refused = {k: v for k, v in pod.refused.items() if k != "hostNetwork"}
    forgetful = Obj(pod.fields, refused)
    assert undecided(forgetful, "io.k8s.api.core.v1.PodSpec", batch, "PodSpec") == [
        "PodSpec.hostNetwork (neither allowed nor refused)"
    ]
