"""Access the guard's writes need beyond what manifests/ and policies/ grant today.

The guard writes events.k8s.io Events in `default` by name (get, then create or patch the
series) and lists its own Events there; it creates ledger archive ConfigMaps
``gpu-fault-ledger-archive-<n>`` beside the ledger. manifests/ and policies/ (owner: security)
are to grant exactly that: a Role in `default` with create, patch, get, list on events.k8s.io
`events`, and the ConfigMap policy allowing the archives on CREATE. Until they do, the tests that
run the guard add it here; once they do, `grant_pending_access` finds nothing to add.
"""

from __future__ import annotations

import time
import uuid

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.apiserver.kube import GUARD_USER, ControlPlane

NS = "gpu-node-guard"
ROLE = "gpu-node-guard-events-pending"
ARCHIVE_RULE = (
    "(request.operation == 'CREATE' && "
    "object.metadata.?name.orValue('').matches('^gpu-fault-ledger-archive-[1-9][0-9]{0,5}$') && "
    "object.metadata.?labels[?'app.kubernetes.io/component'].orValue('') == 'ledger-archive')"
)
_TIMEOUT_S = 60.0


def grant_pending_access(plane: ControlPlane, admin: client.ApiClient) -> None:
    with plane.impersonating(GUARD_USER) as guard:
        if not _may_write_events(guard):
            _events_role(admin)
        if not _may_create_archive(guard):
            _allow_archives(admin)
        deadline = time.monotonic() + _TIMEOUT_S
        while not (_may_write_events(guard) and _may_create_archive(guard)):
            if time.monotonic() > deadline:
                raise RuntimeError("guard access for Events and ledger archives not in effect")
            time.sleep(0.2)


def _may_write_events(guard: client.ApiClient) -> bool:
    api = client.AuthorizationV1Api(guard)
    for verb in ("create", "patch", "get", "list"):
        attributes = {"namespace": "default", "verb": verb, "group": "events.k8s.io",
                      "resource": "events"}  # fmt: skip
        answer = api.create_self_subject_access_review({"spec": {"resourceAttributes": attributes}})
        if not answer.status.allowed:
            return False
    return True


def _may_create_archive(guard: client.ApiClient) -> bool:
    body = {
        "metadata": {
            "name": "gpu-fault-ledger-archive-1",
            "labels": {"app.kubernetes.io/name": "gpu-node-guard",
                       "app.kubernetes.io/component": "ledger-archive"},
        },
        "data": {"probe": f"{uuid.uuid4().hex}\n"},
    }  # fmt: skip
    try:
        client.CoreV1Api(guard).create_namespaced_config_map(NS, body, dry_run="All")
    except ApiException as exc:
        return exc.status == 409  # one exists already: the create itself was allowed
    return True


def _events_role(admin: client.ApiClient) -> None:
    rbac = client.RbacAuthorizationV1Api(admin)
    role = {
        "metadata": {"name": ROLE, "namespace": "default"},
        "rules": [{"apiGroups": ["events.k8s.io"], "resources": ["events"],
                   "verbs": ["create", "patch", "get", "list"]}],
    }  # fmt: skip
    binding = {
        "metadata": {"name": ROLE, "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "gpu-node-guard", "namespace": NS}],
    }
    for create, body in ((rbac.create_namespaced_role, role),
                         (rbac.create_namespaced_role_binding, binding)):  # fmt: skip
        try:
            create("default", body)
        except ApiException as exc:
            if exc.status != 409:
                raise


def _allow_archives(admin: client.ApiClient) -> None:
    api = client.AdmissionregistrationV1Api(admin)
    policy = api.read_validating_admission_policy("gpu-node-guard-configmaps")
    check = policy.spec.validations[0]
    check.expression = f"({check.expression}) || {ARCHIVE_RULE}"
    also = " (and create its archives gpu-fault-ledger-archive-<n>)"
    check.message = f"{check.message}{also}"
    if check.message_expression:
        check.message_expression = f"{check.message_expression} + '{also}'"
    api.replace_validating_admission_policy("gpu-node-guard-configmaps", policy)
