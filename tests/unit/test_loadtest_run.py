"""The orchestration around the backend: hung GPUs, unreadable links, the CPU memory test."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from guard.loadtest.model import (
    CONSTANT_WORDS,
    BurnResult,
    MemoryPlan,
    MemoryResult,
    PcieLink,
    RunPlan,
    matmul_flops,
    one_line,
)
from guard.loadtest.run import run
from guard.loadtest.verdict import Criteria, judge
from tests.numpy_backend import NumpyBackend, NumpyFaults


class HangsOn(NumpyBackend):
    """GPU `stuck` never returns from its burn until `release` is set (a GPU stuck in a call)."""

    def __init__(self, stuck: int, release: threading.Event) -> None:
        super().__init__(devices=2)
        self._stuck = stuck
        self._release = release

    def burn(self, index: int, size: int, duration_s: float) -> BurnResult:
        if index == self._stuck:
            self._release.wait()
        return super().burn(index, size, duration_s)


class NoLinks(NumpyBackend):
    def pcie_links(self) -> tuple[PcieLink, ...]:
        raise FileNotFoundError("nvidia-smi")


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let the stuck thread finish once the test is done


NO_MEMORY_TEST = MemoryPlan(required=False)


def plan(memory: MemoryPlan = NO_MEMORY_TEST, burn_timeout_s: float = 10.0) -> RunPlan:
    return RunPlan(32, 0.1, memory, burn_timeout_s=burn_timeout_s, memory_timeout_s=10.0)


def test_hung_gpu_leaves_no_result_and_skips_its_memory_test(release: threading.Event) -> None:
    result = run(HangsOn(1, release), plan(MemoryPlan(required=True), burn_timeout_s=0.3))
    assert [b.index for b in result.burns] == [0]
    assert [m.index for m in result.memory] == [0]
    assert judge(Criteria(2, 0.05), result).reasons == (
        "no-result gpu=1 pci=0000:19:00.0",
        "memory-not-run gpu=1 pci=0000:19:00.0",
    )


def test_unreadable_pcie_is_noted_and_the_run_still_judged() -> None:
    result = run(NoLinks(devices=2), plan())
    verdict = judge(Criteria(2, 0.05), result)
    assert verdict.passed
    assert verdict.notes == ("pcie-unknown error='FileNotFoundError: nvidia-smi'",)


def test_downtrained_simulated_link_fails() -> None:
    backend = NumpyBackend(devices=2, faults=NumpyFaults(downtrained=frozenset({1})))
    verdict = judge(Criteria(2, 0.05), run(backend, plan()))
    assert verdict.reasons == ("pcie-below-max pci=0000:19:00.0 gen=1/4 width=8/16",)


@pytest.mark.parametrize(
    ("stuck_words", "expected_errors"),
    [
        pytest.param(0, 0, id="healthy-memory"),
        # bit 0 stuck low: 0xFF… and 0x55… catch every word, the address pattern the odd ones.
        pytest.param(1, 3, id="one-stuck-word"),
        pytest.param(4, 10, id="four-stuck-words"),
    ],
)
def test_cpu_memory_test_counts_mismatched_words(stuck_words: int, expected_errors: int) -> None:
    backend = NumpyBackend(
        devices=1, memory_bytes=1 << 20, faults=NumpyFaults(stuck_words={0: stuck_words})
    )
    result = backend.memory_test(0)
    assert (result.bytes_tested, result.errors, result.error) == (1 << 20, expected_errors, None)


def test_accounting_is_the_same_on_every_backend() -> None:
    assert matmul_flops(8192) / 1e12 == 1.099511627776
    assert MemoryResult.timed(0, 10**9, 0, 1.0).gbps == 10.0  # five passes, written and read
    # The 64-bit patterns as the int64 an array library stores.
    assert CONSTANT_WORDS == (0, -1, 0xAAAA_AAAA_AAAA_AAAA - (1 << 64), 0x5555_5555_5555_5555)


def test_an_exception_is_one_line_with_its_type() -> None:
    exc = RuntimeError("CUDA error: unspecified launch failure\nCompile with ...")
    assert one_line(exc) == "RuntimeError: CUDA error: unspecified launch failure"
