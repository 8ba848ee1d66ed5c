"""One node the API will not let the guard cordon costs only itself, on a real kube-apiserver.

Two faulted nodes with the same Xid 79 and GPU loss: the one sorted first (`fb-a-…`) cannot be
cordoned, the second (`fb-b-…`) must be cordoned in the same first cycle:
  - `fb-a` has no nvidia.com/gpu in its status: the node-scope policy would refuse the cordon,
    so it is not a candidate at all (WARN skip no-gpu-resource), exit 0;
  - `fb-a` is protected by a site's own ValidatingAdmissionPolicy: its cordon is refused (422),
    one `cordon-fallback` line, then `fb-b` is cordoned; exit 1 for the refused write.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    faulted,
    forget_guard_state,
    ledger_text,
    make_gpu_node,
    mine,
    outcomes,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import MERGE_PATCH

pytestmark = pytest.mark.apiserver

A, B = "fb-a-protected", "fb-b-faulted"
SITE_POLICY = "site-protects-fb-a"


@pytest.fixture(scope="module")
def prom():
    with scenario_prometheus(faulted(A), faulted(B)) as server:
        yield server


@pytest.fixture
def two_nodes(admin: client.ApiClient) -> Iterator[client.CoreV1Api]:
    core = client.CoreV1Api(admin)
    yield core
    for name in (A, B):
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    forget_guard_state(core, admin)


def test_a_node_without_a_gpu_resource_is_skipped_and_the_next_is_cordoned(
    prom, guard_kubeconfig, two_nodes
):
    core = two_nodes
    make_gpu_node(core, B)
    core.create_node({"metadata": {"name": A}})
    status = {
        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "nodeInfo": {"bootID": "boot-1"},
    }
    core.patch_node_status(A, {"status": status}, _content_type=MERGE_PATCH)

    run = run_guard(prom, guard_kubeconfig, ISOLATE_AT)

    assert run.rc == 0
    assert mine(run.plan, A) == [("skip", "no-gpu-resource")]
    (warn,) = [line for line in run.lines("skip") if line.get("node") == A]
    assert warn["level"] == "WARN" and "nvidia.com/gpu" in warn["detail"]
    assert mine(run.plan, B)[0] == ("cordon", "xid-79")
    assert core.read_node(B).spec.unschedulable
    assert not core.read_node(A).spec.unschedulable


@pytest.fixture
def site_policy(admin: client.ApiClient) -> Iterator[None]:
    """A site's own policy: nobody changes node fb-a (say, a storage head it never drains)."""
    api = client.AdmissionregistrationV1Api(admin)
    api.create_validating_admission_policy(
        {
            "metadata": {"name": SITE_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["nodes"],
                        }
                    ]
                },
                "matchConditions": [
                    {"name": "fb-a", "expression": f"object.metadata.name == '{A}'"}
                ],
                "validations": [
                    {"expression": "false", "message": "fb-a is protected by the site"}
                ],
            },
        }
    )
    api.create_validating_admission_policy_binding(
        {
            "metadata": {"name": SITE_POLICY},
            "spec": {"policyName": SITE_POLICY, "validationActions": ["Deny"]},
        }
    )
    yield
    api.delete_validating_admission_policy_binding(SITE_POLICY)
    api.delete_validating_admission_policy(SITE_POLICY)


def _wait_refused(core: client.CoreV1Api) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.patch_node(A, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All")
        except ApiException as exc:
            if exc.status in (403, 422):
                return
        time.sleep(0.2)
    raise RuntimeError("the site policy was not enforced after 30 s")


def test_a_refused_cordon_moves_the_cycles_cordon_to_the_next_candidate(
    prom, guard_kubeconfig, two_nodes, site_policy
):
    core = two_nodes
    make_gpu_node(core, A)
    make_gpu_node(core, B)
    _wait_refused(core)

    # The dry run cannot know of the refusal, but it shows the order a real run tries them in.
    dry = run_guard(prom, guard_kubeconfig, ISOLATE_AT, "--dry-run")
    assert mine(dry.plan, A)[0] == ("cordon", "xid-79")
    (waits,) = [a for a in dry.plan["actions"] if a["node"] == B]
    assert (
        waits["next"] == f"cordoned in this cycle if the API refuses the cordon of {A} (fallback 1)"
    )

    run = run_guard(prom, guard_kubeconfig, ISOLATE_AT, ok=False)

    assert run.rc == 1, "the refused write is a failed write"
    assert outcomes(run.plan, A)[0] == ("cordon", "failed")
    (cordon_a,) = [a for a in run.plan["actions"] if (a["node"], a["type"]) == (A, "cordon")]
    assert cordon_a["outcome"]["reason"] == "refused"  # an admission refusal, not an outage
    assert run.plan["counts"]["failed"] == 1
    assert run.plan["counts"]["applied_cordon"] == 1
    (fallback,) = run.lines("cordon-fallback")
    assert (fallback["node"], fallback["refused"], fallback["attempt"]) == (B, A, 2)
    assert fallback["level"] == "WARN"
    assert ("cordon", "applied") in outcomes(run.plan, B)
    assert core.read_node(B).spec.unschedulable
    assert core.read_node(B).metadata.annotations[KEYS.reason] == "xid-79"
    assert "xid-79" in ledger_text(core, B)
    assert not core.read_node(A).spec.unschedulable
    assert (ledger_text(core, A)) == ""
