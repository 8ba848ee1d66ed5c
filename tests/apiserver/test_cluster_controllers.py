"""The guard's Jobs on a control plane run as clusters run it: ServiceAccount admission and
NodeRestriction on, and the real Job controller of kube-controller-manager making (and adopting)
the Pods. The rest of the tier makes those Pods by hand; these rows prove that what a real
controller makes is admitted, and that its adoption cannot be turned against the return gate.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.apiserver.conftest import JOBS_NS_ADMIN, aggregate_cluster_roles, wait_for_enforcement
from tests.apiserver.deploy import BASE, Kubectl
from tests.apiserver.kube import (
    GUARD_USER,
    HOW_TO_ENABLE,
    JOBS_NS,
    ControlPlane,
    as_dict,
    assets_dir,
    control_plane,
    create,
    guard_job,
    refusal,
)
from tests.tiers import unavailable

_WAIT_S = 60.0
PULL_SECRET = "mirror-pull"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, kubectl_binary: Path
) -> Iterator[ControlPlane]:
    """Its own etcd + kube-apiserver + kube-controller-manager, manifests/base applied."""
    assets = assets_dir(os.environ)
    if assets is None or not os.access(assets / "kube-controller-manager", os.X_OK):
        unavailable("apiserver", "kube-controller-manager not found", HOW_TO_ENABLE)
        raise AssertionError("unreachable: unavailable() skips or fails")
    workdir = tmp_path_factory.mktemp("cluster")
    with control_plane(assets, workdir, as_clusters_run=True) as plane:
        with plane.admin_client() as admin:
            aggregate_cluster_roles(admin)
            Kubectl(kubectl_binary, plane.kubeconfig).apply(BASE)
            wait_for_enforcement(plane, admin)
            client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(JOBS_NS, {
                "metadata": {"name": f"admin-{JOBS_NS_ADMIN}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": JOBS_NS_ADMIN}],
            })  # fmt: skip
        yield plane


def _pods_of(api: client.ApiClient, job: str) -> list[dict[str, Any]]:
    found = client.CoreV1Api(api).list_namespaced_pod(JOBS_NS, label_selector=f"job-name={job}")
    return [api.sanitize_for_serialization(p) for p in found.items]


def _controller_pod(plane: ControlPlane, job: str) -> dict[str, Any]:
    """The first Pod the Job controller made for `job`; fails with its FailedCreate Events."""
    deadline = time.monotonic() + _WAIT_S
    with plane.admin_client() as admin:
        while not (pods := _pods_of(admin, job)):
            if time.monotonic() > deadline:
                events = client.CoreV1Api(admin).list_namespaced_event(
                    JOBS_NS, field_selector=f"involvedObject.name={job}"
                )
                said = [f"{e.reason}: {e.message}" for e in events.items]
                raise AssertionError(f"no Pod of job/{job} after {_WAIT_S:.0f} s: {said}")
            time.sleep(0.3)
    return pods[0]


def _create_as(plane: ControlPlane, user: str, doc: dict[str, Any]) -> dict[str, Any]:
    with plane.impersonating(user) as api:
        return as_dict(create(api, doc))


def test_job_controller_makes_the_guards_pods(cluster: ControlPlane) -> None:
    """A load-test Job of the guard gets its Pod from the real controller, admitted by the Pod
    policies, owned by that Job's uid."""
    job = _create_as(cluster, GUARD_USER, guard_job("loadtest", "gpu-cc-a", "boot-a"))
    pod = _controller_pod(cluster, job["metadata"]["name"])
    owners = pod["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
        ("Job", job["metadata"]["uid"], True)
    ]
    assert not pod["spec"].get("automountServiceAccountToken", False)


def test_pull_secrets_of_the_job_account_reach_the_pods(cluster: ControlPlane) -> None:
    """A site with a private mirror gives pull credentials on the Jobs' ServiceAccount;
    ServiceAccount admission copies them into every guard Pod, and the policies admit them."""
    with cluster.admin_client() as admin:
        core = client.CoreV1Api(admin)
        core.patch_namespaced_service_account(
            "gpu-node-guard-job", JOBS_NS, {"imagePullSecrets": [{"name": PULL_SECRET}]}
        )
        try:
            job = _create_as(cluster, GUARD_USER, guard_job("evidence", "gpu-cc-b", "boot-b"))
            pod = _controller_pod(cluster, job["metadata"]["name"])
        finally:
            core.patch_namespaced_service_account(
                "gpu-node-guard-job", JOBS_NS, {"imagePullSecrets": None}
            )
    assert pod["spec"].get("imagePullSecrets") == [{"name": PULL_SECRET}]


def test_an_adopted_pod_cannot_be_made(cluster: ControlPlane) -> None:
    """The orphan-adoption route: a jobs-namespace admin runs an in-shape Job on a healthy node,
    then rewrites its passed Pod into an orphan carrying the victim Job's labels, so that the Job
    controller adopts it into the victim. The rewrite is refused: a guard Pod's owner, labels and
    generateName never change after creation, and the victim keeps no Pod but its own."""
    victim = _create_as(cluster, GUARD_USER, guard_job("loadtest", "gpu-cc-c", "boot-c"))
    decoy = _create_as(cluster, JOBS_NS_ADMIN, guard_job("loadtest", "gpu-cc-d", "boot-d"))
    pod = _controller_pod(cluster, decoy["metadata"]["name"])
    name, victim_name = pod["metadata"]["name"], victim["metadata"]["name"]
    forged = dict(pod["metadata"])
    forged["ownerReferences"] = None
    forged["generateName"] = f"{victim_name}-"
    forged["labels"] = {
        **pod["metadata"]["labels"],
        "job-name": victim_name,
        "batch.kubernetes.io/job-name": victim_name,
        "controller-uid": victim["metadata"]["uid"],
        "batch.kubernetes.io/controller-uid": victim["metadata"]["uid"],
    }
    with cluster.impersonating(JOBS_NS_ADMIN) as bob:
        core = client.CoreV1Api(bob)
        status, message = refusal(
            lambda: core.replace_namespaced_pod(name, JOBS_NS, {**pod, "metadata": forged})
        )
        assert status in (403, 422), message
        for patch in ({"metadata": {"ownerReferences": None}},
                      {"metadata": {"labels": {"job-name": victim_name}}}):  # fmt: skip
            status, message = refusal(lambda p=patch: core.patch_namespaced_pod(name, JOBS_NS, p))
            assert status in (403, 422), message
    with cluster.admin_client() as admin:
        kept = client.CoreV1Api(admin).read_namespaced_pod(name, JOBS_NS)
        assert [o.uid for o in kept.metadata.owner_references] == [decoy["metadata"]["uid"]]
        assert all(
            o["uid"] == victim["metadata"]["uid"]
            for p in _pods_of(admin, victim_name)
            for o in p["metadata"]["ownerReferences"]
        )
