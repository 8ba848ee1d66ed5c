"""The one door to host commands: every process the guard's host checks start goes through `run`.

`run` is bounded in time and never raises: a command that cannot start, or runs past its timeout,
comes back as a value, and each caller words it for its own report. Every command runs in its own
process group with stdin closed, so a timeout kills the whole group, children included. Inside a
Job, callers prefix ``NSENTER_PREFIX`` so commands see the host's mount namespace (its modprobe,
journalctl, lspci, /lib/modules and rke2 binary).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

# PID 1's mount namespace; the Job has hostPID and CAP_SYS_ADMIN.
NSENTER_PREFIX = ("nsenter", "-t", "1", "-m", "--")
# After the kill, how long to wait for the pipes to close. A process stuck in the kernel (D state,
# e.g. a config read of a dead GPU) ignores SIGKILL; the run gives up on it instead of hanging.
KILL_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class NotStarted:
    """The program could not be started (missing, not executable); `strerror` says why."""

    strerror: str


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The command ran past its timeout; its process group was killed and its output dropped."""


@dataclass(frozen=True, slots=True)
class Exited:
    """The command ran to its end; its output is decoded as UTF-8, bad bytes replaced."""

    returncode: int
    stdout: str
    stderr: str


Outcome = NotStarted | TimedOut | Exited


def run(argv: Sequence[str], timeout_s: float) -> Outcome:
    """Run `argv` (prefix included) for at most `timeout_s` seconds; never raises."""
    try:
        proc = subprocess.Popen(
            tuple(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return NotStarted(exc.strerror or str(exc))
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return TimedOut()
    return Exited(proc.returncode, _text(out), _text(err))


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        # A child outside the group still holds the pipes, or the process is stuck in the kernel.
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    proc.poll()
