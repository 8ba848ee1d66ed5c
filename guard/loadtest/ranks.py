"""Start one all-reduce rank per GPU (`rank.py`), watch them, end them, and never wait past a
deadline (docs/loadtest.md, "Deadlines"). Each rank's output goes to a file: its last line names
a crash."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import guard
from guard.loadtest.collective import (
    READY,
    STARTED,
    AllreducePlan,
    AllreduceResult,
    RankReport,
    Step,
    done_position,
    hung_ranks,
    rank_config,
    steps,
)
from guard.loadtest.collective_summary import summarise

_POLL_S = 0.05
_STOP_GRACE_S = 2.0
_EXIT_GRACE_S = 10.0
_KILL_GRACE_S = 1.0
# Both transports bootstrap over loopback inside the pod; no other interface is needed.
_RANK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}


@dataclass(slots=True)
class _Rank:
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    report: RankReport
    exited_at: float | None = None


def run_allreduce(plan: AllreducePlan) -> AllreduceResult:
    """The whole all-reduce test; never raises for a rank's failure, it records it."""
    all_steps = steps(plan.spec, plan.world)
    read_fd, write_fd = os.pipe()
    ranks: list[_Rank] = []
    try:
        for rank in range(plan.world):
            ranks.append(_spawn(plan, all_steps, rank, write_fd))
    except OSError as exc:
        _end(ranks)
        os.close(read_fd)
        for started in ranks:
            started.log.close()
        return AllreduceResult(plan.spec.transport, plan.world, (), error=f"cannot start: {exc}")
    finally:
        os.close(write_fd)
    try:
        hung = _watch(plan, all_steps, ranks, read_fd)
    finally:
        _end(ranks)
        os.close(read_fd)
    reports = [_with_log(r) for r in ranks]
    return summarise(plan, all_steps, reports, hung)


def _spawn(plan: AllreducePlan, all_steps: tuple[Step, ...], rank: int, fd: int) -> _Rank:
    env = {**_RANK_ENV, **os.environ}
    root = str(Path(guard.__file__).resolve().parent.parent)  # so `-m` finds this very package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    log = tempfile.TemporaryFile(prefix=f"allreduce-rank{rank}-")  # noqa: SIM115 (closed by _with_log)
    config = rank_config(plan, all_steps, rank, os.getpid())
    proc = subprocess.Popen(
        [sys.executable, "-m", "guard.loadtest.rank", config, str(fd)],
        stdin=subprocess.PIPE if rank else subprocess.DEVNULL,  # rank 0 opens the store
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(fd,),
        env=env,
        start_new_session=True,
    )
    return _Rank(proc, log, RankReport(rank, position=-1))


def _watch(
    plan: AllreducePlan, all_steps: tuple[Step, ...], ranks: list[_Rank], fd: int
) -> tuple[int, ...]:
    """Read reports until a stop condition; returns the ranks found hung."""
    reader = _Lines(fd)
    last_report = time.monotonic()
    failed_at: float | None = None
    seq = 0
    n_steps = len(all_steps)
    while True:
        # Exits first, then the pipe: a rank writes before it exits, so every line of a rank seen
        # gone is read in the same round (its `done` is never mistaken for a death).
        for rank in ranks:
            if rank.exited_at is None and rank.proc.poll() is not None:
                rank.exited_at = time.monotonic()
                rank.report = replace(rank.report, exit=rank.proc.returncode)
        lines = reader.read(_POLL_S)
        now = time.monotonic()
        for line in lines:
            seq += 1
            last_report = now
            _apply(ranks, line, seq, n_steps)
        if failed_at is None and any(_failed(r, n_steps) for r in ranks):
            failed_at = now
        running = [r for r in ranks if r.exited_at is None]
        if failed_at is not None:
            if not running or now - failed_at >= _STOP_GRACE_S:
                return ()
            continue
        if all(r.report.is_done(n_steps) for r in ranks):
            if not running or now - last_report >= _EXIT_GRACE_S:
                return ()
            continue
        hung = hung_ranks([r.report.position for r in ranks], now - last_report, plan)
        if hung:
            return hung


def _failed(rank: _Rank, n_steps: int) -> bool:
    """Ended or raised before it was done (after `done`, nothing a rank does counts)."""
    if rank.report.is_done(n_steps):
        return False
    return rank.report.error is not None or rank.exited_at is not None


def _apply(ranks: list[_Rank], line: str, seq: int, n_steps: int) -> None:
    """One report line: move the rank's position, keep its figures, pass the store's port on."""
    try:
        event: dict[str, Any] = json.loads(line)
        rank = ranks[int(event["rank"])]
        kind = str(event["ev"])
        step = int(event.get("step") or 0)
    except (ValueError, KeyError, IndexError, TypeError):
        return  # not a report line of ours; the ranks write nothing else to the pipe
    report = rank.report
    positions = {"start": STARTED, "ready": READY, "begin": 2 + 2 * step, "end": 3 + 2 * step}
    positions["done"] = done_position(n_steps)
    if kind in positions:
        rank.report = replace(report, position=positions[kind])
    if kind == "end":
        rank.report = replace(
            rank.report,
            seconds={**report.seconds, step: event.get("seconds")},
            mismatches={**report.mismatches, step: int(event.get("mismatches") or 0)},
        )
    elif kind == "error":
        rank.report = replace(report, error=str(event.get("error", "")), error_seq=seq)
    elif kind == "store":
        _hand_out_port(ranks, int(event["port"]))


def _hand_out_port(ranks: list[_Rank], port: int) -> None:
    for stdin in (rank.proc.stdin for rank in ranks[1:] if rank.proc.stdin is not None):
        with contextlib.suppress(OSError):  # that rank is already gone: the watch sees it
            stdin.write(f"{port}\n".encode())
            stdin.flush()
        with contextlib.suppress(OSError):
            stdin.close()


def _end(ranks: list[_Rank]) -> None:
    """Kill every rank still running (its whole group), then wait a bounded time for each."""
    for rank in ranks:
        if rank.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rank.proc.pid, signal.SIGKILL)
            rank.report = replace(rank.report, killed=True)
    deadline = time.monotonic() + _KILL_GRACE_S
    for rank in ranks:
        with contextlib.suppress(subprocess.TimeoutExpired):
            rank.proc.wait(max(0.0, deadline - time.monotonic()))
        if rank.proc.stdin is not None:
            with contextlib.suppress(OSError):
                rank.proc.stdin.close()
        if rank.report.exit is None and rank.proc.returncode is not None:
            rank.report = replace(rank.report, exit=rank.proc.returncode)


def _with_log(rank: _Rank) -> RankReport:
    """The report with the last line the rank printed (a traceback's last line, a crash)."""
    try:
        rank.log.seek(0)
        lines = rank.log.read().decode("utf-8", errors="replace").strip().splitlines()
    except OSError:
        lines = []
    finally:
        rank.log.close()
    return replace(rank.report, log_tail=lines[-1][:200] if lines else "")


class _Lines:
    """Whole lines from a pipe, waiting at most `timeout_s` per read; nothing more after EOF."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(fd, selectors.EVENT_READ)

    def read(self, timeout_s: float) -> list[str]:
        if self._eof:
            time.sleep(timeout_s)
            return []
        wait = timeout_s
        while not self._eof and self._selector.select(wait):
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                self._eof = True
                self._selector.close()
            self._buffer += chunk
            wait = 0.0
        *lines, self._buffer = self._buffer.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in lines if line.strip()]
