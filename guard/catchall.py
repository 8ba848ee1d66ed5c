"""The last line of defence of every command: an exception nobody foresaw is one line naming the
command and where it failed, exit 1, never a traceback (a person reads the CronJob's log and
`kubectl gpu-guard` output; a traceback there is noise and may carry values)."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Any

import click


def _where(exc: BaseException) -> str:
    """``module.py:line`` of the frame that raised, inside the guard when it can be."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}guard{os.sep}" in f.filename] or frames
    if not ours:
        return "?"
    last = ours[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno}"


def _command_path(ctx: click.Context, exc: BaseException) -> str:
    """The deepest command that was running (`gpu-node-guard evidence classify`, not the
    group): the last click Context among the traceback's frames."""
    found = ctx
    tb = exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals.get("ctx")
        if isinstance(local, click.Context):
            found = local
        tb = tb.tb_next
    return found.command_path


def one_line(exc: BaseException, limit: int = 300) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    return text if len(text) <= limit else text[:limit] + "…"


def invoke_guarded(ctx: click.Context, invoke: Any) -> Any:
    """`invoke(ctx)`, with anything but click's own exits turned into a `ClickException`."""
    try:
        return invoke(ctx)
    except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
        raise
    except KeyboardInterrupt:
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
            f"{one_line(exc)} (please report)"
        ) from None


class GuardedGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        return invoke_guarded(ctx, super().invoke)


class GuardedCommand(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        return invoke_guarded(ctx, super().invoke)
