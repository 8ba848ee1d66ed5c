"""The fault ledger and its archives (ConfigMaps named <ledger> or <ledger>-archive-<n> in the
guard's namespace): text keyed by node name, whoever writes them (docs/security.md)."""

from __future__ import annotations

from typing import Any

from guard.generate.policies import params
from guard.generate.policies.cel import Validation, quote, regex
from guard.generate.policies.common import PREFIX, policy, rule, scoped
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    LEDGER_ARCHIVE_COMPONENT,
    ledger_archive_pattern,
)
from guard.settings import Settings

# A node name: DNS-1123 subdomain, at most 253 characters.
NODE_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def archive_pattern(s: Settings) -> str:
    """`<ledger>-archive-<n>`, n = 1..999999: the archives guard.doors.ledger_store creates."""
    return ledger_archive_pattern(s.ledger_configmap)


def archive_labelled_as_named(s: Settings, name: str, labels: str) -> str:
    """CEL: a ConfigMap named ``<ledger>-archive-<n>`` (`name`) carries both archive labels
    (`labels`), how readers find it, and no other carries that component."""
    component = f"{labels}[?{quote(COMPONENT_LABEL)}].orValue('')"
    app = f"{labels}[?{quote(APP_LABEL)}].orValue('')"
    archive = quote(LEDGER_ARCHIVE_COMPONENT)
    return (  # parenthesised: a ternary binds weaker than the `||` it is joined with
        f"({name}.matches({regex(archive_pattern(s))}) ? "
        f"({component} == {archive} && {app} == {quote(APP_NAME)}) : {component} != {archive})"
    )


# One character ledger_store.archive_text escapes: a control but tab and newline, a format char.
# Searched, not anchored: CEL's cost is the text's length times the pattern's, and a full archive
# must stay under the per-expression limit (tests/apiserver/test_mutation_catalogue.py archive-*).
ESCAPE_BYTE = r"'[\x00-\x08\x0b-\x1f\x7f-\x9f\p{Cf}]'"

# An archive gets the lines moved out of a ledger that passed `ledger_archive_bytes`
# (guard.doors.ledger_store.append): at most that much and the line being appended.
ARCHIVE_SLACK_BYTES = 64 * 1024
_ARCHIVE_WHY = (
    f" bytes (the site's ledger_archive_bytes + {ARCHIVE_SLACK_BYTES}: what the guard moves out"
    " of a full ledger)"
)


def is_ledger(s: Settings) -> str:
    """CEL: the request's object is the ledger or one of its archives."""
    return (
        f"object.metadata.?name.orValue('') == {quote(s.ledger_configmap)} || "
        f"object.metadata.?name.orValue('').matches({regex(archive_pattern(s))})"
    )


def ledger_policy(s: Settings) -> list[dict[str, Any]]:
    constraints = {
        **scoped(s.namespace),
        "resourceRules": [rule("", ["configmaps"], ["CREATE", "UPDATE"])],
    }
    data = "object.?data.orValue({})"
    checks = [
        Validation(
            "size(object.?binaryData.orValue({})) == 0",
            "the ledger holds text only: no binaryData",
        ),
        Validation(
            f"{data}.all(k, size(k) <= 253 && k.matches({regex(NODE_NAME)}))",
            "every ledger key is a node name; not: ",
            f"{data}.filter(k, size(k) > 253 || !k.matches({regex(NODE_NAME)})).join(', ')",
        ),
        Validation(
            "!object.?immutable.orValue(false)",
            "the ledger must stay writable (immutable: true would jam it)",
        ),
        # Archives only: made escaped, never rewritten; on the ledger it jams (docs/security.md).
        Validation(
            f"!{data}.exists(k, {data}[k].matches(r{ESCAPE_BYTE}))",
            "an archive holds no control or format characters (the guard writes them as "
            "escapes); they are in: ",
            f"{data}.filter(k, {data}[k].matches(r{ESCAPE_BYTE})).join(', ')",
        ).guarded(f"object.metadata.?name.orValue('').matches({regex(archive_pattern(s))})"),
    ]
    return [
        *policy(f"{PREFIX}-ledger", constraints, [_WHO], checks, [("is-ledger", is_ledger(s))]),
        *_archive_size_policy(s, constraints),
    ]


_WHO = ("who", "'ConfigMap ' + request.namespace + '/' + object.metadata.name")


def _archive_size_policy(s: Settings, constraints: dict[str, Any]) -> list[dict[str, Any]]:
    """The archive's bound, the ledger's one check that needs the site's settings: passes without
    them (params.site_param_ref; docs/security.md, "Without the settings")."""
    archive = f"object.metadata.?name.orValue('').matches({regex(archive_pattern(s))})"
    data = "object.?data.orValue({})"
    check = Validation(
        f"{data}.map(k, size(bytes(k)) + size(bytes({data}[k]))).sum() <= variables.archiveMax",
        "an archive holds at most ",
        f"string(variables.archiveMax) + {quote(_ARCHIVE_WHY)}",
    )
    variables = [
        _WHO,
        ("archiveMax", f"{params.integer(s, 'ledger_archive_bytes')} + {ARCHIVE_SLACK_BYTES}"),
    ]
    return policy(
        f"{PREFIX}-ledger-archive-size",
        constraints,
        variables,
        [check],
        [("is-archive", archive)],
        params.site_param_ref(s),
    )
