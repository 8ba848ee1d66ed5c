"""Node policies, from guard.names.Annotations: `hold` (no uncordon while it is set), node scope
(what the guard's ServiceAccount may change on a Node) and the onboarding gate (docs/security.md,
"The guard's token cannot" and "Without the settings")."""

from __future__ import annotations

from typing import Any

from guard.generate.policies import params
from guard.generate.policies.cel import Validation, lit, quote, regex
from guard.generate.policies.common import PREFIX, match, policy, rule, sent_by_guard
from guard.generate.policies.shape import changed_keys
from guard.names import GPU_RESOURCE, AnnotationKey, Annotations
from guard.settings import Settings

# Annotations properties that are not guard-written node keys.
_NOT_GUARD_KEYS = {"node_label", "hold", "reset_done", "prefix", "fault_taint"}
_NODE_MATCH = match([rule("", ["nodes"], ["UPDATE"])])
_SYSTEM_META = ("annotations", "managedFields", "resourceVersion", "generation")
_NEW_TAINTS, _OLD_TAINTS = "object.spec.?taints.orValue([])", "oldObject.spec.?taints.orValue([])"
# Exactly one taint gone, every other as it was: all node scope allows, and all the onboarding
# gate's policy looks at (so one policy answers each request).
_ONE_TAINT_REMOVED = f"{_OLD_TAINTS}.exists(x, {_NEW_TAINTS} == {_OLD_TAINTS}.filter(t, t != x))"
# The guard's own values are short, printable, one line (guard/codec/records.py, check_records.py):
# a stolen token may not store escapes, newlines or a ledger's worth of text on a Node.
VALUE_MAX_BYTES = 1024
PRINTABLE = r"^[ -~]*$"
# The guard's result and failure records, in exactly the form it writes them (guard/plan
# return_jobs, device_taint, onboarding; the readers in guard/codec/check_records.py refuse any
# other): a stolen token cannot store another value there for the guard to act on.
_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"
_JOB = r"job/[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?"
_ITEMS = r"[a-z0-9]([-a-z0-9]{0,49}[a-z0-9])?(,[a-z0-9]([-a-z0-9]{0,49}[a-z0-9])?)*"
RESULT_FORM = rf"^failed {_JOB} at {_TIME}$"
FAILED_FORM = rf"^{_TIME} {_JOB} {_ITEMS}$"


def guard_keys(keys: Annotations) -> list[str]:
    """Every node annotation key the guard itself writes: each str property of Annotations
    except the person-only ones (hold is added, never changed: a rule of its own)."""
    names = [n for n, v in vars(Annotations).items() if isinstance(v, property | AnnotationKey)]
    values = [getattr(keys, n) for n in sorted(names) if n not in _NOT_GUARD_KEYS]
    return sorted(v for v in values if isinstance(v, str))


def hold_policy(s: Settings) -> list[dict[str, Any]]:
    key = Annotations(s.annotation_prefix).hold
    uncordon = (
        "oldObject.spec.?unschedulable.orValue(false) && !object.spec.?unschedulable.orValue(false)"
    )
    variables = [
        ("who", "'node ' + object.metadata.name"),
        (
            "hold",
            f"object.metadata.?annotations[?{quote(key)}].or("
            f"oldObject.metadata.?annotations[?{quote(key)}])",
        ),
    ]
    check = Validation(
        "!variables.hold.hasValue()",
        f"uncordon while annotation {key} is set (",
        f"'\"' + variables.hold.value() + '\"). Remove the annotation first (kubectl annotate "
        f"node ' + object.metadata.name + ' {key}-), then uncordon.'",
    )
    return policy(f"{PREFIX}-hold", _NODE_MATCH, variables, [check], [("is-uncordon", uncordon)])


def node_scope_policy(s: Settings) -> list[dict[str, Any]]:
    keys = Annotations(s.annotation_prefix)
    mine, cordon_keys = guard_keys(keys), list(keys.cordon_keys)
    old_notes, new_notes = "variables.oldNotes", "variables.newNotes"
    variables = [
        ("who", "'node ' + object.metadata.name"),
        ("oldNotes", "oldObject.metadata.?annotations.orValue({})"),
        ("newNotes", "object.metadata.?annotations.orValue({})"),
        # Keys whose value differs (added, changed or removed) between old and new.
        (
            "changed",
            f"{new_notes}.filter(k, !(k in {old_notes}) || {old_notes}[k] != "
            f"{new_notes}[k]) + {old_notes}.filter(k, !(k in {new_notes}))",
        ),
        ("wasCordoned", "oldObject.spec.?unschedulable.orValue(false)"),
        ("isCordoned", "object.spec.?unschedulable.orValue(false)"),
        ("oldReason", f"{old_notes}[?{quote(keys.reason)}]"),
        ("newReason", f"{new_notes}[?{quote(keys.reason)}]"),
        ("gpus", f"oldObject.status.?capacity[?{quote(GPU_RESOURCE)}].orValue('0')"),
    ]
    return policy(
        f"{PREFIX}-node-scope",
        _NODE_MATCH,
        variables,
        [
            *_unchanged(),
            *_annotation_rules(keys, mine, cordon_keys),
            *_lifecycle_rules(keys),
        ],
        [sent_by_guard(s)],
    )


def gate_policy(s: Settings) -> list[dict[str, Any]]:
    """The guard's one taint change is the site's onboarding gate (key, value and effect); with no
    gate, none is removed. Passes without the settings (params.site_param_ref)."""
    is_gate = (
        "t.key == variables.gateKey && t.?value.orValue('') == variables.gateValue && "
        "t.effect == variables.gateEffect"
    )
    check = Validation(
        f"variables.gate != '' && {_NEW_TAINTS} == {_OLD_TAINTS}.filter(t, !({is_gate}))",
        "the guard removes no taint but the onboarding gate (the site's onboarding_taint)",
    )
    return policy(
        f"{PREFIX}-onboarding-gate",
        _NODE_MATCH,
        [("who", "'node ' + object.metadata.name"), *params.gate(s)],
        [check],
        [sent_by_guard(s), ("removes-one-taint", _ONE_TAINT_REMOVED)],
        params.site_param_ref(s),
    )


def _unchanged() -> list[Validation]:
    """No metadata but annotations, no spec but unschedulable, at most one taint removed (the
    onboarding gate: which one is gate_policy's check, the one Node rule needing the settings)."""
    meta = changed_keys("metadata", _SYSTEM_META)
    spec = changed_keys("spec", ("unschedulable", "taints"))
    return [
        Validation(
            f"size({meta}) == 0",
            "the guard changes no node metadata but its annotations (changed: ",
            f"{meta}.join(', ') + ')'",
        ),
        Validation(
            f"size({spec}) == 0",
            "the guard changes nothing in a node's spec but unschedulable (changed: ",
            f"{spec}.join(', ') + ')'",
        ),
        Validation(
            f"{_NEW_TAINTS} == {_OLD_TAINTS} || {_ONE_TAINT_REMOVED}",
            "the guard changes no taint but removing the onboarding gate: one taint removed, "
            "every other as it was",
        ),
    ]


def _lifecycle_rules(keys: Annotations) -> list[Validation]:
    """checked-boot: on a schedulable GPU node outside the guard's cordon; the PCIe links: while
    the guard keeps the node cordoned (its evidence Job reads them after the cordon)."""
    checked, links = quote(keys.checked_boot), quote(keys.pcie_links)
    held = (
        "variables.oldReason.hasValue() && variables.newReason.hasValue() && "
        "variables.wasCordoned && variables.isCordoned"
    )
    return [
        Validation(
            f"!({checked} in variables.changed) || ({checked} in variables.newNotes && "
            "!variables.isCordoned && !variables.newReason.hasValue() && variables.gpus != '0')",
            f"{keys.checked_boot} is written only on a schedulable node with {GPU_RESOURCE} "
            f"capacity that carries no {keys.reason}, and never removed",
        ),
        Validation(
            f"!({links} in variables.changed) || ({links} in variables.newNotes ? ({held}) : "
            "!variables.isCordoned)",
            f"{keys.pcie_links} is written only while the guard keeps the node cordoned "
            "and removed only when the node is schedulable",
        ),
    ]


def _form_rules(keys: Annotations) -> list[Validation]:
    """The result and failure records only in the form the guard writes them."""
    result, failed = "failed job/<name> at <time>", "<time> job/<name> <item>[,<item>...]"
    forms = {
        keys.loadtest_result: (RESULT_FORM, result),
        keys.conformance_result: (RESULT_FORM, result),
        keys.conformance_failed: (FAILED_FORM, failed),
        keys.onboarding_failed: (FAILED_FORM, failed),
    }
    out = []
    for key, (form, shown) in forms.items():
        k = quote(key)
        out.append(
            Validation(
                f"!({k} in variables.changed) || !({k} in variables.newNotes) || "
                f"variables.newNotes[{k}].matches({regex(form)})",
                f"the guard writes {key} only as {shown}",
            )
        )
    return out


def _annotation_rules(keys: Annotations, mine: list[str], cordon: list[str]) -> list[Validation]:
    prefix, hold, allowed = quote(keys.prefix), quote(keys.hold), lit([*mine, keys.hold])
    cordon_now = "!variables.wasCordoned && variables.isCordoned"
    # Every key the guard may write (all Annotations properties, generically) is bounded alike.
    written = f"variables.changed.filter(k, k in {allowed} && k in variables.newNotes)"
    bad = (
        f"size(bytes(variables.newNotes[k])) > {VALUE_MAX_BYTES} || "
        f"!variables.newNotes[k].matches({regex(PRINTABLE)})"
    )
    return [
        Validation(
            f"{written}.all(k, !({bad}))",
            f"the guard's values are printable ASCII on one line, at most {VALUE_MAX_BYTES} "
            "bytes; not: ",
            f"{written}.filter(k, {bad}).join(', ')",
        ),
        *_form_rules(keys),
        Validation(
            f"!({hold} in variables.changed) || variables.gpus != '0'",
            f"the guard adds {keys.hold} only on a node with {GPU_RESOURCE} capacity",
        ),
        Validation(
            f"variables.changed.all(k, k.startsWith({prefix}))",
            f"annotations outside {keys.prefix} belong to others; changed: ",
            f"variables.changed.filter(k, !k.startsWith({prefix})).join(', ')",
        ),
        Validation(
            f"variables.changed.all(k, !k.startsWith({prefix}) || k in {allowed})",
            f"the guard writes only its own keys under {keys.prefix} "
            f"({', '.join(k.removeprefix(keys.prefix) for k in mine)}; and adds hold); not ",
            f"variables.changed.filter(k, k.startsWith({prefix}) && !(k in {allowed})).join(', ')",
        ),
        Validation(
            f"!({hold} in variables.oldNotes) || "
            f"variables.newNotes[?{hold}] == variables.oldNotes[?{hold}]",
            f"the guard may add {keys.hold} but never change or remove one already set",
        ),
        Validation(
            f"!({cordon_now}) || (!variables.oldReason.hasValue() && "
            f"variables.newReason.hasValue() && variables.gpus != '0')",
            f"a cordon by the guard must add its reason {keys.reason} in the same request, "
            f"on a node with {GPU_RESOURCE} capacity, not yet carrying the reason",
        ),
        Validation(
            "!(variables.wasCordoned && !variables.isCordoned) || "
            f"(variables.oldReason.hasValue() && !({hold} in variables.oldNotes))",
            f"the guard uncordons only nodes it cordoned (carrying {keys.reason}) and without "
            f"{keys.hold}",
        ),
        Validation(
            f"variables.changed.all(k, !(k in {lit(cordon)}) || ({cordon_now}) || "
            f"(!(k in variables.newNotes) && !variables.isCordoned))",
            f"the guard's cordon annotations ({', '.join(cordon)}) are written only with the "
            "cordon and removed only when the node is schedulable; changed: ",
            f"variables.changed.filter(k, k in {lit(cordon)}).join(', ')",
        ),
    ]
