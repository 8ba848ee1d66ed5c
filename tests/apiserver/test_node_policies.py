"""Node policies on a real kube-apiserver: `hold` blocks every uncordon, and the guard's
ServiceAccount changes nothing on a node but spec.unschedulable and its own annotations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.kube import MERGE_PATCH, refusal

pytestmark = pytest.mark.apiserver

HOLD = "gpu-node-guard.io/hold"
HOLD_TEXT = "3rd Xid 79 on GPU-5f1c: replace the card"
SCOPE_POLICY = "ValidatingAdmissionPolicy 'gpu-node-guard-node-scope'"
FOREIGN = {"team.example.com/owner": "ml-platform"}
TAINT = {"key": "gpu-node-guard.io/fault", "effect": "NoSchedule"}
GUARD_CORDON = {
    "gpu-node-guard.io/auto-cordon-reason": "xid-79",
    "gpu-node-guard.io/auto-cordon-at": "2026-03-02T04:10:00Z",
    "gpu-node-guard.io/auto-cordon-gpu": "0000:99:00.0 GPU-5f1c",
}


def patch(api: client.ApiClient, node: str, body: dict[str, Any]) -> client.V1Node:
    return client.CoreV1Api(api).patch_node(node, body, _content_type=MERGE_PATCH)


def is_cordoned(admin: client.ApiClient, node: str) -> bool:
    return bool(client.CoreV1Api(admin).read_node(node).spec.unschedulable)


@pytest.fixture(params=["admin", "guard"])
def sender(request: pytest.FixtureRequest, deployed: object) -> client.ApiClient:
    """Whoever sends the uncordon: a cluster admin or the guard's ServiceAccount."""
    api: client.ApiClient = request.getfixturevalue(request.param)
    return api


@pytest.mark.parametrize(
    "uncordon",
    [
        pytest.param({"spec": {"unschedulable": False}}, id="unschedulable-false"),
        pytest.param({"spec": {"unschedulable": None}}, id="unschedulable-removed"),
        pytest.param({"spec": {"unschedulable": False},
                      "metadata": {"annotations": {HOLD: None}}}, id="hold-removed-in-same-write"),
    ],
)  # fmt: skip
def test_uncordon_is_refused_while_hold_is_set(
    sender: client.ApiClient,
    admin: client.ApiClient,
    make_node: Callable[..., str],
    uncordon: dict[str, Any],
) -> None:
    node = make_node(unschedulable=True, annotations={HOLD: HOLD_TEXT})
    status, message = refusal(lambda: patch(sender, node, uncordon))
    assert status == 422
    assert "ValidatingAdmissionPolicy 'gpu-node-guard-hold'" in message
    assert f'node {node}: uncordon refused: annotation {HOLD} is set ("{HOLD_TEXT}")' in message
    assert f"kubectl annotate node {node} {HOLD}-" in message
    assert is_cordoned(admin, node)


def test_uncordon_is_allowed_once_hold_is_removed(
    admin: client.ApiClient, make_node: Callable[..., str], deployed: object
) -> None:
    node = make_node(unschedulable=True, annotations={HOLD: HOLD_TEXT})
    patch(admin, node, {"metadata": {"annotations": {HOLD: None}}})
    assert is_cordoned(admin, node)
    patch(admin, node, {"spec": {"unschedulable": False}})
    assert not is_cordoned(admin, node)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"metadata": {"labels": {"rack": "r12"}}}, id="label"),
        pytest.param({"metadata": {"annotations": {"gpu-node-guard.io/reset-done": "yes"}}},
                     id="annotation"),
        pytest.param({"spec": {"unschedulable": True}}, id="cordon-again"),
    ],
)  # fmt: skip
def test_other_writes_to_a_held_node_are_allowed(
    admin: client.ApiClient, make_node: Callable[..., str], deployed: object, change: dict[str, Any]
) -> None:
    node = make_node(unschedulable=True, annotations={HOLD: HOLD_TEXT})
    patch(admin, node, change)
    stored = client.CoreV1Api(admin).read_node(node)
    assert stored.spec.unschedulable is True
    assert stored.metadata.annotations[HOLD] == HOLD_TEXT


def test_guard_cordons_with_its_annotations_in_one_write(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    node = make_node(annotations=FOREIGN)
    version = client.CoreV1Api(admin).read_node(node).metadata.resource_version
    body = {
        "metadata": {"resourceVersion": version, "annotations": GUARD_CORDON},
        "spec": {"unschedulable": True},
    }
    patch(guard, node, body)
    stored = client.CoreV1Api(admin).read_node(node)
    assert stored.spec.unschedulable is True
    assert stored.metadata.annotations == {**FOREIGN, **GUARD_CORDON}
    assert stored.metadata.labels == {"nvidia.com/gpu.present": "true"}
    clear = {key: None for key in GUARD_CORDON}
    patch(guard, node, {"metadata": {"annotations": clear}, "spec": {"unschedulable": False}})
    assert client.CoreV1Api(admin).read_node(node).metadata.annotations == FOREIGN


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param({"metadata": {"labels": {"gpu-node-guard.io/faulty": "true"}}},
                     "may not change labels (gpu-node-guard.io/faulty)", id="add-label"),
        pytest.param({"metadata": {"labels": {"nvidia.com/gpu.present": None}}},
                     "may not change labels (nvidia.com/gpu.present)", id="remove-label"),
        pytest.param({"spec": {"unschedulable": True, "taints": [TAINT]}},
                     "may not change taints", id="cordon-with-taint"),
        pytest.param({"metadata": {"annotations": {"example.com/note": "guard"}}},
                     "may not change annotation(s) example.com/note", id="add-foreign-annotation"),
        pytest.param({"metadata": {"annotations": {"team.example.com/owner": None}}},
                     "may not change annotation(s) team.example.com/owner",
                     id="remove-foreign-annotation"),
        pytest.param({"metadata": {"annotations": {"gpu-node-guard.io.evil/x": "1"}}},
                     "may not change annotation(s) gpu-node-guard.io.evil/x",
                     id="lookalike-annotation-prefix"),
        pytest.param({"spec": {"providerID": "guard://gpu-node"}},
                     "may change only spec.unschedulable in the node spec", id="other-spec-field"),
    ],
)  # fmt: skip
def test_guard_changes_nothing_else_on_a_node(
    guard: client.ApiClient,
    admin: client.ApiClient,
    make_node: Callable[..., str],
    change: dict[str, Any],
    expected: str,
) -> None:
    node = make_node(annotations=FOREIGN)
    before = client.CoreV1Api(admin).read_node(node)
    status, message = refusal(lambda: patch(guard, node, change))
    assert (status, SCOPE_POLICY in message) == (422, True), message
    assert f"node {node}: refused: the guard may" in message
    assert expected in message
    after = client.CoreV1Api(admin).read_node(node)
    assert after.metadata.resource_version == before.metadata.resource_version


def test_people_may_still_relabel_and_taint_nodes(
    admin: client.ApiClient, make_node: Callable[..., str], deployed: object
) -> None:
    node = make_node(annotations=FOREIGN)
    taint = {"key": "maintenance", "effect": "NoSchedule"}
    patch(admin, node, {"metadata": {"labels": {"rack": "r12"}}, "spec": {"taints": [taint]}})
    stored = client.CoreV1Api(admin).read_node(node)
    assert stored.metadata.labels["rack"] == "r12"
    assert [t.key for t in stored.spec.taints] == ["maintenance"]
