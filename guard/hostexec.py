"""The one door to host commands: every process the guard's host checks start goes through `run`.

`run` is bounded in time and never raises: a command that cannot start, or runs past its timeout,
comes back as a value. Every command runs in its own process group with stdin closed, so a timeout
kills the whole group, children included. Inside a Job, callers prefix ``NSENTER_PREFIX`` so
commands see the host's mount namespace (its modprobe, journalctl, lspci, /lib/modules and rke2
binary).

On top of `run`, the values every host check shares: `CommandResult` (one command's outcome,
worded in one line by `why`), `Unknown` (a host fact, from a command or a file, that could not be
established) and `Runner` / `HostRunner` (what the evidence and conformance programs are given, so
tests can answer commands from a table).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

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


@dataclass(frozen=True, slots=True)
class Unknown:
    """A host fact that could not be established: `what` was read, `why` it failed (one line each).

    Reported, never fatal: the rest of the host is still read.

    >>> str(Unknown("journalctl -k -b 0", "timed out after 20s"))
    'journalctl -k -b 0: timed out after 20s'
    """

    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.what}: {self.why}"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One host command's outcome. `argv` is the command as asked, without the runner's prefix;
    `returncode` is None when it did not start or timed out, and then `error` says which."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.returncode == 0

    @property
    def missing(self) -> bool:
        """The program does not exist (127 is how nsenter and shells report it)."""
        return self.returncode == 127 or "No such file or directory" in self.error

    @property
    def why(self) -> str:
        """ "" when ok; else one line: the error, or the exit status and the last stderr line."""
        if self.ok:
            return ""
        if self.error:
            return self.error
        lines = self.stderr.strip().splitlines()
        return f"exit {self.returncode}: {lines[-1] if lines else 'no message'}"

    def as_unknown(self) -> Unknown:
        return Unknown(" ".join(self.argv), self.why)


def run_command(argv: Sequence[str], timeout_s: float, prefix: Sequence[str] = ()) -> CommandResult:
    """`run` of ``prefix + argv``, as a `CommandResult` about `argv`; never raises.

    >>> run_command(["sh", "-c", "echo 'FATAL: Module ip_vs not found' >&2; exit 1"], 5).why
    'exit 1: FATAL: Module ip_vs not found'
    """
    args = tuple(argv)
    match run((*prefix, *args), timeout_s):
        case Exited(returncode, stdout, stderr):
            return CommandResult(args, returncode, stdout, stderr)
        case NotStarted(strerror):
            return CommandResult(args, None, "", "", f"cannot start {args[0]}: {strerror}")
        case TimedOut():
            return CommandResult(args, None, "", "", f"timed out after {timeout_s:g}s")


class Runner(Protocol):
    """Runs one host command; `HostRunner` for real, a table of answers in tests."""

    def run(self, argv: tuple[str, ...]) -> CommandResult: ...


@dataclass(frozen=True, slots=True)
class HostRunner:
    """Real commands, each limited to `timeout_s`; `prefix` (e.g. NSENTER_PREFIX) runs before
    each and is left out of the result."""

    timeout_s: float
    prefix: tuple[str, ...] = ()

    def run(self, argv: tuple[str, ...]) -> CommandResult:
        return run_command(argv, self.timeout_s, self.prefix)
