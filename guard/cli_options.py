"""Click pieces shared by the guard's commands: the one check of a PCI address, a node name and a
GPU UUID given on a command line, and the Job programs' --termination-log and its writer."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from guard.files import first_line
from guard.names import is_dns_subdomain
from guard.pci import PciAddressError, normalize_pci
from guard.wire import TERMINATION_LOG, write_termination_message

OUTPUT = click.Choice(["text", "json"])
FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def pci_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Accept 0000:99:00, 0000:99:00.0 and 00000000:99:00.0 in any case; store sysfs form."""
    if value is None:
        return None
    try:
        return normalize_pci(value)
    except PciAddressError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from err


_SHOWN = functools.partial(click.option, show_default=True)


def termination_log_option(
    help: str = "Where the summary for the guard goes, if that file exists.",
    option: Callable[..., Callable[[Any], Any]] = _SHOWN,
) -> Callable[[Any], Any]:
    """A Job program's --termination-log (`option`: a command's own option factory)."""
    return option("--termination-log", default=TERMINATION_LOG, help=help)


def write_summary(path: str, text: str) -> None:
    """The Job's summary for the guard (guard.wire); a file not written is one WARN line."""
    note = write_termination_message(path, text)
    if note:
        click.echo(note, err=True)


# The shape the admission policies accept for a GPU UUID in a guard Job's argv.
_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")


Callback = Callable[[click.Context, click.Parameter, "str | None"], "str | None"]


def name_callback(is_name: Callable[[str], bool], what: str) -> Callback:
    """A click callback refusing a value `is_name` rejects: "'x' is not a <what>"."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and not is_name(value):
            raise click.BadParameter(f"{value!r} is not a {what}", ctx=ctx, param=param)
        return value

    return check


node_callback = name_callback(is_dns_subdomain, "node name (a DNS-1123 subdomain)")
# A GPU UUID as nvidia-smi and dcgm-exporter print it, or ``unknown``.
uuid_callback = name_callback(lambda v: v == "unknown" or bool(_UUID.match(v)), "GPU UUID (GPU-…)")


def _where(exc: BaseException) -> str:
    """``module.py:line`` of the frame that raised, inside the guard when it can be."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}guard{os.sep}" in f.filename] or frames
    return f"{os.path.basename(ours[-1].filename)}:{ours[-1].lineno}" if ours else "?"


def _command_path(ctx: click.Context, exc: BaseException) -> str:
    """The deepest command that was running: the last click Context among the traceback's frames."""
    found = (frame.f_locals.get("ctx") for frame, _ in traceback.walk_tb(exc.__traceback__))
    return [ctx, *(c for c in found if isinstance(c, click.Context))][-1].command_path


def invoke_guarded(ctx: click.Context, invoke: Any) -> Any:
    """`invoke(ctx)`; an exception nobody foresaw is one line naming the command and where it was
    raised (a `ClickException`), never a traceback."""
    try:
        return invoke(ctx)
    except (
        click.exceptions.Exit,
        click.ClickException,
        click.Abort,
        SystemExit,
        KeyboardInterrupt,
    ):
        raise
    except BrokenPipeError:  # `… | head`: nobody reads the rest; say nothing more to stdout
        with contextlib.suppress(OSError, ValueError):  # the Python docs' recipe (signal module)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except MemoryError:
        raise click.ClickException(f"{ctx.command_path}: out of memory") from None
    except Exception as exc:
        raise click.ClickException(
            f"{_command_path(ctx, exc)}: unexpected {type(exc).__name__} at {_where(exc)}: "
            f"{first_line(exc, 300, '…', blank='')} (please report)"
        ) from None


class GuardedGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        return invoke_guarded(ctx, super().invoke)


class GuardedCommand(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        return invoke_guarded(ctx, super().invoke)
