"""Pieces every generated policy shares: the document skeleton and its binding."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from guard.generate.policies.cel import Validation, quote
from guard.generate.policies.params import PARAM_KIND
from guard.names import APP_LABEL, APP_NAME, COMPONENT_LABEL
from guard.settings import Settings

POLICY_API = "admissionregistration.k8s.io/v1"
PREFIX = "gpu-node-guard"  # of every policy name
POLICY_COMPONENT = "admission-policy"
# The kind an object in the jobs namespace claims to be (its component label; '' without one).
COMPONENT_OF = f"object.metadata.?labels[?{quote(COMPONENT_LABEL)}].orValue('')"


def guard_user(s: Settings) -> str:
    """The username of the guard's ServiceAccount (the CronJob's pods)."""
    return f"system:serviceaccount:{s.namespace}:{PREFIX}"


def rule(group: str, resources: Sequence[str], operations: Sequence[str]) -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": ["v1"],
        "resources": list(resources),
        "operations": list(operations),
        # What the API server fills in, written out so a server-side apply is a no-op.
        "scope": "*",
    }


def in_namespace(namespace: str) -> dict[str, Any]:
    """Match objects of one namespace (the label the API server sets on every namespace)."""
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


def scoped(namespace: str) -> dict[str, Any]:
    """The match of a policy on one namespace's objects (with its resourceRules)."""
    return {
        "namespaceSelector": in_namespace(namespace),
        "matchPolicy": "Equivalent",
        "objectSelector": {},
    }


def match(rules: list[dict[str, Any]], namespace: str = "") -> dict[str, Any]:
    """matchConstraints of `rules`, in every namespace or in `namespace`; both selectors written
    as the API stores them, so a server-side apply after a client-side one takes over nothing."""
    return {
        "matchPolicy": "Equivalent",
        "namespaceSelector": in_namespace(namespace) if namespace else {},
        "objectSelector": {},
        "resourceRules": rules,
    }


def sent_by_guard(s: Settings) -> tuple[str, str]:
    """The match condition of a policy on the guard's own requests."""
    return ("sent-by-the-guard", f"request.userInfo.username == {quote(guard_user(s))}")


def policy(
    name: str,
    constraints: dict[str, Any],
    variables: Sequence[tuple[str, str]],
    validations: Sequence[Validation],
    conditions: Sequence[tuple[str, str]] = (),
    params: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (fail closed) and its Deny binding; with `params` (a
    paramRef: guard/generate/policies/params.py), the policy reads the site's settings ConfigMap."""
    spec: dict[str, Any] = {"failurePolicy": "Fail"}
    if params is not None:
        spec["paramKind"] = dict(PARAM_KIND)
    spec["matchConstraints"] = constraints
    if conditions:
        spec["matchConditions"] = [{"name": n, "expression": e} for n, e in conditions]
    spec["variables"] = [{"name": n, "expression": e} for n, e in variables]
    spec["validations"] = [v.as_dict("variables.who") for v in validations]

    bound: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if params is not None:
        bound["paramRef"] = dict(params)
    # The policies go first: a Job, Pod or DaemonSet with a new image is refused until the policy
    # naming that image is in place (docs/deploy.md, "Upgrade"). ArgoCD syncs them a wave ahead;
    # with kubectl, the label selects them: `kubectl apply -k … -l <component label>`.
    meta = {
        "name": name,
        "labels": {APP_LABEL: APP_NAME, COMPONENT_LABEL: POLICY_COMPONENT},
        "annotations": {"argocd.argoproj.io/sync-wave": "-1"},
    }
    return [
        {"apiVersion": POLICY_API, "kind": kind, "metadata": copy.deepcopy(meta), "spec": body}
        for kind, body in (
            ("ValidatingAdmissionPolicy", spec),
            ("ValidatingAdmissionPolicyBinding", bound),
        )
    ]
