"""The guard's DRA writes, DeviceTaintRules and its device load tests' ResourceClaims, narrowed to
its own objects; `-device-claims-others` keeps everyone else from making, deleting or relabelling a
claim in the jobs namespace (docs/security.md, claim swap). On DELETE `object` is null."""

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
