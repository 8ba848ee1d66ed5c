"""Node policies on a real kube-apiserver, rule by rule: `hold` blocks every uncordon, and the
guard's ServiceAccount writes nothing on a node but its own cordon, uncordon and annotations
(policies/node-scope.yaml, generated from guard.names.Annotations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from guard.names import Annotations
from tests.apiserver.kube import MERGE_PATCH, refusal

pytestmark = pytest.mark.apiserver

K = Annotations("gpu-node-guard.io/")
HOLD = K.hold
HOLD_TEXT = "3rd Xid 79 on GPU-5f1c: replace the card"
SCOPE_POLICY = "ValidatingAdmissionPolicy 'gpu-node-guard-node-scope'"
FOREIGN = {"team.example.com/owner": "ml-platform"}
TAINT = {"key": "gpu-node-guard.io/fault", "effect": "NoSchedule"}
GUARD_CORDON = {
    K.reason: "xid-79",
    K.at: "2026-03-02T04:10:00Z",
    K.boot_id: "boot-1",
    K.gpu_capacity: "8",
    K.gpu: "0000:99:00.0 GPU-5f1c",
}
CLEARED = dict.fromkeys(GUARD_CORDON)
CHECKED = "boot-1 2026-03-02T06:00:00Z job/gng-cf-x-00000000"
LINKS = "0000:18:00.0=16GT/s,x16"


def patch(api: client.ApiClient, node: str, body: Any, kind: str = MERGE_PATCH) -> client.V1Node:
    return client.CoreV1Api(api).patch_node(node, body, _content_type=kind)


def is_cordoned(admin: client.ApiClient, node: str) -> bool:
    return bool(client.CoreV1Api(admin).read_node(node).spec.unschedulable)


@pytest.fixture(params=["admin", "guard"])
def sender(request: pytest.FixtureRequest, deployed: object) -> tuple[str, client.ApiClient]:
    """Whoever sends the uncordon: a cluster admin or the guard's ServiceAccount."""
    api: client.ApiClient = request.getfixturevalue(request.param)
    return request.param, api


def refused_for_the_hold(who: str, node: str, message: str) -> bool:
    """The hold policy refuses everyone; for the guard, node scope refuses too (either answers)."""
    by_hold = (
        "ValidatingAdmissionPolicy 'gpu-node-guard-hold'" in message
        and (
            f'node {node}: refused: uncordon while annotation {HOLD} is set ("{HOLD_TEXT}")'
            f". Remove the annotation first (kubectl annotate node {node} {HOLD}-), then uncordon."
        )
        in message
    )
    by_scope = SCOPE_POLICY in message and (
        f"and without {HOLD}" in message or "never change or remove one already set" in message
    )
    return by_hold or (who == "guard" and by_scope)


@pytest.mark.parametrize(
    "uncordon",
    [
        pytest.param({"spec": {"unschedulable": False}}, id="unschedulable-false"),
        pytest.param({"spec": {"unschedulable": None}}, id="unschedulable-removed"),
        pytest.param(
            {"spec": {"unschedulable": False}, "metadata": {"annotations": {HOLD: None}}},
            id="hold-removed-in-same-write",
        ),
    ],
)
def test_uncordon_is_refused_while_hold_is_set(
    sender: tuple[str, client.ApiClient],
    admin: client.ApiClient,
    make_node: Callable[..., str],
    uncordon: dict[str, Any],
) -> None:
    who, api = sender
    node = make_node(unschedulable=True, annotations={HOLD: HOLD_TEXT, **GUARD_CORDON})
    status, message = refusal(lambda: patch(api, node, uncordon))
    assert status == 422 and refused_for_the_hold(who, node, message), message
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
        pytest.param({"metadata": {"annotations": {K.reset_done: "yes"}}}, id="annotation"),
        pytest.param({"spec": {"unschedulable": True}}, id="cordon-again"),
    ],
)
def test_other_writes_to_a_held_node_are_allowed(
    admin: client.ApiClient, make_node: Callable[..., str], deployed: object, change: dict[str, Any]
) -> None:
    node = make_node(unschedulable=True, annotations={HOLD: HOLD_TEXT})
    patch(admin, node, change)
    stored = client.CoreV1Api(admin).read_node(node)
    assert stored.spec.unschedulable is True
    assert stored.metadata.annotations[HOLD] == HOLD_TEXT


# ── What the guard does: allowed ─────────────────────────────────────────────────────────────


def test_guard_cordons_with_its_annotations_in_one_write_and_returns_the_node(
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
    patch(
        guard,
        node,
        {
            "metadata": {
                "annotations": {K.loadtest_result: "failed job/gng-lt-x at 2026-03-02T05:00:00Z"}
            }
        },
    )
    returned = {**CLEARED, K.loadtest_result: None, K.returned: "2026-03-02T06:00:00Z job/x"}
    patch(guard, node, {"metadata": {"annotations": returned}, "spec": {"unschedulable": False}})
    after = client.CoreV1Api(admin).read_node(node)
    assert after.metadata.annotations == {**FOREIGN, K.returned: "2026-03-02T06:00:00Z job/x"}
    assert not after.spec.unschedulable


def test_guard_clears_its_keys_after_a_persons_uncordon_and_records_the_cancel(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    node = make_node(annotations=GUARD_CORDON)  # a person uncordoned it already
    cancelled = "boot-1 GPU-5f1c xid-79 2026-03-02T05:00:00Z"
    patch(guard, node, {"metadata": {"annotations": {**CLEARED, K.cancelled: cancelled}}})
    assert client.CoreV1Api(admin).read_node(node).metadata.annotations == {K.cancelled: cancelled}


def test_guard_adds_a_hold_on_repeat_faults(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    node = make_node(unschedulable=True, annotations=GUARD_CORDON)
    patch(guard, node, {"metadata": {"annotations": {HOLD: HOLD_TEXT}}})
    assert client.CoreV1Api(admin).read_node(node).metadata.annotations[HOLD] == HOLD_TEXT


# ── What the guard may not do: one rule each ─────────────────────────────────────────────────

REFUSED = [
    # cordon
    pytest.param(
        {},
        {"spec": {"unschedulable": True}},
        "a cordon by the guard must add its reason",
        id="cordon-without-reason",
    ),
    pytest.param(
        {"gpus": 0},
        {"spec": {"unschedulable": True}, "metadata": {"annotations": GUARD_CORDON}},
        "on a node with nvidia.com/gpu capacity",
        id="cordon-a-cpu-node",
    ),
    pytest.param(
        {"annotations": {K.reason: "xid-48"}},
        {"spec": {"unschedulable": True}, "metadata": {"annotations": GUARD_CORDON}},
        "not yet carrying the reason",
        id="cordon-over-a-stale-reason",
    ),
    pytest.param(
        {},
        {"metadata": {"annotations": {K.reason: "xid-79"}}},
        "are written only with the cordon",
        id="reason-without-cordon",
    ),
    pytest.param(
        {"unschedulable": True},
        {"metadata": {"annotations": GUARD_CORDON}},
        "are written only with the cordon",
        id="reason-on-a-persons-cordon",
    ),
    pytest.param(
        {"unschedulable": True, "annotations": GUARD_CORDON},
        {"metadata": {"annotations": {K.at: "2026-03-09T00:00:00Z"}}},
        "are written only with the cordon",
        id="cordon-key-rewritten-later",
    ),
    pytest.param(
        {"unschedulable": True, "annotations": GUARD_CORDON},
        {"metadata": {"annotations": CLEARED}},
        "removed only when the node is schedulable",
        id="keys-cleared-still-cordoned",
    ),
    # uncordon
    pytest.param(
        {"unschedulable": True, "annotations": FOREIGN},
        {"spec": {"unschedulable": False}},
        "uncordons only nodes it cordoned",
        id="uncordon-a-persons-cordon",
    ),
    # hold
    pytest.param(
        {"unschedulable": True, "annotations": {**GUARD_CORDON, HOLD: HOLD_TEXT}},
        {"metadata": {"annotations": {HOLD: None}}},
        "never change or remove one already set",
        id="remove-a-hold",
    ),
    pytest.param(
        {"unschedulable": True, "annotations": {**GUARD_CORDON, HOLD: HOLD_TEXT}},
        {"metadata": {"annotations": {HOLD: "guard says fine"}}},
        "never change or remove one already set",
        id="change-a-hold",
    ),
    # person-only and unknown keys
    pytest.param(
        {"unschedulable": True, "annotations": GUARD_CORDON},
        {"metadata": {"annotations": {K.reset_done: "2026-03-02"}}},
        "and adds hold); not gpu-node-guard.io/reset-done",
        id="write-reset-done",
    ),
    pytest.param(
        {"unschedulable": True, "annotations": {**GUARD_CORDON, K.reset_done: "x"}},
        {"metadata": {"annotations": {K.reset_done: None}}},
        "and adds hold); not gpu-node-guard.io/reset-done",
        id="remove-reset-done",
    ),
    pytest.param(
        {},
        {"metadata": {"annotations": {"gpu-node-guard.io/owner": "guard"}}},
        "not gpu-node-guard.io/owner",
        id="unknown-key-under-the-prefix",
    ),
    # the lifecycle records: the checked boot and the PCIe links
    pytest.param(
        {"unschedulable": True},
        {"metadata": {"annotations": {K.checked_boot: CHECKED}}},
        "checked-boot is written only on a schedulable node",
        id="boot-on-a-cordon",
    ),
    pytest.param(
        {"unschedulable": True, "annotations": GUARD_CORDON},
        {"metadata": {"annotations": {K.checked_boot: CHECKED}}},
        "checked-boot is written only",
        id="boot-under-the-guards-cordon",
    ),
    pytest.param(
        {"gpus": 0},
        {"metadata": {"annotations": {K.checked_boot: CHECKED}}},
        "checked-boot is written only",
        id="boot-on-a-cpu-node",
    ),
    pytest.param(
        {"annotations": {K.checked_boot: CHECKED}},
        {"metadata": {"annotations": {K.checked_boot: None}}},
        "and never removed",
        id="boot-removed",
    ),
    pytest.param(
        {},
        {"metadata": {"annotations": {K.pcie_links: LINKS}}},
        "auto-cordon-pcie-links is written only",
        id="links-without-a-cordon",
    ),
    pytest.param(
        {"unschedulable": True},
        {"metadata": {"annotations": {K.pcie_links: LINKS}}},
        "auto-cordon-pcie-links is written only",
        id="links-on-a-persons-cordon",
    ),
    pytest.param(
        {"unschedulable": True, "annotations": {**GUARD_CORDON, K.pcie_links: LINKS}},
        {"metadata": {"annotations": {K.pcie_links: None}}},
        "removed only when the node is schedulable",
        id="links-cleared-still-cordoned",
    ),
    # the rest of the node
    pytest.param(
        {},
        {"metadata": {"labels": {"gpu-node-guard.io/faulty": "true"}}},
        "changes no node metadata but its annotations (changed: labels)",
        id="add-label",
    ),
    pytest.param(
        {},
        {"metadata": {"labels": {"nvidia.com/gpu.present": None}}},
        "changes no node metadata but its annotations (changed: labels)",
        id="remove-gpu-label",
    ),
    pytest.param(
        {},
        {"metadata": {"finalizers": ["gpu-node-guard.io/keep"]}},
        "changes no node metadata but its annotations (changed: finalizers)",
        id="add-finalizer",
    ),
    pytest.param(
        {},
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "gpu-fault-ledger",
                        "uid": "1",
                    }
                ]
            }
        },
        "changes no node metadata but its annotations (changed: ownerReferences)",
        id="add-owner-reference",
    ),
    pytest.param(
        {},
        {
            "spec": {"unschedulable": True, "taints": [TAINT]},
            "metadata": {"annotations": GUARD_CORDON},
        },
        "the guard changes no taint but removing the onboarding gate",
        id="cordon-with-taint",
    ),
    pytest.param(
        {},
        {"spec": {"providerID": "guard://gpu-node"}},
        "nothing in a node's spec but unschedulable (changed: providerID)",
        id="other-spec-field",
    ),
    pytest.param(
        {"annotations": FOREIGN},
        {"metadata": {"annotations": {"example.com/n": "g"}}},
        "annotations outside gpu-node-guard.io/ belong to others; changed: example.com/n",
        id="add-foreign-annotation",
    ),
    pytest.param(
        {"annotations": FOREIGN},
        {"metadata": {"annotations": {"team.example.com/owner": None}}},
        "belong to others; changed: team.example.com/owner",
        id="remove-foreign-annotation",
    ),
    pytest.param(
        {},
        {"metadata": {"annotations": {"gpu-node-guard.io.evil/x": "1"}}},
        "belong to others; changed: gpu-node-guard.io.evil/x",
        id="lookalike-annotation-prefix",
    ),
]


@pytest.mark.parametrize(("node_args", "change", "says"), REFUSED)
def test_guard_changes_nothing_but_its_own(
    guard: client.ApiClient,
    admin: client.ApiClient,
    make_node: Callable[..., str],
    node_args: dict[str, Any],
    change: dict[str, Any],
    says: str,
) -> None:
    node = make_node(**node_args)
    before = client.CoreV1Api(admin).read_node(node)
    status, message = refusal(lambda: patch(guard, node, change))
    assert (status, SCOPE_POLICY in message) == (422, True), message
    assert f"node {node}: refused: " in message and says in message, message
    after = client.CoreV1Api(admin).read_node(node)
    assert after.metadata.resource_version == before.metadata.resource_version


def test_a_hold_cannot_be_lifted_in_two_requests(
    guard: client.ApiClient, admin: client.ApiClient, make_node: Callable[..., str]
) -> None:
    """Remove the hold, then uncordon: the first request is already refused."""
    node = make_node(unschedulable=True, annotations={**GUARD_CORDON, HOLD: HOLD_TEXT})
    lift = {"metadata": {"annotations": {HOLD: None}}}
    status, message = refusal(lambda: patch(guard, node, lift))
    assert (status, SCOPE_POLICY in message) == (422, True), message
    status, message = refusal(lambda: patch(guard, node, {"spec": {"unschedulable": False}}))
    assert status == 422 and refused_for_the_hold("guard", node, message), message
    assert client.CoreV1Api(admin).read_node(node).metadata.annotations[HOLD] == HOLD_TEXT


def test_people_may_still_relabel_and_taint_nodes(
    admin: client.ApiClient, make_node: Callable[..., str], deployed: object
) -> None:
    node = make_node(annotations=FOREIGN)
    taint = {"key": "maintenance", "effect": "NoSchedule"}
    patch(admin, node, {"metadata": {"labels": {"rack": "r12"}}, "spec": {"taints": [taint]}})
    stored = client.CoreV1Api(admin).read_node(node)
    assert stored.metadata.labels["rack"] == "r12"
    assert [t.key for t in stored.spec.taints] == ["maintenance"]
