"""Rank processes never outlive the load test, even when it is killed without its cleanup."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# An intermediate "load test" starts a "rank" that arms `die_with_parent`, then both wait.
PARENT = """
import subprocess, sys, time
code = (
    "import os, time\\n"
    "from guard.loadtest.rank import die_with_parent\\n"
    "die_with_parent(os.getppid())\\n"
    "print('armed', flush=True)\\n"
    "time.sleep(300)\\n"
)
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "armed"
print(child.pid, flush=True)
time.sleep(300)
"""


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_rank_is_killed_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert is_running(child)
    parent.kill()  # SIGKILL: no finally, no cleanup in the parent
    parent.wait()
    deadline = time.monotonic() + 30  # the kernel's signal is immediate; bound the wait anyway
    while is_running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(child)
