"""The site's settings as the policies read them: the CronJob's settings ConfigMap as each policy's
params (docs/security.md, "The site's values"); a missing key means the default written into the
policy, and each value is read as the guard parses it (the site's ``0.80`` is ``0.8``)."""

from __future__ import annotations

from typing import Any

from guard.generate.policies.cel import quote
from guard.names import SETTINGS_CONFIGMAP
from guard.settings import Settings

PARAM_KIND = {"apiVersion": "v1", "kind": "ConfigMap"}
# click's BOOL words for true (GUARD_LOADTEST_ALLREDUCE=yes is true for the CronJob too).
TRUE_WORDS = ("1", "true", "t", "yes", "y", "on")


def param_ref(s: Settings) -> dict[str, Any]:
    """For a policy that matches only the guard's own objects (the jobs namespace's Jobs, Pods
    and DaemonSet): without the site's settings nothing is admitted, fail closed."""
    return {
        "name": SETTINGS_CONFIGMAP,
        "namespace": s.namespace,
        "parameterNotFoundAction": "Deny",
    }


def site_param_ref(s: Settings) -> dict[str, Any]:
    """For a policy whose match reaches objects that are not the guard's: passes when the
    ConfigMap is missing (docs/security.md, "Without the settings")."""
    return {**param_ref(s), "parameterNotFoundAction": "Allow"}


def env_name(setting: str) -> str:
    return "GUARD_" + setting.upper()


def default_text(s: Settings, setting: str) -> str:
    """`setting` of `s` (the generator's: Settings() for policies/) as a settings.env line
    would write it: the value when the ConfigMap has no such key."""
    value = getattr(s, setting)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def text(s: Settings, setting: str) -> str:
    """CEL: the setting's text in the params (its default when the key is absent)."""
    return f"params.?data[?{quote(env_name(setting))}].orValue({quote(default_text(s, setting))})"


def integer(s: Settings, setting: str) -> str:
    return f"int({text(s, setting)}.trim())"


def ratio(s: Settings, setting: str) -> str:
    return f"double({text(s, setting)}.trim())"


def flag(s: Settings, setting: str) -> str:
    return f"{text(s, setting)}.trim().lowerAscii() in {list(TRUE_WORDS)!r}".replace('"', "'")


def xids(s: Settings, setting: str) -> str:
    """A list of ints, as guard.settings_flags.IntList parses it (empty items skipped)."""
    return f"{text(s, setting)}.split(',').filter(x, x.trim() != '').map(x, int(x.trim()))"


def words(s: Settings, setting: str) -> str:
    """A comma-separated list as one word, as guard.plan.common.conformance_args writes it."""
    return f"{text(s, setting)}.split(',').map(x, x.trim()).filter(x, x != '').join(',')"


def gate(s: Settings) -> list[tuple[str, str]]:
    """The onboarding gate's taint, `key[=value]:effect` (guard.settings.parse_taint), as the
    policy variables `gateKey`, `gateValue`, `gateEffect` ('' when there is no gate)."""
    at, pair = "variables.gate.lastIndexOf(':')", "variables.gatePair"
    eq = f"{pair}.indexOf('=')"
    return [
        ("gate", text(s, "onboarding_taint")),
        ("gatePair", f"{at} < 0 ? '' : variables.gate.substring(0, {at})"),
        ("gateEffect", f"{at} < 0 ? '' : variables.gate.substring({at} + 1)"),
        ("gateKey", f"{eq} < 0 ? {pair} : {pair}.substring(0, {eq})"),
        ("gateValue", f"{eq} < 0 ? '' : {pair}.substring({eq} + 1)"),
    ]
