"""The load-test verdict over injected per-GPU results (no backend, no threads)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from guard.loadtest.collective import (
    AllreduceResult,
    Mismatch,
    RankOutcome,
    SizeFigure,
    Status,
)
from guard.loadtest.model import (
    BurnResult,
    DeviceInfo,
    ExpectedLink,
    MemoryPlan,
    MemoryResult,
    PcieLink,
    RunPlan,
    RunResult,
    matmul_flops,
)
from guard.loadtest.verdict import Criteria, judge, throughput_ratios

FLOPS = matmul_flops(8192)
# Per-GPU throughput of the incident write-up's real return run: 8 × RTX 5090, 203.6–212.7 TFLOPS.
SEED_TFLOPS = (212.7, 208.1, 203.6, 210.4, 206.9, 211.8, 205.2, 209.3)


NO_MEMORY_TEST = MemoryPlan(required=False)


def pci(index: int) -> str:
    return f"0000:{0x18 + index:02x}:00.0"


def burn(index: int, tflops: float, iterations: int = 1000) -> BurnResult:
    device_s = FLOPS * iterations / (tflops * 1e12)
    return BurnResult(index, iterations, device_s, FLOPS)


def node(
    tflops: Mapping[int, float] | None = None,
    visible: int = 8,
    drop: frozenset[int] = frozenset(),
    burns: Mapping[int, BurnResult] | None = None,
    memory: MemoryPlan = NO_MEMORY_TEST,
    memory_results: tuple[MemoryResult, ...] = (),
    pcie: tuple[PcieLink, ...] = (),
) -> RunResult:
    """A run on `visible` GPUs at the write-up's speeds; `tflops`/`burns` override, `drop` drops."""
    speeds = {i: SEED_TFLOPS[i % 8] for i in range(visible)} | dict(tflops or {})
    results = {i: burn(i, t) for i, t in speeds.items()} | dict(burns or {})
    devices = tuple(DeviceInfo(i, pci(i), "NVIDIA GeForce RTX 5090", f"GPU-{i}") for i in speeds)
    plan = RunPlan(8192, 90.0, memory, burn_timeout_s=210.0, memory_timeout_s=600.0)
    kept = tuple(results[i] for i in sorted(results) if i not in drop)
    return RunResult("torch", plan, devices, kept, memory_results, pcie)


MEMORY_ON_3 = MemoryPlan(required=True, pci=pci(3))
CLEAN_MEMORY_3 = MemoryResult(3, 120 * 10**9, 0, 2500.0)


@pytest.mark.parametrize(
    ("run", "expected_reasons"),
    [
        pytest.param(node(), (), id="seed-run-all-within-ratio-passes"),
        pytest.param(
            node({3: 150.0} | dict.fromkeys((0, 1, 2, 4, 5, 6, 7), 200.0)),
            ("slow gpu=3 ratio=0.750 min_ratio=0.8",),
            id="one-gpu-at-0.75-fails",
        ),
        pytest.param(
            node({3: 170.0} | dict.fromkeys((0, 1, 2, 4, 5, 6, 7), 200.0)),
            (),
            id="one-gpu-at-0.85-passes",
        ),
        pytest.param(
            node(drop=frozenset({5})),
            (f"no-result gpu=5 pci={pci(5)}",),
            id="gpu-without-result-fails",
        ),
        pytest.param(
            node(burns={2: BurnResult(2, 0, 0.0, FLOPS, error="RuntimeError: CUDA error")}),
            (f"exception gpu=2 pci={pci(2)} error='RuntimeError: CUDA error'",),
            id="exception-on-one-gpu-fails",
        ),
        pytest.param(
            node(burns={4: BurnResult(4, 0, 0.0, FLOPS)}),
            (f"not-run gpu=4 pci={pci(4)} iterations=0 device_s=0",),
            id="zero-iterations-fails",
        ),
        pytest.param(
            node(burns={4: BurnResult(4, 50, 0.0, FLOPS)}),
            (f"not-run gpu=4 pci={pci(4)} iterations=50 device_s=0",),
            id="iterations-without-device-time-fails",
        ),
        pytest.param(
            node(burns={i: BurnResult(i, 0, 0.0, FLOPS) for i in range(2)}, visible=2),
            (
                "gpu-count expected=8 visible=2",
                f"not-run gpu=0 pci={pci(0)} iterations=0 device_s=0",
                f"not-run gpu=1 pci={pci(1)} iterations=0 device_s=0",
                "no-gpu-ran",
            ),
            id="nothing-ran-never-passes",
        ),
        pytest.param(
            node(visible=7), ("gpu-count expected=8 visible=7",), id="seven-of-eight-fails"
        ),
        pytest.param(
            node(memory=MEMORY_ON_3, memory_results=(CLEAN_MEMORY_3,)),
            (),
            id="memory-test-clean-passes",
        ),
        pytest.param(
            node(memory=MEMORY_ON_3, memory_results=(MemoryResult(3, 10**9, 12, 2400.0),)),
            (f"memory-errors gpu=3 pci={pci(3)} errors=12 bytes=1000000000",),
            id="memory-test-errors-fail",
        ),
        pytest.param(
            node(memory=MEMORY_ON_3),
            (f"memory-not-run gpu=3 pci={pci(3)}",),
            id="memory-test-required-not-run-fails",
        ),
        pytest.param(
            node(memory=MEMORY_ON_3, memory_results=(MemoryResult(3, 0, 0, 0.0),)),
            (f"memory-not-run gpu=3 pci={pci(3)}",),
            id="memory-test-zero-bytes-fails",
        ),
        pytest.param(
            node(
                memory=MEMORY_ON_3,
                memory_results=(MemoryResult(3, 0, 0, 0.0, error="OutOfMemoryError: x"),),
            ),
            (f"memory-exception gpu=3 pci={pci(3)} error='OutOfMemoryError: x'",),
            id="memory-test-exception-fails",
        ),
        pytest.param(
            node(memory=MemoryPlan(required=True, pci="0000:99:00.0")),
            ("memory-target-missing pci=0000:99:00.0",),
            id="memory-test-gpu-gone-fails",
        ),
        pytest.param(
            node(memory=MemoryPlan(required=True), memory_results=(CLEAN_MEMORY_3,)),
            tuple(f"memory-not-run gpu={i} pci={pci(i)}" for i in (0, 1, 2, 4, 5, 6, 7)),
            id="memory-test-on-all-needs-every-gpu",
        ),
        pytest.param(
            node(memory_results=(MemoryResult(3, 10**9, 12, 2400.0),)),
            (),
            id="memory-errors-ignored-when-not-required",
        ),
    ],
)
def test_verdict(run: RunResult, expected_reasons: tuple[str, ...]) -> None:
    verdict = judge(Criteria(expected_gpus=8, min_ratio=0.8), run)
    assert verdict.reasons == expected_reasons
    assert verdict.passed is (expected_reasons == ())


def test_seed_run_reports_its_spread() -> None:
    verdict = judge(Criteria(expected_gpus=8, min_ratio=0.8), node())
    assert verdict.min_tflops == pytest.approx(203.6)
    assert verdict.max_tflops == pytest.approx(212.7)
    assert verdict.ratio == pytest.approx(203.6 / 212.7)


def test_whole_node_slow_together_passes() -> None:
    """Only the ratio between GPUs is judged, as in the runbook: the report carries the rest."""
    verdict = judge(Criteria(8, 0.8), node(dict.fromkeys(range(8), 20.0)))
    assert verdict.passed
    assert verdict.max_tflops == pytest.approx(20.0)


def test_backend_that_cannot_start_fails() -> None:
    plan = RunPlan(8192, 90.0, MemoryPlan(False), 210.0, 600.0)
    run = RunResult("torch", plan, (), (), backend_error="RuntimeError: no CUDA")
    verdict = judge(Criteria(8, 0.8), run)
    assert verdict.reasons == (
        "backend-error backend=torch error='RuntimeError: no CUDA'",
        "gpu-count expected=8 visible=0",
        "no-gpu-ran",
    )


# --- PCIe: below the maximum, below the link recorded at cordon time -------------------------


def links(*changed: PcieLink) -> tuple[PcieLink, ...]:
    """Eight gen5 x16 links, with `changed` ones replacing those at the same address."""
    by_pci = {pci(i): PcieLink(pci(i), 5, 5, 16, 16) for i in range(8)}
    by_pci |= {link.pci: link for link in changed}
    return tuple(by_pci.values())


RECORDED_3 = ExpectedLink(pci(3), gen=5, width=16)


@pytest.mark.parametrize(
    ("run", "recorded", "expected_reasons"),
    [
        pytest.param(node(pcie=links()), (RECORDED_3,), (), id="as-recorded-passes"),
        pytest.param(
            node(pcie=links(PcieLink(pci(3), 5, 5, 8, 16))),
            (RECORDED_3,),
            (
                f"pcie-below-max pci={pci(3)} gen=5/5 width=8/16",
                f"pcie-below-recorded pci={pci(3)} now=32GT/s,x8 recorded=32GT/s,x16",
            ),
            id="slot-trained-down-to-x8-fails-twice",
        ),
        # After the power cycle the slot reports gen4 as its maximum: only the record shows it.
        pytest.param(
            node(pcie=links(PcieLink(pci(3), 4, 4, 16, 16))),
            (RECORDED_3,),
            (f"pcie-below-recorded pci={pci(3)} now=16GT/s,x16 recorded=32GT/s,x16",),
            id="max-itself-dropped-only-the-record-catches-it",
        ),
        pytest.param(
            node(pcie=links(PcieLink(pci(1), 1, 5, 16, 16))),
            (),
            (f"pcie-below-max pci={pci(1)} gen=1/5 width=16/16",),
            id="below-max-without-record-fails",
        ),
        # A record taken while the link idled at 2.5 GT/s only weakens the check.
        pytest.param(
            node(pcie=links()),
            (ExpectedLink(pci(3), gen=1, width=16),),
            (),
            id="record-lower-than-now-passes",
        ),
        pytest.param(
            node(pcie=links()[:3]),
            (RECORDED_3,),
            (f"pcie-recorded-unchecked pci={pci(3)} recorded=32GT/s,x16 now=absent",),
            id="recorded-gpu-without-link-fails",
        ),
        pytest.param(
            node(pcie=links(PcieLink(pci(3), None, 5, 16, 16))),
            (RECORDED_3,),
            (f"pcie-recorded-unchecked pci={pci(3)} recorded=32GT/s,x16 now=?GT/s,x16",),
            id="recorded-gpu-link-not-readable-fails",
        ),
    ],
)
def test_pcie_verdict(
    run: RunResult, recorded: tuple[ExpectedLink, ...], expected_reasons: tuple[str, ...]
) -> None:
    verdict = judge(Criteria(8, 0.8, expected_links=recorded), run)
    assert verdict.reasons == expected_reasons


def test_unreadable_links_fail_only_what_was_recorded() -> None:
    run = replace(node(), pcie_error="RuntimeError: NVML: x; nvidia-smi: y")
    unrecorded = judge(Criteria(8, 0.8), run)
    assert unrecorded.passed
    assert unrecorded.notes == ("pcie-unknown error='RuntimeError: NVML: x; nvidia-smi: y'",)
    recorded = judge(Criteria(8, 0.8, expected_links=(RECORDED_3,)), run)
    assert recorded.reasons == (
        f"pcie-recorded-unchecked pci={pci(3)} recorded=32GT/s,x16 now=unreadable",
    )


# --- All-reduce across the GPUs ----------------------------------------------------------------


def allreduce(
    status: Mapping[int, tuple[Status, str, str]] | None = None,
    busbw: Mapping[int, float | None] | None = None,
    mismatches: tuple[Mismatch, ...] = (),
    hung_after_s: float | None = None,
) -> AllreduceResult:
    """Eight ranks at 150 GB/s each, all ok; `status` and `busbw` override by rank."""
    outcomes = tuple(RankOutcome(r, *(status or {}).get(r, ("ok", "done", ""))) for r in range(8))
    speeds: dict[int, float | None] = {r: 150.0 for r in range(8)}
    speeds |= dict(busbw or {})
    figures = (SizeFigure(256 << 20, 0.002, 134.2, 234.9),)
    return AllreduceResult(
        "nccl", 8, outcomes, figures, tuple(speeds.values()), mismatches, hung_after_s
    )


@pytest.mark.parametrize(
    ("result", "expected_reasons"),
    [
        pytest.param(allreduce(), (), id="all-ranks-even-passes"),
        pytest.param(
            allreduce(busbw={3: 60.0}),
            (f"allreduce-slow rank=3 pci={pci(3)} bus_gbps=60 ratio=0.400 min_ratio=0.7",),
            id="card-on-degraded-link-is-the-outlier",
        ),
        pytest.param(allreduce(busbw={3: 110.0}), (), id="within-ratio-passes"),
        pytest.param(
            allreduce(
                {
                    1: ("died", "allreduce-64MiB", "signal=SIGKILL"),
                    0: ("stopped", "allreduce-64MiB", "RuntimeError: peer gone"),
                },
                busbw={1: None, 0: None},
            ),
            (f"allreduce-died rank=1 pci={pci(1)} at=allreduce-64MiB signal=SIGKILL",),
            id="dead-rank-named-its-peers-not",
        ),
        pytest.param(
            allreduce(
                {2: ("hung", "pairs-1", "")} | {r: ("stopped", "pairs-2", "") for r in (0, 1)},
                hung_after_s=60.0,
            ),
            (f"allreduce-hung rank=2 pci={pci(2)} at=pairs-1 silent_s=60",),
            id="hung-rank-named-and-no-ratio-judged",
        ),
        pytest.param(
            allreduce({5: ("error", "init", "RuntimeError: NCCL error: unhandled system error")}),
            (
                f"allreduce-error rank=5 pci={pci(5)} at=init"
                " error='RuntimeError: NCCL error: unhandled system error'",
            ),
            id="rank-error",
        ),
        pytest.param(
            allreduce(mismatches=(Mismatch(4, "allreduce-8MiB", 17),)),
            (f"allreduce-wrong rank=4 pci={pci(4)} at=allreduce-8MiB mismatches=17",),
            id="inexact-sum-fails",
        ),
        pytest.param(
            AllreduceResult("nccl", 8, (), error="cannot start: [Errno 24] Too many open files"),
            (
                "allreduce-unavailable transport=nccl"
                " error='cannot start: [Errno 24] Too many open files'",
            ),
            id="ranks-cannot-start",
        ),
    ],
)
def test_allreduce_verdict(result: AllreduceResult, expected_reasons: tuple[str, ...]) -> None:
    verdict = judge(Criteria(8, 0.8), replace(node(), allreduce=result))
    assert verdict.reasons == expected_reasons


def test_allreduce_skipped_after_a_hung_burn_is_noted() -> None:
    run = replace(node(drop=frozenset({5})), allreduce_skipped="burn-no-result")
    verdict = judge(Criteria(8, 0.8), run)
    assert verdict.reasons == (f"no-result gpu=5 pci={pci(5)}",)
    assert verdict.notes == ("allreduce-skipped reason=burn-no-result",)


@pytest.mark.parametrize(
    ("shm_bytes", "notes"),
    [
        pytest.param(64 << 20, ("dev-shm-small size_mib=64",), id="container-default-64mib"),
        pytest.param(2 << 30, (), id="emptydir-2gib"),
        pytest.param(None, (), id="unknown"),
    ],
)
def test_nccl_with_a_small_dev_shm_is_noted(shm_bytes: int | None, notes: tuple[str, ...]) -> None:
    verdict = judge(
        Criteria(8, 0.8), replace(node(), allreduce=allreduce(), dev_shm_bytes=shm_bytes)
    )
    assert verdict.passed
    assert verdict.notes == notes


def test_throughput_ratios_are_against_the_fastest_gpu() -> None:
    burns = (BurnResult(0, 100, 1.0, 2e12), BurnResult(1, 75, 1.0, 2e12))
    assert throughput_ratios(burns) == {0: 1.0, 1: 0.75}
