"""The one door to commands (host checks, exec plugins): `run` is bounded in time, never raises,
and runs each command in its own process group with stdin closed, so a timeout kills its children
too. Inside a Job callers prefix ``NSENTER_PREFIX``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from io import BufferedReader
from typing import IO, Protocol

# PID 1's mount namespace; the Job has hostPID and CAP_SYS_ADMIN.
NSENTER_PREFIX = ("nsenter", "-t", "1", "-m", "--")
# After the kill, the wait for the pipes: a process in D state (a dead GPU's config read) ignores
# SIGKILL, and the run gives up on it instead of hanging.
KILL_GRACE_S = 1.0
MAX_OUTPUT_BYTES = 32 * 1024 * 1024  # the last this many bytes of a command's stdout are kept
MAX_STDERR_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class NotStarted:
    strerror: str  # why the program could not be started


@dataclass(frozen=True, slots=True)
class TimedOut:
    """Its process group was killed and its output dropped."""


@dataclass(frozen=True, slots=True)
class Exited:
    """Its output is decoded as UTF-8, bad bytes replaced."""

    returncode: int
    stdout: str
    stderr: str
    dropped: int = 0  # bytes of stdout left out at its start (over MAX_OUTPUT_BYTES)


Outcome = NotStarted | TimedOut | Exited


def run(
    argv: Sequence[str],
    timeout_s: float,
    *,
    stop_over: int | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    shell: bool = False,
) -> Outcome:
    """Run `argv` for at most `timeout_s` seconds, keeping the last MAX_OUTPUT_BYTES of stdout;
    with `stop_over`, a command that prints more is killed instead (`Exited.dropped` above 0)."""
    try:
        proc = subprocess.Popen(
            tuple(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            shell=shell,
            start_new_session=True,
        )
    except OSError as exc:
        return NotStarted(exc.strerror or str(exc))
    out = _Tail(MAX_OUTPUT_BYTES) if stop_over is None else _Tail(stop_over, lambda: _kill(proc))
    err = _Tail(MAX_STDERR_BYTES)
    readers = [
        threading.Thread(target=buf.drain, args=(stream,), daemon=True)
        for buf, stream in ((out, proc.stdout), (err, proc.stderr))
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        proc.wait(timeout=timeout_s)
        for reader in readers:  # a child that keeps the pipe open counts against the timeout
            reader.join(max(0.0, deadline - time.monotonic()))
        if any(reader.is_alive() for reader in readers):
            raise subprocess.TimeoutExpired(tuple(argv), timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
        return TimedOut()
    return Exited(proc.returncode, _text(out.data()), _text(err.data()), out.dropped)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the command's group, pipes left open: their close would wait for the readers'
    read (daemons: they end with the last holder of the pipe)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class _Tail:
    """The last `limit` bytes of a stream (a long boot's journal must not fill a 256 Mi evidence
    Job; the fault is at the end). `full`, if given, is called past `limit` and ends the read."""

    def __init__(self, limit: int, full: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.full = full
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.dropped = 0

    def drain(self, stream: BufferedReader | IO[bytes] | None) -> None:
        if stream is None:
            return
        with contextlib.suppress(OSError, ValueError):  # the pipe went away under us
            read = getattr(stream, "read1", stream.read)  # read1: what has arrived, no more
            while chunk := read(1 << 16):
                self.chunks.append(chunk)
                self.size += len(chunk)
                if self.full and self.size > self.limit:
                    self.full()
                    return
                while self.size - len(self.chunks[0]) >= self.limit:
                    first = self.chunks.popleft()
                    self.size -= len(first)
                    self.dropped += len(first)

    def data(self) -> bytes:
        data = b"".join(self.chunks)
        if len(data) > self.limit:
            self.dropped += len(data) - self.limit
            data = data[-self.limit :]
        if self.dropped:  # start at a whole line
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut >= 0 else data
        return data


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Unknown:
    """A host fact that could not be established (reported, never fatal)."""

    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.what}: {self.why}"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One host command's outcome: `argv` without the runner's prefix; `returncode` None when it
    did not start or timed out (`error` says which)."""

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
        """ "" when ok; else the error, or the exit status and the last stderr line."""
        if self.ok:
            return ""
        if self.error:
            return self.error
        lines = self.stderr.strip().splitlines()
        return f"exit {self.returncode}: {lines[-1] if lines else 'no message'}"

    def as_unknown(self) -> Unknown:
        return Unknown(" ".join(self.argv), self.why)


class Runner(Protocol):
    """Runs one host command; `HostRunner` for real, a table of answers in tests."""

    def run(self, argv: tuple[str, ...]) -> CommandResult: ...


@dataclass(frozen=True, slots=True)
class HostRunner:
    """Real commands, each limited to `timeout_s`, after `prefix` (e.g. NSENTER_PREFIX)."""

    timeout_s: float
    prefix: tuple[str, ...] = ()

    def run(self, argv: tuple[str, ...]) -> CommandResult:
        args, timeout_s = tuple(argv), self.timeout_s
        match run((*self.prefix, *args), timeout_s):
            case Exited(returncode, stdout, stderr):
                return CommandResult(args, returncode, stdout, stderr)
            case NotStarted(strerror):
                return CommandResult(args, None, "", "", f"cannot start {args[0]}: {strerror}")
            case TimedOut():
                return CommandResult(args, None, "", "", f"timed out after {timeout_s:g}s")
