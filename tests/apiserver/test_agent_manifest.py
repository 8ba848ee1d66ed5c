"""The node agent's manifests on the real kube-apiserver: its schema takes them field for field,
and Pod Security `restricted` finds nothing wrong with the agent's pod except its host paths."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.apiserver.conftest import make_service_account
from tests.apiserver.kube import api_error

pytestmark = pytest.mark.apiserver
AGENT = Path(__file__).resolve().parents[2] / "manifests" / "agent"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((AGENT / name).read_text(encoding="utf-8"))
    return doc


@pytest.fixture
def labelled_namespace(admin: client.ApiClient) -> Iterator[str]:
    name = f"t-agent-{uuid.uuid4().hex[:8]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name, "labels": labels}})
    yield name
    client.CoreV1Api(admin).delete_namespace(name)


def test_the_api_server_takes_every_field(admin: client.ApiClient, namespace: str) -> None:
    # Strict field validation refuses any field the schema does not know (a typo, a wrong level).
    account, daemonset = load("serviceaccount.yaml"), load("daemonset.yaml")
    for doc in (account, daemonset):
        doc["metadata"]["namespace"] = namespace
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    core.create_namespaced_service_account(
        namespace, account, dry_run="All", field_validation="Strict"
    )
    created = apps.create_namespaced_daemon_set(
        namespace, daemonset, dry_run="All", field_validation="Strict"
    )
    container = created.spec.template.spec.containers[0]
    assert container.security_context.capabilities.drop == ["ALL"]
    assert all(m.read_only for m in container.volume_mounts)


def test_restricted_pod_security_objects_only_to_the_host_paths(
    admin: client.ApiClient, labelled_namespace: str
) -> None:
    template = copy.deepcopy(load("daemonset.yaml")["spec"]["template"])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent", "namespace": labelled_namespace, **template["metadata"]},
        "spec": {**template["spec"], "nodeName": "gpu-node-b"},
    }
    account = template["spec"]["serviceAccountName"]  # for ServiceAccount admission
    make_service_account(admin, labelled_namespace, account)
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(admin).create_namespaced_pod(labelled_namespace, pod, dry_run="All")
    status, message = api_error(refused.value)
    violations = message.split('violates PodSecurity "restricted:latest": ', 1)[1]
    assert status == 403
    assert violations.startswith("restricted volume types"), violations
    assert violations.count("; ") == 0, violations  # nothing else: user, caps, seccomp, escalation
    for volume in ("host-sys-module", "host-usr", "host-resolv-conf", "host-systemd-resolve"):
        assert volume in violations
