"""The node agent's DaemonSet on a real node: made by the real DaemonSet controller, bound by the
real scheduler, its hostPaths mounted by the kubelet on a host without systemd-resolved, ready
once the agent answers its probe."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from kubernetes import client

from tests.apiserver.kube import JOBS_NS
from tests.node.jobs import MEASURED, wait_for
from tests.node.node import Node

pytestmark = pytest.mark.node
AGENT = "app.kubernetes.io/component=agent"


def _ready_agent(admin: client.ApiClient, node: str) -> dict[str, Any] | None:
    found = client.CoreV1Api(admin).list_namespaced_pod(JOBS_NS, label_selector=AGENT)
    for pod in (admin.sanitize_for_serialization(p) for p in found.items):
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if pod["spec"].get("nodeName") == node and statuses and statuses[0].get("ready"):
            return dict(pod)
    return None


def test_the_agent_becomes_ready_on_the_node(node: Node, admin: client.ApiClient) -> None:
    began = time.monotonic()
    pod = wait_for("a Ready agent Pod on the node", lambda: _ready_agent(admin, node.name))
    MEASURED.append(("agent", {"Ready after the test began": time.monotonic() - began}))
    owners = [(o["kind"], o["name"]) for o in pod["metadata"]["ownerReferences"]]
    assert owners == [("DaemonSet", "gpu-node-guard-agent")]
    metrics = requests.get(f"http://{pod['status']['podIP']}:9842/metrics", timeout=10)
    assert metrics.status_code == 200
    assert "gpu_node_guard_agent" in metrics.text
