"""Burn every GPU at once, sample PCIe under load, the memory test, then the all-reduce (ranks.py).
One daemon thread per GPU: an exception becomes that GPU's error; a thread still busy at its
timeout (a hung GPU) leaves no result, which the verdict fails on, and cannot keep the process
from exiting."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TypeVar

from guard.loadtest.collective import START_TIMEOUT_S, AllreducePlan, AllreduceResult
from guard.loadtest.model import (
    Backend,
    BurnResult,
    DeviceInfo,
    MemoryResult,
    PcieLink,
    RunPlan,
    RunResult,
    matmul_flops,
    memory_targets,
    one_line,
)
from guard.loadtest.ranks import run_allreduce

T = TypeVar("T")


def _per_device(
    indexes: Iterable[int], work: Callable[[int], T], on_error: Callable[[int, str], T]
) -> Callable[[float], tuple[T, ...]]:
    """Start `work(index)` on a thread per GPU (`on_error(index, line)` for an exception); the
    wait it returns gives the results in by its timeout, by index."""
    results: dict[int, T] = {}
    lock = threading.Lock()

    def one(index: int) -> None:
        try:
            result = work(index)
        except Exception as exc:  # recorded per GPU; the verdict fails on it
            result = on_error(index, one_line(exc))
        with lock:
            results[index] = result

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in indexes]
    for thread in threads:
        thread.start()

    def wait(timeout_s: float) -> tuple[T, ...]:
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with lock:
            return tuple(results[i] for i in sorted(results))

    return wait


def run(backend: Backend, plan: RunPlan) -> RunResult:
    """The whole load test; never raises for a GPU or backend failure, it records it."""
    try:
        devices = backend.devices()
    except Exception as exc:
        return RunResult(backend.name, plan, (), (), backend_error=one_line(exc))
    burns, pcie, pcie_error = _burn_all(backend, devices, plan)
    answered = {b.index for b in burns}
    # A GPU whose burn never returned is left alone: its thread may still hold the device.
    targets = [d.index for d in memory_targets(devices, plan.memory) if d.index in answered]
    memory = _per_device(targets, backend.memory_test, _memory_error)(plan.memory_timeout_s)
    result = RunResult(backend.name, plan, devices, burns, memory, pcie, pcie_error=pcie_error)
    if plan.allreduce_timeout_s is None or not devices:
        return result
    if len(answered) < len(devices):
        # A hung GPU would hang its rank too; its burn already fails the run.
        return replace(result, allreduce_skipped="burn-no-result")
    spec = backend.allreduce_spec()
    shm = _dev_shm_bytes() if spec.transport == "nccl" else None
    ranks = AllreducePlan(spec, len(devices), START_TIMEOUT_S, plan.allreduce_timeout_s)
    try:
        allreduce = run_allreduce(ranks)
    except Exception as exc:  # recorded like a GPU's exception; the verdict fails on it
        allreduce = AllreduceResult(spec.transport, ranks.world, (), error=one_line(exc))
    return replace(result, allreduce=allreduce, dev_shm_bytes=shm)


def _dev_shm_bytes() -> int | None:
    """Size of /dev/shm, which NCCL uses between the rank processes (64 MiB in a bare pod)."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def _burn_all(
    backend: Backend, devices: tuple[DeviceInfo, ...], plan: RunPlan
) -> tuple[tuple[BurnResult, ...], tuple[PcieLink, ...], str | None]:
    flops = matmul_flops(plan.size)
    started = time.monotonic()
    wait = _per_device(
        [d.index for d in devices],
        lambda i: backend.burn(i, plan.size, plan.duration_s),
        lambda i, line: BurnResult(i, 0, 0.0, flops, error=line),
    )
    time.sleep(plan.duration_s / 2)  # sample the links mid-burn, while they carry load
    try:
        pcie, pcie_error = backend.pcie_links(), None
    except Exception as exc:
        pcie, pcie_error = (), one_line(exc)
    burns = wait(plan.burn_timeout_s - (time.monotonic() - started))
    return burns, pcie, pcie_error


def _memory_error(index: int, line: str) -> MemoryResult:
    return MemoryResult(index, 0, 0, 0.0, error=line)
