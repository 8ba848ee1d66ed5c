"""The one host-command runner with real processes: outcomes, group kill, escaped children, and
how a `CommandResult` words each outcome in one line (what the evidence and conformance reports
print)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from guard.doors.hostexec import Exited, HostRunner, NotStarted, Outcome, TimedOut, run


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(("sh", "-c", "echo fine"), Exited(0, "fine\n", ""), id="success"),
        pytest.param(
            ("sh", "-c", "echo partial; echo 'lspci: cannot open' >&2; exit 3"),
            Exited(3, "partial\n", "lspci: cannot open\n"),
            id="non-zero-exit-keeps-both-streams",
        ),
        pytest.param(
            ("sh", "-c", r"printf 'ok\377\n'"),
            Exited(0, "ok\ufffd\n", ""),
            id="bad-utf8-is-replaced-not-raised",
        ),
        pytest.param(
            ("/nonexistent/journalctl",),
            NotStarted("No such file or directory"),
            id="missing-program",
        ),
        pytest.param(("sleep", "30"), TimedOut(), id="hang"),
    ],
)
def test_outcome(argv: tuple[str, ...], expected: Outcome) -> None:
    assert run(argv, 0.3) == expected


def test_stdin_is_closed() -> None:
    # A command that reads stdin would otherwise wait on the guard's own input.
    assert run(("sh", "-c", "cat; echo done"), 5.0) == Exited(0, "done\n", "")


def test_stop_over_stops_a_command_that_prints_without_end() -> None:
    # The exec plugins' bound (guard.doors.kube_exec): killed past the limit, not at the timeout.
    got = run(("yes",), 30.0, stop_over=1000)
    assert isinstance(got, Exited) and got.dropped > 0


def test_cwd_and_env_reach_the_command(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "PLUGIN_INFO": "given"}
    got = run(("sh", "-c", "pwd; echo $PLUGIN_INFO"), 5.0, cwd=str(tmp_path), env=env)
    assert got == Exited(0, f"{tmp_path}\ngiven\n", "")


def _alive(pid: int) -> bool:
    """Running or sleeping; a killed process not yet reaped is a zombie ("Z")."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _still_alive_after_signal_delivery(pid: int) -> bool:
    """SIGKILL reaches a sleeping process asynchronously; give it up to 5 s to die."""
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _alive(pid)


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 30 & echo $! > {pidfile}; wait"
    assert run(("sh", "-c", script), 0.3) == TimedOut()
    assert not _still_alive_after_signal_delivery(int(pidfile.read_text()))


def test_child_that_escapes_the_kill_does_not_hang_the_run(tmp_path: Path) -> None:
    # setsid puts the inner sleep in its own session: the group kill misses it and it keeps the
    # output pipe open for a minute, the way a process stuck in the kernel would.
    pidfile = tmp_path / "escaped.pid"
    argv = ("sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' & exec sleep 60")
    outcomes: list[Outcome] = []
    worker = threading.Thread(target=lambda: outcomes.append(run(argv, 0.2)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    try:
        assert not worker.is_alive(), "run() waited for a process outside its group"
        assert outcomes == [TimedOut()]
    finally:
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    ("argv", "ok", "missing", "why"),
    [
        pytest.param(("sh", "-c", "echo 5.15.0-179-generic"), True, False, "", id="success"),
        pytest.param(
            ("sh", "-c", "echo first >&2; echo 'FATAL: Module ip_vs not found' >&2; exit 1"),
            False,
            False,
            "exit 1: FATAL: Module ip_vs not found",
            id="non-zero-exit-names-last-stderr-line",
        ),
        pytest.param(("sh", "-c", "exit 2"), False, False, "exit 2: no message", id="silent-exit"),
        pytest.param(
            ("no-such-program-here", "--version"),
            False,
            True,
            "cannot start no-such-program-here: No such file or directory",
            id="missing-program",
        ),
        pytest.param(("sh", "-c", "exit 127"), False, True, "exit 127: no message", id="exit-127"),
        pytest.param(("sleep", "30"), False, False, "timed out after 0.3s", id="hang"),
    ],
)
def test_result_words_each_outcome_in_one_line(
    argv: tuple[str, ...], ok: bool, missing: bool, why: str
) -> None:
    result = HostRunner(timeout_s=0.3).run(argv)
    assert (result.ok, result.missing, result.why, result.argv) == (ok, missing, why, argv)
    assert str(result.as_unknown()) == f"{' '.join(argv)}: {why}"


def test_prefix_runs_before_the_command_and_is_not_reported() -> None:
    argv = ("sh", "-c", "echo $CHECK")
    result = HostRunner(5.0, prefix=("env", "CHECK=prefixed")).run(argv)
    assert (result.ok, result.stdout, result.argv) == (True, "prefixed\n", argv)
