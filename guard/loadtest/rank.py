"""One rank of the all-reduce test: `python -m guard.loadtest.rank CONFIG_JSON REPORT_FD`. Each
stage is one JSON line, one `os.write` under PIPE_BUF to the pipe all ranks share, so lines never
interleave. The rendezvous and the checked pattern: docs/loadtest.md."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from guard.loadtest.collective import Step, steps_from_json
from guard.loadtest.model import one_line

_PATTERN_PERIOD = 251
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_EVENT_LIMIT = 4000  # bytes; a pipe write up to PIPE_BUF (4096 on Linux) is atomic


@dataclass(frozen=True, slots=True)
class Reporter:
    fd: int
    rank: int

    def __call__(self, event: str, **fields: Any) -> None:
        data = (json.dumps({"rank": self.rank, "ev": event, **fields}) + "\n").encode()
        if len(data) > _EVENT_LIMIT:
            data = (json.dumps({"rank": self.rank, "ev": event}) + "\n").encode()
        os.write(self.fd, data)


def main(argv: Sequence[str]) -> int:
    config: dict[str, Any] = json.loads(argv[0])
    die_with_parent(int(config["parent"]))
    report = Reporter(int(argv[1]), int(config["rank"]))
    all_steps = steps_from_json(config["steps"])
    step = None
    try:
        import torch
        import torch.distributed as dist

        report("start")
        _init(torch, dist, config, report)
        groups = _groups(dist, all_steps)
        report("ready")
        faults = config["faults"]  # simulated failures, for tests
        for step, spec in enumerate(all_steps):
            if faults.get("hang") == step:
                threading.Event().wait()  # never set: silent until the parent ends the rank
            report("begin", step=step)
            if faults.get("die") == step:
                os.kill(os.getpid(), signal.SIGKILL)
            if faults.get("fail") == step:
                raise RuntimeError(f"injected fault at step {step}")
            seconds, mismatches = _run_step(torch, dist, config, step, spec, groups)
            report("end", step=step, seconds=seconds, mismatches=mismatches)
        report("done")
        with contextlib.suppress(Exception):  # the measurement is complete; teardown is not
            dist.destroy_process_group()
    except Exception as exc:  # reported to the parent, which names the rank
        report("error", step=step, error=one_line(exc, 300))
        return 1
    return 0


def die_with_parent(parent: int) -> None:
    """A parent killed without its cleanup takes the rank along (Linux PR_SET_PDEATHSIG; else the
    parent's cleanup ends the ranks); one gone before the call is caught by its pid."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _init(torch: Any, dist: Any, config: dict[str, Any], report: Reporter) -> None:
    rank, world = int(config["rank"]), int(config["world"])
    timeout = timedelta(seconds=float(config["timeout_s"]))
    if config["device"] == "cuda":
        torch.cuda.set_device(rank)
    master = rank == 0  # opens the store on a free port and reports it; the others read it
    port = 0 if master else int(sys.stdin.readline())
    options = {"world_size": world, "is_master": master, "timeout": timeout}
    store = dist.TCPStore("127.0.0.1", port, wait_for_workers=not master, **options)
    if master:
        report("store", port=int(store.port))
    dist.init_process_group(
        config["transport"], store=store, rank=rank, world_size=world, timeout=timeout
    )
    # The first collective sets up the communicators (NCCL does so lazily): part of start-up.
    one = torch.ones(1, device=_device(config))
    dist.all_reduce(one)
    if int(one.item()) != world:
        raise RuntimeError(f"first all-reduce gave {one.item()}, want {world}")


def _groups(dist: Any, all_steps: Sequence[Step]) -> dict[tuple[int, ...], Any]:
    """Every pair's process group, created by every rank in the same order, as torch requires."""
    groups: dict[tuple[int, ...], Any] = {(): None}  # None: the default group, every rank
    for spec in all_steps:
        for pair in spec.pairs:
            key = tuple(sorted(pair))
            if key not in groups:
                groups[key] = dist.new_group(list(key))
    return groups


def _run_step(
    torch: Any, dist: Any, config: dict[str, Any], step: int, spec: Step, groups: dict[Any, Any]
) -> tuple[float | None, int]:
    """One checked all-reduce, then the timed ones: (seconds of one, mismatched elements)."""
    rank, world = int(config["rank"]), int(config["world"])
    key = spec.group_of(rank)
    if key is None:
        return None, 0  # idle in this round of pairs
    members = key or tuple(range(world))
    group = groups[key]
    device = _device(config)
    ramp = torch.arange(max(1, spec.size_bytes // 4), dtype=torch.int32, device=device)
    ramp %= _PATTERN_PERIOD
    buf = (ramp + rank).to(torch.float32)
    dist.all_reduce(buf, group=group)
    if config["faults"].get("corrupt") == step:
        buf[0] += 1
    expected = (ramp * len(members) + sum(members)).to(torch.float32)
    mismatches = int(torch.ne(buf, expected).sum().item())
    del ramp, expected
    buf.zero_()
    for _ in range(int(config["warmup"])):
        dist.all_reduce(buf, group=group)
    _sync(torch, config)
    start = time.perf_counter()
    for _ in range(int(config["iterations"])):
        dist.all_reduce(buf, group=group)
    _sync(torch, config)
    seconds = (time.perf_counter() - start) / int(config["iterations"])
    mismatches += int(torch.count_nonzero(buf).item())
    return seconds * float(config["faults"].get("slow", 1.0)), mismatches


def _device(config: dict[str, Any]) -> str:
    return f"cuda:{config['rank']}" if config["device"] == "cuda" else "cpu"


def _sync(torch: Any, config: dict[str, Any]) -> None:
    if config["device"] == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
