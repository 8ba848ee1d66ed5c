"""The Settings as click options: a flag and a GUARD_* variable per site setting a command takes
(guard/settings.py `SITE_GROUPS`), the CronJob's own values from their variable only; a refused
value is one usage line naming its flag. Also the click types the node-side commands share."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import click

from guard.ledger import parse_time
from guard.log import redact
from guard.settings import (
    COMPOUND_OF,
    COMPOUNDS,
    CRONJOB_ENV,
    LAYOUT_SETTINGS,
    SITE_SETTINGS,
    Settings,
    SettingsError,
    compound_key,
    fixed_settings,
    setting_default,
    setting_fields,
    site_options,
)

# GUARD_* names that are a command's options, not Settings fields (guard/cli.py, guard/evidence/),
# and the prefixes of the node-side commands' own (guard/agent/cli.py, guard/conformance/cli.py).
OTHER_ENV_NAMES = frozenset({"GUARD_LOG_FORMAT", "GUARD_XID_CLASSES"})
OTHER_ENV_PREFIXES = ("GUARD_AGENT_", "GUARD_CONFORMANCE_")


class SettingOption(click.Option):
    """GUARD_X= (empty) is the empty value, not click's "unset" (GUARD_ONBOARDING_TAINT= turns the
    gate off: docs/onboarding.md). Text and list settings only: an empty number is the default."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        found = super().resolve_envvar_value(ctx)
        if found is None and isinstance(self.envvar, str) and os.environ.get(self.envvar) == "":
            return ""
        return found


class IntList(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    name = "INT,INT,…"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of integers", param, ctx)


class FiniteFloatRange(click.FloatRange):
    """`click.FloatRange` that also refuses nan and inf: both pass its bound comparisons."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class Rfc3339(click.ParamType):  # type: ignore[type-arg]
    name = "RFC3339"

    def convert(self, value: Any, param: Any, ctx: Any) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:  # impossible dates and overflow included
            self.fail(f"{value!r}: {exc}", param, ctx)


# A field's type (as its dataclass annotation writes it) → its click type; each converts text.
_TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "tuple[int, ...]": IntList(),
    "bool": click.BOOL,
}


Command = Callable[..., Any]


def option_set(names: tuple[str, ...]) -> Callable[[Command], Command]:
    """A decorator: one click option per setting of `names`, with its GUARD_* variable."""

    def decorate(command: Command) -> Command:
        for name in reversed(site_options(names)):
            command = _option(name)(command)
        return command

    return decorate


def _option(name: str) -> Callable[[Command], Command]:
    flag = "--" + name.replace("_", "-")
    if name in COMPOUNDS:  # unset (None) leaves every field at its default
        keys = COMPOUNDS[name]
        shown = (f"{key}={_plain(setting_default(f))}{unit}" for key, (f, unit) in keys.items())
        helps = (f"{key}: {_help(f)}" for key, (f, _) in keys.items())
        return click.option(
            flag,
            name,
            cls=SettingOption,
            default=None,
            envvar="GUARD_" + name.upper(),
            metavar="KEY=VALUE,…",
            show_default=",".join(shown),
            help="Comma-separated key=value, a key left out keeps its default. " + "; ".join(helps),
        )
    (f,) = setting_fields((name,))
    kind = str(f.type)
    default = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
    return click.option(
        f"{flag}/--no-{flag[2:]}" if kind == "bool" else flag,
        f.name,
        cls=SettingOption if kind in ("str", "tuple[int, ...]") else click.Option,
        type=None if kind == "bool" else _TYPES[kind],
        default=default,
        envvar="GUARD_" + f.name.upper(),
        show_default=True,
        help=_help(f.name),
    )


def _help(name: str) -> str:
    return str(setting_fields((name,))[0].metadata["help"])


def _plain(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def parse_compound(name: str, text: str) -> dict[str, Any]:
    """The fields `text` (``key=value,…``) sets; ValueError with one line when it is not that."""
    keys, out = COMPOUNDS[name], {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        key, sep, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in keys:
            raise ValueError(f"{entry!r} is not key=value with a key of {', '.join(keys)}")
        field_name, unit = keys[key]
        (f,) = setting_fields((field_name,))
        number = value.removesuffix(unit) if unit else value
        try:
            out[field_name] = _TYPES[str(f.type)](number)
        except ValueError:
            unit_text = f" (it may end in {unit})" if unit else ""
            raise ValueError(f"{key}={value!r} is not a number{unit_text}") from None
    return out


settings_options = option_set(SITE_SETTINGS)  # `run`: every site setting


def build_settings(
    options: dict[str, Any], *, warn: bool = True, warn_layout: bool = True
) -> Settings:
    """The Settings from click's values; a refused value is one usage line naming its flag, a
    layout setting off the manifests' one WARN line (`warn_layout=False`: the caller logs it)."""
    for line in unknown_env_lines() if warn else ():
        click.echo(line, err=True)
    given = env_options(os.environ, frozenset(SITE_SETTINGS), "the environment")
    for name, value in options.items():  # a compound spreads into its members
        if name in COMPOUNDS and value is not None:
            try:
                given.update(parse_compound(name, value))
            except ValueError as exc:
                raise click.UsageError(f"bad setting: {_option_flag(name)} {exc}") from None
    names = {f.name for f in setting_fields()}
    given.update({k: v for k, v in options.items() if k in names})
    try:
        built = Settings(**given)
    except SettingsError as exc:
        problems = "; ".join(
            f"{_flag(name)} {text} (got {_shown(given.get(name))})" for name, text in exc.problems
        )
        raise click.UsageError(f"bad setting: {problems}") from None
    for fields in layout_warnings(built) if warn_layout else ():
        click.echo(
            f"WARN layout setting {fields['setting']}={fields['value']!r} differs from "
            f"the manifests' {fields['pinned']!r}: {fields['why']}; next: {fields['next']}",
            err=True,
        )
    return built


def layout_warnings(s: Settings) -> list[dict[str, str]]:
    """One per layout setting off what the manifests pin: its first write would be refused."""
    return [
        {
            "setting": _flag(name),
            "value": str(getattr(s, name)),
            "pinned": str(setting_default(name)),
            "why": "the policies and RBAC pin it: the guard's writes under it are refused",
            "next": "unset it, or regenerate the policies and rename the manifests (docs/deploy.md,"
            ' "Settings by lifetime")',
        }
        for name in LAYOUT_SETTINGS
        if getattr(s, name) != setting_default(name)
    ]


# Where a person's own machine reads from: never taken from the cluster's settings ConfigMap (its
# Prometheus URL is an in-cluster address, its credential files are the CronJob pod's mounts).
LOCAL_ONLY = frozenset(
    {"kubeconfig", "pushgateway_url"}
    | {f.name for f in setting_fields() if f.name.startswith("prometheus_")}
)


def given_here(ctx: click.Context, options: Mapping[str, Any]) -> frozenset[str]:
    """The settings a person gave this command (a flag or a GUARD_* variable)."""
    defaults = (click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP, None)
    given = [n for n in options if ctx.get_parameter_source(n) not in defaults]
    return frozenset(f for n in given for f in _members(n))


def _members(name: str) -> tuple[str, ...]:
    """The fields one option sets: a compound's members, else the field of that name."""
    return tuple(f for f, _ in COMPOUNDS[name].values()) if name in COMPOUNDS else (name,)


def env_options(env: Mapping[str, str], skip: frozenset[str], where: str) -> dict[str, Any]:
    """The site's and the CronJob's settings in `env` (GUARD_<NAME> keys, as a settings ConfigMap
    holds them) but `skip`, converted as the CronJob's options convert its envFrom; a value that
    does not convert is one usage line naming `where` and the key."""
    out: dict[str, Any] = {}
    for name in COMPOUNDS:
        key = "GUARD_" + name.upper()
        if key in env and not set(_members(name)) <= skip:
            try:
                found = parse_compound(name, env[key])
            except ValueError as exc:
                text = f"{key}={_shown(env[key])}: {exc}"
                raise click.UsageError(f"bad setting in {where}: {text}") from None
            out.update({k: v for k, v in found.items() if k not in skip})
    for f in setting_fields((*SITE_SETTINGS, *CRONJOB_ENV)):
        key = "GUARD_" + f.name.upper()
        if f.name in skip or key not in env or f.name in COMPOUND_OF:
            continue
        text, kind = env[key], str(f.type)
        if text == "" and kind not in ("str", "tuple[int, ...]"):
            continue
        try:
            out[f.name] = _TYPES[kind](text)
        except (ValueError, click.BadParameter):
            raise click.UsageError(f"bad setting in {where}: {key}={_shown(text)}") from None
    return out


def _shown(value: Any) -> str:
    """The refused value as Python writes it (whitespace and quotes show), credentials out."""
    text = redact(repr(",".join(map(str, value)) if isinstance(value, tuple) else value))
    return text if len(text) <= 200 else text[:200] + "…"


FIXED_HINT = "a fixed value of the guard, not a setting: docs/deploy.md, Settings by lifetime"


def unknown_env_lines(environ: Mapping[str, str] | None = None) -> list[str]:
    """One WARN line per GUARD_* variable no command reads (a misspelt one would leave the default
    in force without a word), with the closest known name or what it is now."""
    read = (*site_options(SITE_SETTINGS), *CRONJOB_ENV)
    known = frozenset("GUARD_" + name.upper() for name in read) | OTHER_ENV_NAMES
    hints = {"GUARD_" + name.upper(): FIXED_HINT for name in fixed_settings()}
    for name, compound in COMPOUND_OF.items():
        hints["GUARD_" + name.upper()] = (
            f"now the key {compound_key(name)}= of GUARD_{compound.upper()}: docs/deploy.md,"
            " Settings by lifetime"
        )
    found = os.environ if environ is None else environ
    return _unknown_lines("GUARD_", known, OTHER_ENV_PREFIXES, hints, found)


def warn_unknown_command_env(prefix: str) -> None:
    """A node-side command's WARN line per <prefix>* variable none of its options reads."""
    known, flag_only = set(), {}
    for p in click.get_current_context().command.params:
        if isinstance(p.envvar, str):
            known.add(p.envvar)
        elif p.envvar is None and isinstance(p, click.Option) and p.name:
            flag = p.name.replace("_", "-")
            flag_only[prefix + p.name.upper()] = f"--{flag} is read from the command line only"
    for line in _unknown_lines(prefix, frozenset(known), (), flag_only, os.environ):
        click.echo(line, err=True)


def _unknown_lines(
    prefix: str,
    known: frozenset[str],
    elsewhere: tuple[str, ...],
    hints: Mapping[str, str],
    environ: Mapping[str, str],
) -> list[str]:
    out = []
    for name in sorted(environ):
        if not name.startswith(prefix) or name in known or name.startswith(elsewhere):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = hints.get(name) or (f"did you mean {close[0]}?" if close else "")
        out.append(
            f"WARN unknown setting {name!r} in the environment is ignored"
            + (f" ({hint})" if hint else "")
        )
    return out


def _flag(name: str) -> str:
    """``--hold-window-s (GUARD_HOLD_WINDOW_S)``: how a person sets the field `name`."""
    if name in COMPOUND_OF:
        return f"{_option_flag(COMPOUND_OF[name])} {compound_key(name)}="
    if name not in SITE_SETTINGS:
        return f"GUARD_{name.upper()}"
    return _option_flag(name)


def _option_flag(name: str) -> str:
    return f"--{name.replace('_', '-')} (GUARD_{name.upper()})"
