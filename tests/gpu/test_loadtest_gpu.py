"""The load test on real NVIDIA GPUs with the PyTorch backend (tier `gpu`).

Skips with one line where torch, a CUDA GPU or NCCL is missing: CI machines have no GPU. On a GPU
machine, from the repository root: `python3 -m pytest tests/gpu -m gpu`, or `hack/gpu-check.sh`
for the throughput and bandwidth figures.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from guard.loadtest.cli import loadtest
from guard.loadtest.collective import AllreducePlan, RankOutcome
from guard.loadtest.ranks import run_allreduce
from guard.loadtest.torch_backend import ALLREDUCE_SIZES, TorchBackend

pytestmark = pytest.mark.gpu

HOW = "run on a machine with an NVIDIA GPU and PyTorch with CUDA"


@pytest.fixture(scope="module")
def gpu_count() -> int:
    torch = pytest.importorskip("torch", reason=f"torch not installed: {HOW}")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        pytest.skip(f"no CUDA GPU visible: {HOW}")
    count: int = torch.cuda.device_count()
    return count


@pytest.fixture(scope="module")
def nccl(gpu_count: int) -> int:
    import torch.distributed

    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip(f"this torch has no NCCL: {HOW}")
    return gpu_count


def load_test(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(loadtest, ["run", "--backend", "torch", "--output", "json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_burn_runs_on_every_gpu_and_passes(gpu_count: int) -> None:
    code, doc = load_test("--expected-gpus", str(gpu_count), "--duration-s", "5")
    assert code == 0, doc["reasons"]
    assert len(doc["gpus"]) == gpu_count
    for gpu in doc["gpus"]:
        assert gpu["burn"]["iterations"] > 0 and gpu["burn"]["tflops"] > 0, gpu
        assert gpu["pci"] != "unknown" and gpu["uuid"].startswith("GPU-"), gpu
        assert gpu["pcie"] is not None and gpu["pcie"]["width_max"], gpu


def test_memory_class_xid_tests_the_named_gpu_clean(gpu_count: int) -> None:
    args = ("--expected-gpus", str(gpu_count), "--duration-s", "1", "--no-allreduce")
    _code, first = load_test(*args)
    pci = first["gpus"][0]["pci"]
    code, doc = load_test(*args, "--xid", "48", "--memory-test-pci", pci)
    assert code == 0, doc["reasons"]
    memory = doc["gpus"][0]["memory"]
    assert memory["errors"] == 0 and memory["bytes_tested"] > 0 and memory["gbps"] > 0, memory
    assert [g["memory"] for g in doc["gpus"][1:]] == [None] * (gpu_count - 1)


def test_one_gpu_more_than_visible_fails(gpu_count: int) -> None:
    code, doc = load_test(
        "--expected-gpus", str(gpu_count + 1), "--duration-s", "1", "--no-allreduce"
    )
    assert code == 1
    assert doc["reasons"] == [f"gpu-count expected={gpu_count + 1} visible={gpu_count}"]


def test_burn_run_includes_the_allreduce_of_every_gpu(gpu_count: int) -> None:
    code, doc = load_test("--expected-gpus", str(gpu_count), "--duration-s", "2")
    assert code == 0, doc["reasons"]
    allreduce = doc["allreduce"]
    assert (allreduce["transport"], allreduce["world"], allreduce["completed"]) == (
        "nccl",
        gpu_count,
        True,
    )
    assert [s["bytes"] for s in allreduce["sizes"]] == list(ALLREDUCE_SIZES)
    assert [g["allreduce"]["status"] for g in doc["gpus"]] == ["ok"] * gpu_count


@pytest.mark.parametrize("world", [1, 2], ids=["world-1", "world-2"])
def test_nccl_allreduce_is_exact_and_timed(nccl: int, world: int) -> None:
    if world > nccl:
        pytest.skip(f"needs {world} GPUs, {nccl} visible")
    plan = AllreducePlan(TorchBackend().allreduce_spec(), world, 300.0, 60.0)
    result = run_allreduce(plan)
    assert result.outcomes == tuple(RankOutcome(r, "ok", "done") for r in range(world))
    assert result.mismatches == ()
    assert [f.size_bytes for f in result.sizes] == list(ALLREDUCE_SIZES)
    assert all(f.algbw_gbps > 0 for f in result.sizes), result.sizes
    # busbw = algbw · 2(n−1)/n: none for one rank, algbw itself for two.
    assert all(f.busbw_gbps == pytest.approx(f.algbw_gbps * (world - 1)) for f in result.sizes)
