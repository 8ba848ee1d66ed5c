"""Run one command in a child process and measure it: wall time and that command's peak RSS.

Linux keeps a process's peak RSS across fork and exec, so a command started straight from this
(large) process would report at least this process's RSS. A tiny launcher (``python -S``, about
10 MB) forks the command instead and reports the command's own ``ru_maxrss`` from `os.wait4` —
what ``/usr/bin/time -v`` does, without needing it installed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = """
import os, sys, time
started = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
wall = time.monotonic() - started
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {os.waitstatus_to_exitcode(status)} {wall}")
"""


@dataclass(frozen=True, slots=True)
class Measured:
    returncode: int
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str


def measure(argv: list[str], timeout_s: float) -> Measured:
    with tempfile.TemporaryDirectory(prefix="gng-measure-") as tmp:
        report, out, err = Path(tmp, "rusage"), Path(tmp, "out"), Path(tmp, "err")
        with out.open("wb") as stdout, err.open("wb") as stderr:
            launcher = subprocess.Popen(
                [sys.executable, "-S", "-c", LAUNCHER, str(report), *argv],
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # a timeout kills the command too, not just the launcher
            )
            try:
                launcher.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()
        stdout_text = out.read_text(errors="replace")
        stderr_text = err.read_text(errors="replace")
        if not report.exists():
            return Measured(124, timeout_s, 0.0, stdout_text, stderr_text + "\ntimed out")
        rss_kib, code, wall = report.read_text().split()
        return Measured(int(code), float(wall), int(rss_kib) / 1024, stdout_text, stderr_text)
