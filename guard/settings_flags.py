"""The Settings as click options, for every command that takes the guard's settings (`run`,
`render`, `status`): one flag and one GUARD_* environment variable per field, with its default
and help from guard/settings.py, built into one Settings; a refused value is one usage line
naming its flag; and the click types these commands and the node-side ones share."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from guard.ledger import parse_time
from guard.settings import Settings, SettingsError, setting_fields


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


_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "tuple[int, ...]": IntList()}


def settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One click option per Settings field, with its GUARD_* environment variable."""
    for f in reversed(setting_fields()):
        flag = "--" + f.name.replace("_", "-")
        env = "GUARD_" + f.name.upper()
        help_text = f.metadata["help"]
        if f.type == "bool":
            option = click.option(
                f"{flag}/--no-{flag[2:]}",
                f.name,
                default=f.default,
                envvar=env,
                show_default=True,
                help=help_text,
            )
        else:
            default = f.default
            if isinstance(default, tuple):
                default = ",".join(str(v) for v in default)
            option = click.option(
                flag,
                f.name,
                type=_TYPES[str(f.type)],
                default=default,
                envvar=env,
                show_default=True,
                help=help_text,
            )
        command = option(command)
    return command


def build_settings(options: dict[str, Any]) -> Settings:
    """The Settings from click's values; a refused value is one usage line naming its flag."""
    names = {f.name for f in setting_fields()}
    try:
        return Settings(**{k: v for k, v in options.items() if k in names})
    except SettingsError as exc:
        problems = "; ".join(f"{_flag(name)} {text}" for name, text in exc.problems)
        raise click.UsageError(f"bad setting: {problems}") from None


def _flag(name: str) -> str:
    """``--hold-window-s (GUARD_HOLD_WINDOW_S)``: how a person sets the field named `name`."""
    return f"--{name.replace('_', '-')} (GUARD_{name.upper()})"
