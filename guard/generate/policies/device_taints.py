"""The guard's DRA writes: its DeviceTaintRules and its device load tests' ResourceClaims.

RBAC lets the guard create and delete DeviceTaintRules (cluster-wide) and ResourceClaims (in the
jobs namespace); these policies narrow that to its own objects, whoever's token it is.

DeviceTaintRules, for the guard's ServiceAccount (case list):
  create  → only with the guard's label (app.kubernetes.io/name, component device-taint), a
            selector of exactly one device (driver gpu.nvidia.com, a pool and a device, nothing
            else), the taint <prefix>fault=xid-<n> with effect NoSchedule (never NoExecute: the
            guard does not evict)
  update  → refused (the guard creates and deletes its rules, never changes one)
  delete  → only a rule carrying the guard's label (a person's rule is never the guard's)
ResourceClaims in the jobs namespace, for the guard's ServiceAccount:
  create  → only with the guard's label, one request of one device of class gpu.nvidia.com,
            selected by one CEL selector naming exactly one GPU (driver and UUID, as
            jobs/device-claim.yaml.j2 writes it), tolerating exactly the guard's taint
            (NoSchedule) and nothing else
  update  → refused; delete → only a claim carrying the guard's label
ResourceClaims in the jobs namespace, for everyone else (`-device-claims-others`): a claim
there is a device load test's, and only the guard makes one (else a claim of the guard's name
could hand its load test another GPU; the guard also checks the claim's uid, docs/security.md):
  create  → refused
  update  → only what the scheduler and the resourceclaim controller change (finalizers, owner
            references; status is its own subresource): labels and annotations stay
  delete  → refused for a claim carrying the guard's label, unless the namespace is being
            deleted (a person's claim, made while this policy was absent, may be deleted)
On DELETE `object` is null and `oldObject` the claim as stored.
"""

from __future__ import annotations

from typing import Any

from guard.generate.policies.cel import Validation, quote, regex
from guard.generate.policies.common import PREFIX, guard_user, match, policy, rule
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    DEVICE_TAINT_COMPONENT,
    DRA_DEVICE_CLASS,
    DRA_DRIVER,
    Annotations,
)
from guard.settings import Settings

_XID_VALUE = r"^xid-[1-9][0-9]{0,3}$"


def _mine(obj: str) -> str:
    """CEL: `obj` (object or oldObject) carries the guard's two labels."""
    labels = f"{obj}.metadata.?labels.orValue({{}})"
    return (
        f"{labels}[?{quote(APP_LABEL)}].orValue('') == {quote(APP_NAME)} && "
        f"{labels}[?{quote(COMPONENT_LABEL)}].orValue('') == "
        f"{quote(DEVICE_TAINT_COMPONENT)}"
    )


def _lifecycle(what: str) -> list[Validation]:
    return [
        Validation(
            "request.operation != 'UPDATE'",
            f"the guard creates and deletes its {what}, never changes one",
        ),
        Validation(
            f"request.operation != 'DELETE' || ({_mine('oldObject')})",
            f"the guard deletes only its own {what} (its label); this one is not",
        ),
        Validation(
            f"request.operation != 'CREATE' || ({_mine('object')})",
            f"the guard's {what} carry its labels {APP_LABEL}={APP_NAME} and "
            f"{COMPONENT_LABEL}={DEVICE_TAINT_COMPONENT}",
        ),
    ]


def _rule_checks(keys: Annotations) -> list[Validation]:
    create = "request.operation != 'CREATE' || "
    sel, taint = "object.spec.?deviceSelector.orValue({})", "object.spec.?taint.orValue({})"
    return [
        Validation(
            f"{create}({sel}.?driver.orValue('') == {quote(DRA_DRIVER)} && "
            f"{sel}.?pool.orValue('') != '' && {sel}.?device.orValue('') != '' && "
            f"{sel}.all(k, k in ['driver', 'pool', 'device']))",
            f"a guard DeviceTaintRule selects exactly one device: driver {DRA_DRIVER}, a pool "
            "and a device, nothing else",
        ),
        Validation(
            f"{create}({taint}.?key.orValue('') == {quote(keys.fault_taint)} && "
            f"{taint}.?effect.orValue('') == 'NoSchedule' && "
            f"{taint}.?value.orValue('').matches({regex(_XID_VALUE)}))",
            f"a guard device taint is {keys.fault_taint}=xid-<n> with effect NoSchedule "
            "(never NoExecute: the guard does not evict)",
        ),
    ]


# The one selector of a guard claim, as jobs/device-claim.yaml.j2 writes it: one GPU by UUID.
_DRIVER_RE = DRA_DRIVER.replace(".", r"\.")
_SELECTOR = (
    rf'^device\.driver == "{_DRIVER_RE}" && '
    rf'device\.attributes\["{_DRIVER_RE}"\]\.uuid == "GPU-[0-9a-fA-F-]{{36}}"$'
)


def _claim_checks(keys: Annotations) -> list[Validation]:
    create = "request.operation != 'CREATE' || "
    requests = "object.spec.?devices.?requests.orValue([])"
    one = f"{requests}[0].?exactly.orValue({{}})"
    tolerated = f"{one}.?tolerations.orValue([])"
    selectors = f"{one}.?selectors.orValue([])"
    return [
        Validation(
            f"{create}(size({requests}) == 1 && {one}.?deviceClassName.orValue('') == "
            f"{quote(DRA_DEVICE_CLASS)} && {one}.?allocationMode.orValue('ExactCount') == "
            f"'ExactCount' && {one}.?count.orValue(1) == 1 && "
            "size(object.spec.devices.?constraints.orValue([])) == 0 && "
            "size(object.spec.devices.?config.orValue([])) == 0)",
            f"a guard load-test claim asks for exactly one device of class {DRA_DEVICE_CLASS}",
        ),
        Validation(
            f"{create}(size({selectors}) == 1 && {selectors}.all(x, "
            f"x.?cel.?expression.orValue('').matches({regex(_SELECTOR)})))",
            "a guard load-test claim selects exactly one GPU: one CEL selector naming its driver "
            f"{DRA_DRIVER} and its UUID",
        ),
        Validation(
            f"{create}(size({tolerated}) == 1 && {tolerated}.all(t, "
            f"t.?key.orValue('') == {quote(keys.fault_taint)} && "
            "t.?operator.orValue('Equal') == 'Equal' && "
            f"t.?value.orValue('').matches({regex(_XID_VALUE)}) && "
            "t.?effect.orValue('') == 'NoSchedule'))",
            f"a guard load-test claim tolerates only the guard's taint {keys.fault_taint} "
            "(NoSchedule)",
        ),
    ]


def _others_checks() -> list[Validation]:
    same = " && ".join(
        f"object.metadata.?{f}.orValue({{}}) == oldObject.metadata.?{f}.orValue({{}})"
        for f in ("labels", "annotations")
    )
    return [
        Validation(
            "request.operation != 'CREATE'",
            "only gpu-node-guard's ServiceAccount creates ResourceClaims in its jobs namespace "
            "(its device load tests)",
        ),
        Validation(
            f"request.operation != 'UPDATE' || ({same})",
            "the labels and annotations of a ResourceClaim in gpu-node-guard's jobs namespace "
            "are the guard's",
        ),
        Validation(
            f"request.operation != 'DELETE' || !({_mine('oldObject')}) || "
            "has(namespaceObject.metadata.deletionTimestamp)",
            "only gpu-node-guard's ServiceAccount deletes its load-test ResourceClaims "
            "(docs/runbook.md, foreign load-test claim)",
        ),
    ]


def _constraints(resource: str, namespace: str = "") -> dict[str, Any]:
    return match([rule("resource.k8s.io", [resource], ["CREATE", "UPDATE", "DELETE"])], namespace)


def policies(s: Settings) -> list[dict[str, Any]]:
    keys = Annotations(s.annotation_prefix)
    user = quote(guard_user(s))
    is_guard = [("is-guard", f"request.userInfo.username == {user}")]
    claims = _constraints("resourceclaims", s.jobs_namespace)
    claim_who = [("who", "'ResourceClaim ' + request.namespace + '/' + request.name")]
    return [
        *policy(
            f"{PREFIX}-device-taints",
            _constraints("devicetaintrules"),
            [("who", "'DeviceTaintRule ' + request.name")],
            [*_lifecycle("DeviceTaintRules"), *_rule_checks(keys)],
            is_guard,
        ),
        *policy(
            f"{PREFIX}-device-claims",
            claims,
            claim_who,
            [*_lifecycle("ResourceClaims"), *_claim_checks(keys)],
            is_guard,
        ),
        *policy(
            f"{PREFIX}-device-claims-others",
            claims,
            claim_who,
            _others_checks(),
            [("not-guard", f"request.userInfo.username != {user}")],
        ),
    ]
