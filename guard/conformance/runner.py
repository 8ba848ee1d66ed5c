"""The one door to host commands: every command runs through `Runner.run` with a timeout.

A command that cannot start, exits non-zero or runs past its timeout never raises: the caller gets a
`CommandResult` whose `error` says what happened, and the item reports UNKNOWN. Inside a Job the
runner prefixes ``nsenter -t 1 -m --`` so commands see the host's mount namespace (its modprobe,
its /lib/modules, its rke2 binary).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Protocol

NSENTER_PREFIX = ("nsenter", "-t", "1", "-m", "--")
# After the kill, how long to wait for the pipes to close. A process stuck in the kernel (D state)
# ignores SIGKILL; the run gives up on it instead of hanging with it.
KILL_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.returncode == 0

    @property
    def missing(self) -> bool:
        """The program does not exist (127 is how nsenter and shells report it)."""
        return self.returncode == 127 or "No such file or directory" in self.error

    def describe_failure(self) -> str:
        """One line for the report: the error, or the exit status and the last stderr line."""
        if self.error:
            return self.error
        tail = self.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"`{' '.join(self.argv)}` exited {self.returncode}: {tail[0]}"


class Runner(Protocol):
    def run(self, argv: tuple[str, ...]) -> CommandResult: ...


@dataclass(frozen=True, slots=True)
class SubprocessRunner:
    """Runs commands for real, each in its own process group so a timeout kills all of it."""

    timeout_s: float
    prefix: tuple[str, ...] = ()

    def run(self, argv: tuple[str, ...]) -> CommandResult:
        full = (*self.prefix, *argv)
        try:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            return CommandResult(argv, None, "", "", f"`{argv[0]}` could not start: {exc.strerror}")
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return CommandResult(
                argv, None, "", "", f"`{' '.join(argv)}` timed out after {self.timeout_s:g} s"
            )
        return CommandResult(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        # A child outside the group still holds the pipes, or the process is stuck in the kernel.
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    proc.poll()
