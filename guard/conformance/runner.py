"""Host commands for the conformance items, run through `guard.hostexec` with a timeout.

A command that cannot start, exits non-zero or runs past its timeout never raises: the caller gets a
`CommandResult` whose `error` says what happened, and the item reports UNKNOWN. Inside a Job the
runner prefixes ``nsenter -t 1 -m --`` (`guard.hostexec.NSENTER_PREFIX`) so commands see the host's
mount namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from guard import hostexec


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
    """Runs commands for real; `prefix` runs before each and is left out of the result."""

    timeout_s: float
    prefix: tuple[str, ...] = ()

    def run(self, argv: tuple[str, ...]) -> CommandResult:
        match hostexec.run((*self.prefix, *argv), self.timeout_s):
            case hostexec.Exited(returncode, stdout, stderr):
                return CommandResult(argv, returncode, stdout, stderr)
            case hostexec.NotStarted(strerror):
                error = f"`{argv[0]}` could not start: {strerror}"
            case hostexec.TimedOut():
                error = f"`{' '.join(argv)}` timed out after {self.timeout_s:g} s"
        return CommandResult(argv, None, "", "", error)
