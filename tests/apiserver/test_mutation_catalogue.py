"""A catalogue of out-of-shape writes on a real kube-apiserver: each row is one create or update
that a stolen guard token, the jobs namespace's admin or a user who may only create Jobs and
Pods there sends, and the policy (and its words) that refuses it. The in-shape writes next to
them are admitted. Rows (docs/security.md names them by group):

  job-update-*     an admitted guard Job changed (TTL, deadline, annotations): admitted = fixed
  pod-update-*     an admitted guard Pod changed (owners, labels, generateName, spec)
  job-name-*       a Job whose name was made for another node than its nodeName
  pod-node-*       a Pod whose Job's name was made for another node
  pull-secrets-*   imagePullSecrets beyond names only, or more than 8
  node-value-*     the guard's own node annotations: not printable, multi-line, too long
  node-form-*      its result and failure records: printable, yet not the form it writes
  hold-*           a hold outside a GPU node
  archive-*        a ledger archive over its bound
  event-*          an Event about anything but a Node, or as another controller
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.generate.policies.ledger import ARCHIVE_SLACK_BYTES
from guard.jobs import JobKind, job_name
from guard.names import APP_LABEL, APP_NAME, COMPONENT_LABEL, REPORTING_CONTROLLER, Annotations
from guard.settings import Settings
from tests.apiserver import tally
from tests.apiserver.conftest import Identities, _wait_until_allowed
from tests.apiserver.kube import (
    GUARD_NS,
    JOB_CONTROLLER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    as_dict,
    controller_pod,
    create,
    guard_job,
    refusal,
)

pytestmark = pytest.mark.apiserver

K = Annotations("gpu-node-guard.io/")
KINDS: list[JobKind] = ["evidence", "loadtest", "conformance", "fence"]
NODE = "gpu-cat-a"
# Longer than the 41 characters a Job name holds of a node, dots in it (written as dashes).
LONG_NODE = "gpu-" + "a" * 40 + ".rack-7.example.com"
# Cut at 41 characters it ends in a dash, which job_name strips.
DASH_NODE = "b" * 40 + "-" + "c" * 10
CREATE_ONLY = "carol-creates-jobs"
EVENTS_NS = "default"


def kind_policy(kind: str, what: str) -> str:
    return f"gpu-node-guard-{kind}-{what}"


@dataclass
class World:
    """The identities and the admitted objects the rows change."""

    admin: client.ApiClient
    guard: client.ApiClient
    jobs_admin: client.ApiClient
    create_only: client.ApiClient
    controller: client.ApiClient
    jobs: dict[str, dict[str, Any]]  # kind → an admitted Job (stored)
    others: dict[str, dict[str, Any]]  # kind → a second admitted Job of the kind
    pods: dict[str, str]  # kind → name of an admitted Pod of `jobs[kind]`
    gpu_node: str
    cpu_node: str

    def api(self, who: str) -> client.ApiClient:
        return {
            "guard-token": self.guard,
            "jobs-ns-admin": self.jobs_admin,
            "create-only": self.create_only,
            "job-controller": self.controller,
            "guard-ns-admin": self.guard_ns_admin,
        }[who]

    guard_ns_admin: client.ApiClient | None = None


@pytest.fixture(scope="module")
def world(
    deployed: ControlPlane, admin: client.ApiClient, identities: Identities
) -> Iterator[World]:
    rbac = client.RbacAuthorizationV1Api(admin)
    rule = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
    ]
    rbac.create_namespaced_role(JOBS_NS, {"metadata": {"name": "create-only"}, "rules": rule})
    rbac.create_namespaced_role_binding(
        JOBS_NS,
        {
            "metadata": {"name": "create-only"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "create-only",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CREATE_ONLY}
            ],
        },
    )
    core = client.CoreV1Api(admin)
    gpu, cpu = f"gpu-cat-{uuid.uuid4().hex[:8]}", f"cpu-cat-{uuid.uuid4().hex[:8]}"
    core.create_node({"metadata": {"name": gpu, "labels": {"nvidia.com/gpu.present": "true"}}})
    core.patch_node_status(
        gpu, {"status": {"capacity": {"nvidia.com/gpu": "8"}}}, _content_type=MERGE_PATCH
    )
    core.create_node({"metadata": {"name": cpu}})
    with (
        deployed.impersonating(CREATE_ONLY) as carol,
        deployed.impersonating(JOB_CONTROLLER) as controller,
    ):
        probe = guard_job("evidence", NODE, "probe-create-only")
        _wait_until_allowed(lambda: create(carol, probe, dry_run=True))
        jobs: dict[str, dict[str, Any]] = {}
        others: dict[str, dict[str, Any]] = {}
        pods: dict[str, str] = {}
        for kind in KINDS:
            jobs[kind] = as_dict(create(identities.guard_token, guard_job(kind, NODE, "one")))
            others[kind] = as_dict(create(identities.guard_token, guard_job(kind, NODE, "two")))
            pod = as_dict(create(controller, controller_pod(jobs[kind])))
            pods[kind] = pod["metadata"]["name"]
        yield World(
            admin,
            identities.guard_token,
            identities.jobs_ns_admin,
            carol,
            controller,
            jobs,
            others,
            pods,
            gpu,
            cpu,
            identities.guard_ns_admin,
        )
    batch = client.BatchV1Api(admin)
    for kind in KINDS:
        for job in (jobs[kind], others[kind]):
            batch.delete_namespaced_job(job["metadata"]["name"], JOBS_NS)
        core.delete_namespaced_pod(pods[kind], JOBS_NS)
        core.patch_namespaced_pod(pods[kind], JOBS_NS, {"metadata": {"finalizers": None}})
    core.delete_node(gpu)
    core.delete_node(cpu)
    rbac.delete_namespaced_role_binding("create-only", JOBS_NS)
    rbac.delete_namespaced_role("create-only", JOBS_NS)


def stored_job(w: World, kind: str, other: bool = False) -> dict[str, Any]:
    name = (w.others if other else w.jobs)[kind]["metadata"]["name"]
    job = client.BatchV1Api(w.admin).read_namespaced_job(name, JOBS_NS)
    return dict(w.admin.sanitize_for_serialization(job))


def stored_pod(w: World, kind: str) -> dict[str, Any]:
    pod = client.CoreV1Api(w.admin).read_namespaced_pod(w.pods[kind], JOBS_NS)
    return dict(w.admin.sanitize_for_serialization(pod))


Act = Callable[[World], object]


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    who: str
    policy: str
    words: str
    act: Act


def job_put(kind: str, change: Callable[[dict[str, Any]], None]) -> Act:
    def act(w: World) -> object:
        job = stored_job(w, kind)
        change(job)
        return client.BatchV1Api(w.jobs_admin).replace_namespaced_job(
            job["metadata"]["name"], JOBS_NS, job
        )

    return act


def pod_put(kind: str, change: Callable[[World, dict[str, Any]], None]) -> Act:
    def act(w: World) -> object:
        pod = stored_pod(w, kind)
        change(w, pod)
        return client.CoreV1Api(w.jobs_admin).replace_namespaced_pod(w.pods[kind], JOBS_NS, pod)

    return act


def job_create(kind: JobKind, who: str, change: Callable[[dict[str, Any]], None]) -> Act:
    def act(w: World) -> object:
        job = guard_job(kind, NODE, uuid.uuid4().hex)
        change(job)
        return create(w.api(who), job)

    return act


def setter(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc.setdefault(key, {})
        doc[path[-1]] = value

    return change


def dropper(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc.pop(path[-1], None)

    return change


JOB_SPEC = "an admitted Job's spec never changes; changed: spec."
JOB_META = "an admitted Job's metadata never changes"
POD_SPEC = "an admitted Pod's spec never changes; changed: spec."
POD_META = "an admitted Pod's metadata never changes"
POD_OWNERS = "an admitted Pod's ownerReferences never change"
NAME_NODE = "the Job's name must be made for its node"
PULL = "imagePullSecrets must be at most 8 entries, each only a Secret name"
VALUES = "the guard's values are printable ASCII on one line, at most 1024 bytes; not: "


def _job_update_rows() -> list[Row]:
    reason, node = f"{K.prefix}reason", K.node_label
    changes: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
        (
            "ttl-1",
            setter("spec", "ttlSecondsAfterFinished", value=1),
            JOB_SPEC + "ttlSecondsAfterFinished",
        ),
        (
            "ttl-30-days",
            setter("spec", "ttlSecondsAfterFinished", value=2592000),
            JOB_SPEC + "ttlSecondsAfterFinished",
        ),
        (
            "deadline-1",
            setter("spec", "activeDeadlineSeconds", value=1),
            JOB_SPEC + "activeDeadlineSeconds",
        ),
        (
            "deadline-2",
            setter("spec", "activeDeadlineSeconds", value=2),
            JOB_SPEC + "activeDeadlineSeconds",
        ),
        (
            "deadline-3600",
            setter("spec", "activeDeadlineSeconds", value=3600),
            JOB_SPEC + "activeDeadlineSeconds",
        ),
        (
            "annotation-added",
            setter("metadata", "annotations", "team.example.com/x", value="y"),
            JOB_META,
        ),
        (
            "last-applied-added",
            setter(
                "metadata",
                "annotations",
                "kubectl.kubernetes.io/last-applied-configuration",
                value="{}",
            ),
            JOB_META,
        ),
        ("reason-rewritten", setter("metadata", "annotations", reason, value="xid-13"), JOB_META),
        ("reason-removed", dropper("metadata", "annotations", reason), JOB_META),
        (
            "node-annotation-rewritten",
            setter("metadata", "annotations", node, value="gpu-z"),
            JOB_META,
        ),
        ("annotations-removed", dropper("metadata", "annotations"), JOB_META),
        ("label-added", setter("metadata", "labels", "team.example.com/x", value="y"), "refused: "),
    ]
    return [
        Row(
            f"job-update-{kind}-{name}",
            "jobs-ns-admin",
            kind_policy(kind, "job"),
            words,
            job_put(kind, change),
        )
        for kind in KINDS
        for name, change, words in changes
    ]


def _adopted_by_other(w: World, pod: dict[str, Any], kind: str) -> None:
    """The route: no owners and another Job's labels, for its controller to adopt."""
    other = w.others[kind]["metadata"]
    pod["metadata"].pop("ownerReferences", None)
    labels = pod["metadata"]["labels"]
    for key in ("batch.kubernetes.io/job-name", "job-name"):
        labels[key] = other["name"]
    for key in ("batch.kubernetes.io/controller-uid", "controller-uid"):
        labels[key] = other["uid"]


def _adopting(kind: str) -> Callable[[World, dict[str, Any]], None]:
    def change(w: World, pod: dict[str, Any]) -> None:
        _adopted_by_other(w, pod, kind)

    return change


def _pod_update_rows() -> list[Row]:
    def owners_removed(w: World, pod: dict[str, Any]) -> None:
        pod["metadata"].pop("ownerReferences")

    def owner_retargeted(w: World, pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"][0]["uid"] = str(uuid.uuid4())

    def owner_not_controller(w: World, pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"][0]["controller"] = False

    def relabelled(w: World, pod: dict[str, Any]) -> None:
        labels = pod["metadata"]["labels"]
        labels["batch.kubernetes.io/controller-uid"] = labels["controller-uid"] = "x"

    def generate_name(w: World, pod: dict[str, Any]) -> None:
        pod["metadata"]["generateName"] = pod["metadata"]["generateName"] + "x-"

    def label_added(w: World, pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"]["team.example.com/x"] = "y"

    def toleration(w: World, pod: dict[str, Any]) -> None:
        pod["spec"]["tolerations"].append(
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            }
        )

    def deadline(w: World, pod: dict[str, Any]) -> None:
        pod["spec"]["activeDeadlineSeconds"] = 1

    def image(w: World, pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0]["image"] = "busybox:1.36"

    changes: list[tuple[str, Callable[[World, dict[str, Any]], None], str]] = [
        ("owners-removed", owners_removed, POD_OWNERS),
        ("owner-retargeted", owner_retargeted, POD_OWNERS),
        ("owner-not-controller", owner_not_controller, POD_OWNERS),
        ("uid-relabelled", relabelled, "refused: "),
        ("generate-name", generate_name, "refused: "),
        ("label-added", label_added, "refused: "),
        ("toleration-added", toleration, POD_SPEC + "tolerations"),
        ("deadline", deadline, "refused: "),
        ("image", image, "refused: "),
    ]
    rows = [
        Row(
            f"pod-update-{kind}-{name}",
            "jobs-ns-admin",
            kind_policy(kind, "pod"),
            words,
            pod_put(kind, change),
        )
        for kind in KINDS
        for name, change, words in changes
    ]
    for kind in KINDS:
        adopt = pod_put(kind, _adopting(kind))
        # The shape refuses it first (the Pod's name no longer starts with its Job's).
        rows.append(
            Row(
                f"pod-update-{kind}-adopted-by-another-job",
                "jobs-ns-admin",
                kind_policy(kind, "pod"),
                "refused: ",
                adopt,
            )
        )
    return rows


def _renamed(kind: JobKind, name: str) -> Callable[[dict[str, Any]], None]:
    return setter("metadata", "name", value=name)


def _job_name_rows() -> list[Row]:
    rows = []
    for kind in KINDS:
        digest = job_name(kind, NODE, "x")[-8:]
        head = job_name(kind, NODE, "x")[:7]
        names = {
            "other-node": job_name(kind, "gpu-cat-b", "x"),
            "node-prefix-only": f"{head}gpu-cat-{digest}",
            "node-extended": f"{head}{NODE}x-{digest}",
            "no-node": f"{head}{digest}",
            "dotted-node": f"{head}gpu-cat-a-b-{digest}",
        }
        for who in ("guard-token", "jobs-ns-admin", "create-only"):
            for label, name in names.items():
                rows.append(
                    Row(
                        f"job-name-{kind}-{label}-{who}",
                        who,
                        kind_policy(kind, "job"),
                        NAME_NODE,
                        job_create(kind, who, _renamed(kind, name)),
                    )
                )
    return rows


def _pod_node_rows() -> list[Row]:
    def moved(kind: str) -> Act:
        def act(w: World) -> object:
            pod = controller_pod(stored_job(w, kind))
            pod["spec"]["nodeName"] = "gpu-cat-b"
            command = pod["spec"]["containers"][0]["command"]
            command[:] = ["gpu-cat-b" if word == NODE else word for word in command]
            pod["metadata"]["labels"][K.node_label] = "gpu-cat-b"
            return create(w.controller, pod)

        return act

    def bare(kind: str) -> Act:
        def act(w: World) -> object:
            return create(w.create_only, controller_pod(stored_job(w, kind)))

        return act

    return [
        *(
            Row(
                f"pod-node-{k}-other-node",
                "job-controller",
                kind_policy(k, "pod"),
                NAME_NODE,
                moved(k),
            )
            for k in KINDS
        ),
        *(
            Row(
                f"pod-create-only-{k}-in-shape",
                "create-only",
                "gpu-node-guard-jobs-namespace",
                "Pods here are created only by the controller of their kind",
                bare(k),
            )
            for k in KINDS
        ),
    ]


POD = ("spec", "template", "spec", "imagePullSecrets")


def _pull_secret_rows() -> list[Row]:
    nine = [{"name": f"regcred-{i}"} for i in range(9)]
    rows = []
    for kind in KINDS:
        for who in ("jobs-ns-admin", "create-only"):
            rows.append(
                Row(
                    f"pull-secrets-{kind}-nine-{who}",
                    who,
                    kind_policy(kind, "job"),
                    PULL,
                    job_create(kind, who, setter(*POD, value=nine)),
                )
            )
        rows.append(
            Row(
                f"pull-secrets-{kind}-more-than-a-name",
                "create-only",
                kind_policy(kind, "job"),
                PULL,
                job_create(kind, "create-only", setter(*POD, value=[{"name": "Reg_Cred"}])),
            )
        )
    return rows


FREE_KEYS = (
    K.cancelled,
    K.returned,
    K.loadtest_result,
    K.conformance_result,
    K.conformance_failed,
    K.onboarding_failed,
)
BAD_VALUES = {
    "newline": "2026-03-02T04:10:00Z ok\nforged line",
    "escape": "2026-03-02T04:10:00Z \x1b[2Jok",
    "tab": "2026-03-02T04:10:00Z\tok",
    "non-ascii": "2026-03-02T04:10:00Z ok \u2028",
    "1025-bytes": "x" * 1025,
    "200-kB": "x" * 200_000,
}

FORGED_FORMS = {
    "free-text": "passed, trust me",
    "two-records": "failed job/gng-lt-a at 2026-03-02T04:10:00Z 2026-03-02T04:10:00Z job/x y",
}


def _annotate(node: Callable[[World], str], notes: dict[str, Any], **spec: Any) -> Act:
    def act(w: World) -> object:
        body: dict[str, Any] = {"metadata": {"annotations": notes}}
        if spec:
            body["spec"] = spec
        return client.CoreV1Api(w.guard).patch_node(node(w), body, _content_type=MERGE_PATCH)

    return act


def _gpu(w: World) -> str:
    return w.gpu_node


def _cpu(w: World) -> str:
    return w.cpu_node


def _node_rows() -> list[Row]:
    scope = "gpu-node-guard-node-scope"
    rows = [
        Row(
            f"node-value-{key.removeprefix(K.prefix)}-{label}",
            "guard-token",
            scope,
            VALUES,
            _annotate(_gpu, {key: value}),
        )
        for key in FREE_KEYS
        for label, value in BAD_VALUES.items()
    ]
    # One printable line, yet not the form the guard writes: refused by the record's own rule.
    result = "failed job/<name> at <time>"
    failed = "<time> job/<name> <item>[,<item>...]"
    rows += [
        Row(
            f"node-form-{key.removeprefix(K.prefix)}-{label}",
            "guard-token",
            scope,
            f"the guard writes {key} only as {form}",
            _annotate(_gpu, {key: value}),
        )
        for key, form in (
            (K.loadtest_result, result),
            (K.conformance_result, result),
            (K.conformance_failed, failed),
            (K.onboarding_failed, failed),
        )
        for label, value in FORGED_FORMS.items()
    ]
    rows += [
        Row(
            "hold-on-a-cpu-node",
            "guard-token",
            scope,
            f"the guard adds {K.hold} only on a node with nvidia.com/gpu capacity",
            _annotate(_cpu, {K.hold: "3rd Xid 79"}),
        ),
        Row(
            "hold-with-a-newline",
            "guard-token",
            scope,
            VALUES,
            _annotate(_gpu, {K.hold: "3rd Xid 79\nforged"}),
        ),
        Row(
            "cordon-reason-with-a-newline",
            "guard-token",
            scope,
            VALUES,
            _annotate(
                _gpu, {K.reason: "xid-79\nforged", K.at: "2026-03-02T04:10:00Z"}, unschedulable=True
            ),
        ),
    ]
    return rows


def _archive(name: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": GUARD_NS,
            "labels": {APP_LABEL: APP_NAME, COMPONENT_LABEL: "ledger-archive"},
        },
        "data": {"gpu-cat-a": "x" * size},
    }


TOO_BIG = 900_000
ARCHIVE_WORDS = (
    f"an archive holds at most {Settings().ledger_archive_bytes + ARCHIVE_SLACK_BYTES} bytes"
)


def _archive_rows() -> list[Row]:
    def created(who: str) -> Act:
        def act(w: World) -> object:
            name = f"gpu-fault-ledger-archive-{900000 + len(who)}"
            return create(w.api(who), _archive(name, TOO_BIG))

        return act

    def grown(w: World) -> object:
        name = "gpu-fault-ledger-archive-900100"
        core = client.CoreV1Api(w.admin)
        if not _exists(lambda: core.read_namespaced_config_map(name, GUARD_NS)):
            create(w.guard, _archive(name, 10))
        guard = client.CoreV1Api(w.guard)  # get and update: the guard's rights on its ledger
        archive = guard.read_namespaced_config_map(name, GUARD_NS)
        archive.data = {"gpu-cat-a": "x" * TOO_BIG}
        return guard.replace_namespaced_config_map(name, GUARD_NS, archive)

    ledger = "gpu-node-guard-ledger-archive-size"  # the ledger's one check that reads settings
    return [
        Row("archive-900-kB-created", "guard-token", ledger, ARCHIVE_WORDS, created("guard-token")),
        Row(
            "archive-900-kB-created-by-the-namespace-admin",
            "guard-ns-admin",
            ledger,
            ARCHIVE_WORDS,
            created("guard-ns-admin"),
        ),
        Row("archive-grown-to-900-kB", "guard-token", ledger, ARCHIVE_WORDS, grown),
    ]


def _exists(call: Callable[[], object]) -> bool:
    try:
        call()
    except ApiException:
        return False
    return True


def node_event(regarding: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"cat.{uuid.uuid4().hex[:12]}",
            "namespace": EVENTS_NS,
            "labels": {APP_LABEL: APP_NAME},
        },
        "eventTime": "2026-12-01T00:00:00.000000Z",
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": "gpu-node-guard",
        "action": "Cordon",
        "reason": "GPUFault",
        "type": "Warning",
        "note": "Xid 79",
        "regarding": regarding,
    }
    body.update(fields)
    return body


NODE_REF = {"apiVersion": "v1", "kind": "Node", "name": "gpu-cat-a"}


def _event_rows() -> list[Row]:
    def sent(body: dict[str, Any]) -> Act:
        def act(w: World) -> object:
            return create(w.guard, copy.deepcopy(body))

        return act

    scope, about = "gpu-node-guard-guard-scope", "the guard's Events are regarding a Node (v1)"
    by = f"the guard's Events are reported by {REPORTING_CONTROLLER}"
    refs = {
        "pod": {"apiVersion": "v1", "kind": "Pod", "name": "x", "namespace": JOBS_NS},
        "configmap": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "gpu-fault-ledger",
            "namespace": GUARD_NS,
        },
        "namespace": {"apiVersion": "v1", "kind": "Namespace", "name": JOBS_NS},
        "secret": {"apiVersion": "v1", "kind": "Secret", "name": "x", "namespace": "default"},
        "deployment": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "x",
            "namespace": "default",
        },
        "node-of-another-group": {"apiVersion": "example.com/v1", "kind": "Node", "name": "x"},
        "namespaced-node": {**NODE_REF, "namespace": "default"},
    }
    rows = [
        Row(f"event-about-a-{k}", "guard-token", scope, about, sent(node_event(ref)))
        for k, ref in refs.items()
    ]
    related = {"apiVersion": "v1", "kind": "Secret", "name": "x", "namespace": "default"}
    rows.append(
        Row(
            "event-with-a-related-secret",
            "guard-token",
            scope,
            about,
            sent(node_event(NODE_REF, related=related)),
        )
    )
    for label, controller in (("kubelet", "kubelet"), ("another", "example.com/other")):
        rows.append(
            Row(
                f"event-as-{label}",
                "guard-token",
                scope,
                by,
                sent(node_event(NODE_REF, reportingController=controller)),
            )
        )
    return rows


ROWS = [
    *_job_update_rows(),
    *_pod_update_rows(),
    *_job_name_rows(),
    *_pod_node_rows(),
    *_pull_secret_rows(),
    *_node_rows(),
    *_archive_rows(),
    *_event_rows(),
]


def test_the_catalogue_is_large() -> None:
    assert len(ROWS) >= 150, len(ROWS)
    assert len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_out_of_shape_write_is_refused_by_its_policy(world: World, row: Row) -> None:
    status, message = refusal(lambda: row.act(world))
    refused = status == 422 and f"ValidatingAdmissionPolicy '{row.policy}'" in message
    tally.record(row.who, "catalogue writes", refused)
    assert refused, (status, message)
    assert row.words in message, message


# ── in shape: admitted ───────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("node", [LONG_NODE, DASH_NODE], ids=["long", "dash-at-the-cut"])
@pytest.mark.parametrize(
    ("kind", "who"),
    [
        (kind, who)
        for kind in KINDS
        for who in ("guard-token", "jobs-ns-admin", "create-only")
        # only the guard creates fence Jobs (test_job_shapes.py, the fence rows)
        if kind != "fence" or who == "guard-token"
    ],
)
def test_a_job_named_for_a_long_node_is_admitted(
    world: World, kind: JobKind, node: str, who: str
) -> None:
    job = guard_job(kind, node, uuid.uuid4().hex)
    stored = as_dict(create(world.api(who), job))
    assert stored["metadata"]["name"] == job["metadata"]["name"]
    client.BatchV1Api(world.admin).delete_namespaced_job(job["metadata"]["name"], JOBS_NS)


@pytest.mark.parametrize("kind", KINDS)
def test_pull_secrets_are_admitted_on_jobs_and_their_pods(world: World, kind: JobKind) -> None:
    job = guard_job(kind, NODE, uuid.uuid4().hex)
    secrets = [{"name": f"regcred-{i}"} for i in range(8)]
    setter(*POD, value=secrets)(job)
    stored = dict(
        world.admin.sanitize_for_serialization(
            client.BatchV1Api(world.admin).read_namespaced_job(
                as_dict(create(world.guard, job))["metadata"]["name"], JOBS_NS
            )
        )
    )
    pod = create(world.controller, controller_pod(stored))
    assert [s["name"] for s in as_dict(pod)["spec"]["imagePullSecrets"]] == [
        s["name"] for s in secrets
    ]
    client.BatchV1Api(world.admin).delete_namespaced_job(job["metadata"]["name"], JOBS_NS)


LONGEST = {  # the longest value of each free key in the form the guard writes it
    K.loadtest_result: f"failed job/{'x' * 63} at 2026-03-02T04:10:00Z",
    K.conformance_result: f"failed job/{'x' * 63} at 2026-03-02T04:10:00Z",
    K.conformance_failed: f"2026-03-02T04:10:00Z job/{'x' * 63} " + ",".join(["y" * 51] * 17),
    K.onboarding_failed: f"2026-03-02T04:10:00Z job/{'x' * 63} " + ",".join(["y" * 51] * 17),
}


@pytest.mark.parametrize("key", FREE_KEYS)
def test_the_guard_writes_a_long_printable_value(world: World, key: str) -> None:
    value = LONGEST.get(key, "x " * 512)
    assert len(value) <= 1024
    _annotate(_gpu, {key: value})(world)
    _annotate(_gpu, {key: None})(world)


def test_the_guard_holds_a_gpu_node_and_archives_within_the_bound(world: World) -> None:
    _annotate(_gpu, {K.hold: "3rd Xid 79 on GPU-5f1c: replace the card"})(world)
    client.CoreV1Api(world.admin).patch_node(
        world.gpu_node, {"metadata": {"annotations": {K.hold: None}}}, _content_type=MERGE_PATCH
    )
    name = "gpu-fault-ledger-archive-900200"
    create(world.guard, _archive(name, 700_000))
    client.CoreV1Api(world.admin).delete_namespaced_config_map(name, GUARD_NS)


def test_the_guards_own_node_event_is_admitted(world: World) -> None:
    body = node_event(NODE_REF)
    create(world.guard, body)
    client.EventsV1Api(world.admin).delete_namespaced_event(body["metadata"]["name"], EVENTS_NS)


def test_the_job_controller_still_removes_its_finalizer(world: World) -> None:
    """What the Job controller does to its Pods after creation stays possible."""
    kind = "evidence"
    job = stored_job(world, kind, other=True)
    pod = as_dict(create(world.controller, controller_pod(job)))
    name = pod["metadata"]["name"]
    core = client.CoreV1Api(world.controller)
    core.patch_namespaced_pod(name, JOBS_NS, {"metadata": {"finalizers": None}})
    core.patch_namespaced_pod(name, JOBS_NS, {"metadata": {"annotations": {"cni": "10.0.0.9"}}})
    client.CoreV1Api(world.admin).delete_namespaced_pod(name, JOBS_NS)
