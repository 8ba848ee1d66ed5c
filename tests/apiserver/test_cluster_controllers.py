"""The guard's Jobs on a control plane run as clusters run it: ServiceAccount admission and
NodeRestriction on, and the real Job controller of kube-controller-manager making (and adopting)
the Pods. The rest of the tier makes those Pods by hand; these rows prove that what a real
controller makes is admitted, and that its adoption cannot be turned against the return gate
(test_transplant_routes.py runs the guard's cycles against it).
"""

from __future__ import annotations

import pytest
from kubernetes import client

from guard.jobs import JobKind
from guard.plan.common import EXAMPLE_UUID
from guard.wire import FenceSummary, render_fence_summary
from tests.apiserver.conftest import JOBS_NS_ADMIN
from tests.apiserver.controllers import controller_pod, create_as, pods_of, run_to_the_end
from tests.apiserver.guard_run import EVIDENCE, LOADTEST_PASS, PASS
from tests.apiserver.kube import GUARD_USER, JOBS_NS, ControlPlane, guard_job, refusal

pytestmark = pytest.mark.apiserver

PULL_SECRET = "mirror-pull"
FENCED = render_fence_summary(
    FenceSummary("set", "0000:99:00.0", EXAMPLE_UUID, "fenced", "Prohibited")
)


def test_job_controller_makes_the_guards_pods(cluster: ControlPlane) -> None:
    """A load-test Job of the guard gets its Pod from the real controller, admitted by the Pod
    policies, owned by that Job's uid."""
    job = create_as(cluster, GUARD_USER, guard_job("loadtest", "gpu-cc-a", "boot-a"))
    pod = controller_pod(cluster, job)
    owners = pod["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
        ("Job", job["metadata"]["uid"], True)
    ]
    assert not pod["spec"].get("automountServiceAccountToken", False)


@pytest.mark.parametrize(
    ("kind", "message"),
    [("evidence", EVIDENCE), ("conformance", PASS), ("loadtest", LOADTEST_PASS), ("fence", FENCED)],
)
def test_pull_secrets_of_the_job_account_reach_the_pods(
    cluster: ControlPlane, kind: JobKind, message: str
) -> None:
    """A site with a private mirror gives pull credentials on the Jobs' ServiceAccount;
    ServiceAccount admission copies them into every guard Pod, the policies admit them, and the
    Job runs to its end (the Job controller counts its Pod)."""
    with cluster.admin_client() as admin:
        core = client.CoreV1Api(admin)
        core.patch_namespaced_service_account(
            "gpu-node-guard-job", JOBS_NS, {"imagePullSecrets": [{"name": PULL_SECRET}]}
        )
        try:
            job = create_as(cluster, GUARD_USER, guard_job(kind, f"gpu-ps-{kind}", "boot-b"))
            pod = run_to_the_end(cluster, admin, job, message, ok=True)
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
    victim = create_as(cluster, GUARD_USER, guard_job("loadtest", "gpu-cc-c", "boot-c"))
    decoy = create_as(cluster, JOBS_NS_ADMIN, guard_job("loadtest", "gpu-cc-d", "boot-d"))
    pod = controller_pod(cluster, decoy)
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
        for patch in (
            {"metadata": {"ownerReferences": None}},
            {"metadata": {"labels": {"job-name": victim_name}}},
        ):
            status, message = refusal(lambda p=patch: core.patch_namespaced_pod(name, JOBS_NS, p))
            assert status in (403, 422), message
    with cluster.admin_client() as admin:
        kept = client.CoreV1Api(admin).read_namespaced_pod(name, JOBS_NS)
        assert [o.uid for o in kept.metadata.owner_references] == [decoy["metadata"]["uid"]]
        assert all(
            o["uid"] == victim["metadata"]["uid"]
            for p in pods_of(admin, victim["metadata"]["uid"])
            for o in p["metadata"]["ownerReferences"]
        )
