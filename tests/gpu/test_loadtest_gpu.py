"""The load test on real NVIDIA GPUs with the PyTorch backend (tier `gpu`).

Skips with one line where torch or a CUDA GPU is missing, also under CI=true: CI machines have no
GPU and CI runs every tier but this one. On a GPU machine: `python3 -m pytest tests/gpu -m gpu`,
or `hack/gpu-check.sh` for the throughput numbers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from guard.loadtest.cli import loadtest

pytestmark = pytest.mark.gpu

HOW = "run on a machine with an NVIDIA GPU and PyTorch (hack/gpu-check.sh installs it)"


@pytest.fixture(scope="module")
def gpu_count() -> int:
    torch = pytest.importorskip("torch", reason=f"torch not installed: {HOW}")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        pytest.skip(f"no CUDA GPU visible: {HOW}")
    count: int = torch.cuda.device_count()
    return count


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
    _code, first = load_test("--expected-gpus", str(gpu_count), "--duration-s", "1")
    pci = first["gpus"][0]["pci"]
    code, doc = load_test(
        "--expected-gpus", str(gpu_count), "--duration-s", "1", "--xid", "48",
        "--memory-test-pci", pci,
    )  # fmt: skip
    assert code == 0, doc["reasons"]
    memory = doc["gpus"][0]["memory"]
    assert memory["errors"] == 0 and memory["bytes_tested"] > 0 and memory["gbps"] > 0, memory
    assert [g["memory"] for g in doc["gpus"][1:]] == [None] * (gpu_count - 1)


def test_one_gpu_more_than_visible_fails(gpu_count: int) -> None:
    code, doc = load_test("--expected-gpus", str(gpu_count + 1), "--duration-s", "1")
    assert code == 1
    assert doc["reasons"] == [f"gpu-count expected={gpu_count + 1} visible={gpu_count}"]
