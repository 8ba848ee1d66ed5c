"""policies/device-taints.yaml and the guard's RBAC on the real v1.37 API server: the guard's
ServiceAccount creates and deletes only its own DeviceTaintRules (its label, one device, the
NoSchedule fault taint) and its load tests' ResourceClaims, never a person's."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from guard.model import DraDevice
from guard.plan.device_taint import DeviceRecord, rule_manifest, rule_name
from tests.apiserver.kube import (
    GUARD_USER,
    JOB_CONTROLLER,
    JOBS_NS,
    ControlPlane,
    controller_pod,
    create,
    guard_device_job,
    refusal,
)
from tests.builders import NOW, PCI, UUID, S

DEVICE = DraDevice("pol", "gpu.nvidia.com", "pol", "gpu-1", UUID, PCI)

pytestmark = pytest.mark.dra


def guard_rule() -> dict[str, Any]:
    rec = DeviceRecord("xid-79", NOW, "boot-1", PCI, UUID, DEVICE.ref, rule_name(DEVICE))
    return rule_manifest(S, "pol", DEVICE, rec)  # type: ignore[return-value]


def guard_claim(name: str = "gng-lt-pol-claim") -> dict[str, Any]:
    from guard.jobs import ClaimSpec
    from tests.builders import TEMPLATES

    spec = ClaimSpec(
        name,
        JOBS_NS,
        "pol",
        "gpu-node-guard.io/",
        "gpu.nvidia.com",
        "gpu.nvidia.com",
        UUID,
        DEVICE.ref,
        "gpu-node-guard.io/fault",
        "xid-79",
    )
    return TEMPLATES.render_claim(spec)


@pytest.fixture(scope="module")
def as_guard(dra_plane: ControlPlane) -> Iterator[client.ApiClient]:
    with dra_plane.impersonating(GUARD_USER) as api:
        yield api


@pytest.fixture(scope="module")
def admin(dra_plane: ControlPlane) -> Iterator[client.ApiClient]:
    with dra_plane.admin_client() as api:
        yield api


def changed(doc: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    edit(out)
    return out


def _no_label(d: dict[str, Any]) -> None:
    d["metadata"]["labels"] = {}


def _no_execute(d: dict[str, Any]) -> None:
    d["spec"]["taint"]["effect"] = "NoExecute"


def _whole_pool(d: dict[str, Any]) -> None:
    del d["spec"]["deviceSelector"]["device"]


def _other_key(d: dict[str, Any]) -> None:
    d["spec"]["taint"]["key"] = "example.com/maintenance"


def test_the_guards_own_rule_and_claim_are_admitted(as_guard: client.ApiClient) -> None:
    create(as_guard, guard_rule(), dry_run=True)
    create(as_guard, guard_claim(), dry_run=True)


@pytest.mark.parametrize(
    "edit",
    [_no_label, _no_execute, _whole_pool, _other_key],
    ids=["no-label", "no-execute", "whole-pool", "other-key"],
)
def test_other_rules_are_refused_to_the_guard(
    as_guard: client.ApiClient, edit: Callable[[dict[str, Any]], None]
) -> None:
    status, message = refusal(lambda: create(as_guard, changed(guard_rule(), edit)))
    assert status == 422, message
    assert "ValidatingAdmissionPolicy 'gpu-node-guard-device-taints'" in message


def test_a_persons_rule_is_neither_changed_nor_deleted_by_the_guard(
    admin: client.ApiClient, as_guard: client.ApiClient
) -> None:
    theirs = changed(guard_rule(), _no_label)
    theirs["metadata"] = {"name": "a-persons-rule"}
    create(admin, theirs)
    api = client.CustomObjectsApi(as_guard)
    args = ("resource.k8s.io", "v1", "devicetaintrules", "a-persons-rule")
    status, message = refusal(lambda: api.delete_cluster_custom_object(*args))
    assert status == 422 and "only its own DeviceTaintRules" in message, message
    patch = {"spec": {"taint": {"effect": "None"}}}
    status, message = refusal(lambda: api.patch_cluster_custom_object(*args, patch))
    assert status == 403, message  # RBAC grants no update or patch (the policy refuses both too)
    assert client.CustomObjectsApi(admin).get_cluster_custom_object(*args)


def test_claims_tolerating_more_or_asking_more_are_refused(as_guard: client.ApiClient) -> None:
    def more_tolerations(d: dict[str, Any]) -> None:
        exactly = d["spec"]["devices"]["requests"][0]["exactly"]
        exactly["tolerations"].append(
            {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
        )

    def two(d: dict[str, Any]) -> None:
        d["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2

    for claim in (changed(guard_claim(), e) for e in (more_tolerations, two, _no_label)):
        status, message = refusal(lambda: create(as_guard, claim))  # noqa: B023
        assert status == 422, message


def _no_selector(d: dict[str, Any]) -> None:
    del d["spec"]["devices"]["requests"][0]["exactly"]["selectors"]


def _any_gpu(d: dict[str, Any]) -> None:
    selector = d["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    selector["expression"] = 'device.driver == "gpu.nvidia.com"'


def _uuid_or_any(d: dict[str, Any]) -> None:
    selector = d["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    selector["expression"] += " || true"


def _two_selectors(d: dict[str, Any]) -> None:
    selectors = d["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    selectors.append({"cel": {"expression": "true"}})


@pytest.mark.parametrize(
    "edit",
    [_no_selector, _any_gpu, _uuid_or_any, _two_selectors],
    ids=["no-selector", "any-gpu", "uuid-or-any", "two-selectors"],
)
def test_a_guard_claim_not_naming_one_gpu_is_refused(
    as_guard: client.ApiClient, edit: Callable[[dict[str, Any]], None]
) -> None:
    """The guard's token may not ask for whichever GPU the scheduler picks (issue #38, 2)."""
    status, message = refusal(lambda: create(as_guard, changed(guard_claim(), edit)))
    assert status == 422, message
    assert "selects exactly one GPU" in message, message


def test_no_one_but_the_guard_creates_a_claim_in_the_jobs_namespace(
    admin: client.ApiClient,
) -> None:
    """Not even a cluster admin: a claim there is a device load test's, and the guard's."""
    status, message = refusal(lambda: create(admin, guard_claim("an-admins-claim")))
    assert status == 422, message
    assert "'gpu-node-guard-device-claims-others'" in message, message


def test_rbac_keeps_the_guard_out_of_other_namespaces_claims(as_guard: client.ApiClient) -> None:
    claim = guard_claim()
    claim["metadata"]["namespace"] = "work"
    status, message = refusal(lambda: create(as_guard, claim))
    assert status == 403, message


def test_the_device_load_test_is_admitted_and_a_pinned_one_refused(
    dra_plane: ControlPlane, as_guard: client.ApiClient, admin: client.ApiClient
) -> None:
    """policies/job-loadtest.yaml on 1.37: the guard's device load test Job and the Job
    controller's Pod pass; the same Job pinned past the scheduler (nodeName) is refused."""
    job = guard_device_job("pol-lt", uuid.uuid4().hex)
    made = admin.sanitize_for_serialization(create(as_guard, job))
    pod = controller_pod(made)
    with dra_plane.impersonating(JOB_CONTROLLER) as controller:
        create(controller, pod, dry_run=True)
    pinned = guard_device_job("pol-lt", uuid.uuid4().hex)
    pinned["spec"]["template"]["spec"]["nodeName"] = "pol-lt"  # type: ignore[index]
    status, message = refusal(lambda: create(as_guard, pinned))
    assert status == 422 and "'gpu-node-guard-loadtest-job'" in message, message
    client.BatchV1Api(admin).delete_namespaced_job(made["metadata"]["name"], JOBS_NS)
