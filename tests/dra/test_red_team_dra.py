"""The red-team table's DRA rows (tests/redteam_table.py) on the real v1.37.2 API server with the
guard's RBAC and policies/device-taints.yaml: each identity sends each request on the jobs
namespace's ResourceClaims and on DeviceTaintRules (dry-run where the request would change what
exists), and the answer must be the row's: admitted, or refused with 403 by RBAC, or with 422 by
the policy the row names, in its words."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests import redteam_table as table
from tests.apiserver.conftest import _wait_until_allowed, aggregate_cluster_roles, bind_admin
from tests.apiserver.kube import (
    GUARD_NS,
    JOBS_NS,
    ControlPlane,
    api_error,
    create,
    grant_create_only,
    write_kubeconfig,
)
from tests.dra.test_device_policies import _any_gpu, _no_execute, changed, guard_claim, guard_rule

pytestmark = pytest.mark.dra

# Users of this module's own: test_device_taint.py gives bob-jobs-ns-admin more than `admin`.
GUARD_NS_ADMIN = "red-team-guard-ns-admin"
JOBS_NS_ADMIN = "red-team-jobs-ns-admin"
CREATE_ONLY = "red-team-creates-jobs"
ROLE = "red-team-create-only"
KUBELET_NODE = "dra-red-team"
DRY = "All"
CLAIMS = ("resource.k8s.io", "v1", JOBS_NS, "resourceclaims")
RULES = ("resource.k8s.io", "v1", "devicetaintrules")
GUARDS_CLAIM = "gng-lt-red-team-claim"
GUARDS_RULE = "gng-red-team-rule"
PERSONS_RULE = "a-persons-red-team-rule"


@dataclass(frozen=True, slots=True)
class World:
    apis: dict[str, client.ApiClient]
    admin: client.ApiClient


def _named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["metadata"]["name"] = name
    return out


def _minted_guard_token(plane: ControlPlane) -> client.ApiClient:
    """The guard's real token, minted (TokenRequest) by the guard namespace's admin."""
    with plane.impersonating(GUARD_NS_ADMIN) as alice:
        _wait_until_allowed(lambda: client.CoreV1Api(alice).list_namespaced_pod(GUARD_NS))
        token = client.CoreV1Api(alice).create_namespaced_service_account_token(
            "gpu-node-guard", GUARD_NS, {"spec": {"expirationSeconds": 3600}}
        )
    path = plane.workdir / "kubeconfig-red-team-guard"
    write_kubeconfig(path, plane.url, plane.ca_file, token.status.token)
    return config.new_client_from_config(config_file=str(path))


@pytest.fixture(scope="module")
def world(dra_plane: ControlPlane) -> Iterator[World]:
    with dra_plane.admin_client() as admin:
        aggregate_cluster_roles(admin)  # no aggregation controller runs on this plane
        bind_admin(admin, GUARD_NS_ADMIN, GUARD_NS)
        bind_admin(admin, JOBS_NS_ADMIN, JOBS_NS)
        grant_create_only(admin, CREATE_ONLY, ROLE)
        person = _named(changed(guard_rule(), lambda d: d["metadata"].pop("labels")), PERSONS_RULE)
        create(admin, person)
        with (
            _minted_guard_token(dra_plane) as guard,
            dra_plane.impersonating(GUARD_NS_ADMIN) as alice,
            dra_plane.impersonating(JOBS_NS_ADMIN) as bob,
            dra_plane.impersonating(CREATE_ONLY) as carol,
            dra_plane.impersonating(f"system:node:{KUBELET_NODE}", "system:nodes") as kubelet,
        ):
            _wait_until_allowed(lambda: client.CoreV1Api(bob).list_namespaced_pod(JOBS_NS))
            _wait_until_allowed(lambda: _authorized(lambda: create(carol, _job_probe(), True)))
            create(guard, guard_claim(GUARDS_CLAIM))  # what the rows delete or relabel
            create(guard, _named(guard_rule(), GUARDS_RULE))
            yield World(
                {
                    "guard-token": guard,
                    "guard-ns-admin": alice,
                    "jobs-ns-admin": bob,
                    "create-only": carol,
                    "kubelet": kubelet,
                    "cluster-admin": admin,
                },
                admin,
            )
            # Only the guard deletes its claim (the policy refuses even the cluster admin).
            client.CustomObjectsApi(guard).delete_namespaced_custom_object(*CLAIMS, GUARDS_CLAIM)
            client.CustomObjectsApi(guard).delete_cluster_custom_object(*RULES, GUARDS_RULE)
        client.CustomObjectsApi(admin).delete_cluster_custom_object(*RULES, PERSONS_RULE)
        rbac = client.RbacAuthorizationV1Api(admin)
        rbac.delete_namespaced_role_binding(ROLE, JOBS_NS)
        rbac.delete_namespaced_role(ROLE, JOBS_NS)
        for user, ns in ((GUARD_NS_ADMIN, GUARD_NS), (JOBS_NS_ADMIN, JOBS_NS)):
            rbac.delete_namespaced_role_binding(f"admin-{user}", ns)


def _authorized(call: Callable[[], object]) -> None:
    """Raises while RBAC refuses `call` (403); an admission refusal past it is fine."""
    try:
        call()
    except ApiException as exc:
        if exc.status == 403:
            raise


def _job_probe() -> dict[str, Any]:
    """A Job CREATE_ONLY may send: the create-only binding is in effect once it reaches
    admission (the jobs namespace's gate refuses it there)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "red-team-probe", "namespace": JOBS_NS},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "x", "image": "busybox"}],
                }
            }
        },
    }


# ── the requests, by (surface, action); each is sent as the row's identity ─────────────────────

Action = Callable[[client.ApiClient], object]


def _create(doc: Callable[[], dict[str, Any]]) -> Action:
    return lambda api: create(api, doc(), dry_run=True)


def _delete_claim(api: client.ApiClient) -> object:
    return client.CustomObjectsApi(api).delete_namespaced_custom_object(
        *CLAIMS, GUARDS_CLAIM, dry_run=DRY
    )


def _relabel_claim(api: client.ApiClient) -> object:
    patch = {"metadata": {"labels": {"app.kubernetes.io/name": "not-the-guard"}}}
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *CLAIMS, GUARDS_CLAIM, patch, dry_run=DRY
    )


# The allocation the scheduler would write, naming another GPU of the node than the claim's.
ANOTHER_DEVICE = {
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "pol", "device": "gpu-5"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["pol"]}]}
                ]
            },
        }
    }
}


def _claim_status(api: client.ApiClient) -> object:
    return client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *CLAIMS, GUARDS_CLAIM, ANOTHER_DEVICE, dry_run=DRY
    )


def _claim_finalizer(api: client.ApiClient) -> object:
    patch = {"metadata": {"finalizers": ["example.com/keep"]}}
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *CLAIMS, GUARDS_CLAIM, patch, dry_run=DRY
    )


def _delete_rule(name: str) -> Action:
    return lambda api: client.CustomObjectsApi(api).delete_cluster_custom_object(
        *RULES, name, dry_run=DRY
    )


def _change_rule(api: client.ApiClient) -> object:
    patch = {"spec": {"taint": {"effect": "None"}}}
    return client.CustomObjectsApi(api).patch_cluster_custom_object(
        *RULES, GUARDS_RULE, patch, dry_run=DRY
    )


ACTIONS: dict[tuple[str, str], Action] = {
    (table.CLAIM, "create its claim: one GPU by UUID"): _create(guard_claim),
    (table.CLAIM, "create a claim for any GPU"): _create(lambda: changed(guard_claim(), _any_gpu)),
    (table.CLAIM, "create a claim in the jobs namespace"): _create(
        lambda: guard_claim("someone-elses-claim")
    ),
    (table.CLAIM, "delete its claim"): _delete_claim,
    (table.CLAIM, "delete the guard's claim"): _delete_claim,
    (table.CLAIM, "relabel its claim"): _relabel_claim,
    (table.CLAIM, "relabel the guard's claim"): _relabel_claim,
    (table.CLAIM, "write the status of the guard's claim (another device)"): _claim_status,
    (table.CLAIM, "add a finalizer to the guard's claim"): _claim_finalizer,
    (table.RULE, "create its rule: one device, NoSchedule"): _create(guard_rule),
    (table.RULE, "create a guard-labelled rule"): _create(guard_rule),
    (table.RULE, "create a NoExecute rule"): _create(lambda: changed(guard_rule(), _no_execute)),
    (table.RULE, "delete a guard-labelled rule"): _delete_rule(GUARDS_RULE),
    (table.RULE, "delete a rule not the guard's"): _delete_rule(PERSONS_RULE),
    (table.RULE, "change a guard-labelled rule"): _change_rule,
}

ROWS = table.rows_of("dra")


def test_every_row_of_the_tier_has_its_request() -> None:
    assert {(r.surface, r.action) for r in ROWS} == set(ACTIONS)
    assert len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_red_team_row(world: World, row: table.Row) -> None:
    status, message = 0, ""
    try:
        ACTIONS[(row.surface, row.action)](world.apis[row.who])
    except ApiException as exc:
        status, message = api_error(exc)
    assert table.mismatch(row, status, message) == "", row
    stored = client.CustomObjectsApi(world.admin)
    assert stored.get_namespaced_custom_object(*CLAIMS, GUARDS_CLAIM)  # dry-run left both
    assert stored.get_cluster_custom_object(*RULES, GUARDS_RULE)
