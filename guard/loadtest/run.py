"""Run the burn on every GPU at once, sample PCIe under load, the memory test, then the
all-reduce across every GPU (one process per GPU, `ranks.py`); collect.

One daemon thread per GPU. An exception becomes that GPU's error; a thread still busy at its
timeout (a hung GPU, a driver stuck in a call) leaves no result, which the verdict fails on.
Daemon threads let the process exit and report even with such a thread left behind.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Generic, TypeVar

from guard.loadtest.collective import AllreducePlan, AllreduceResult, AllreduceSpec
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


class _PerDevice(Generic[T]):
    """`work(index)` on a thread per GPU; `on_error(index, line)` turns an exception into T."""

    def __init__(
        self, indexes: Iterable[int], work: Callable[[int], T], on_error: Callable[[int, str], T]
    ) -> None:
        self._results: dict[int, T] = {}
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._one, args=(i, work, on_error), daemon=True)
            for i in indexes
        ]
        for thread in self._threads:
            thread.start()

    def _one(self, index: int, work: Callable[[int], T], on_error: Callable[[int, str], T]) -> None:
        try:
            result = work(index)
        except Exception as exc:  # recorded per GPU; the verdict fails on it
            result = on_error(index, one_line(exc))
        with self._lock:
            self._results[index] = result

    def wait(self, timeout_s: float) -> tuple[T, ...]:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return tuple(self._results[i] for i in sorted(self._results))


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
    memory = _PerDevice(targets, backend.memory_test, _memory_error).wait(plan.memory_timeout_s)
    result = RunResult(backend.name, plan, devices, burns, memory, pcie, pcie_error=pcie_error)
    if plan.allreduce is None or not devices:
        return result
    if len(answered) < len(devices):
        # A hung GPU would hang its rank too; its burn already fails the run.
        return replace(result, allreduce_skipped="burn-no-result")
    spec = backend.allreduce_spec()
    shm = _dev_shm_bytes() if spec.transport == "nccl" else None
    return replace(result, allreduce=_allreduce(spec, len(devices), plan), dev_shm_bytes=shm)


def _dev_shm_bytes() -> int | None:
    """Size of /dev/shm, which NCCL uses between the rank processes (64 MiB in a bare pod)."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def _allreduce(spec: AllreduceSpec, world: int, plan: RunPlan) -> AllreduceResult:
    assert plan.allreduce is not None
    limits = plan.allreduce
    try:
        return run_allreduce(
            AllreducePlan(spec, world, limits.start_timeout_s, limits.step_timeout_s)
        )
    except Exception as exc:  # recorded like a GPU's exception; the verdict fails on it
        return AllreduceResult(spec.transport, world, (), error=one_line(exc))


def _burn_all(
    backend: Backend, devices: tuple[DeviceInfo, ...], plan: RunPlan
) -> tuple[tuple[BurnResult, ...], tuple[PcieLink, ...], str | None]:
    flops = matmul_flops(plan.size)
    started = time.monotonic()
    burning = _PerDevice(
        [d.index for d in devices],
        lambda i: backend.burn(i, plan.size, plan.duration_s),
        lambda i, line: BurnResult(i, 0, 0.0, flops, error=line),
    )
    time.sleep(plan.duration_s / 2)  # sample the links mid-burn, while they carry load
    try:
        pcie, pcie_error = backend.pcie_links(), None
    except Exception as exc:
        pcie, pcie_error = (), one_line(exc)
    burns = burning.wait(plan.burn_timeout_s - (time.monotonic() - started))
    return burns, pcie, pcie_error


def _memory_error(index: int, line: str) -> MemoryResult:
    return MemoryResult(index, 0, 0, 0.0, error=line)
