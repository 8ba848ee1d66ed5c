"""`loadtest run` end to end on the NumPy backend: real threads, real matmuls, real verdict.

Each run burns 0.1–0.2 s on 32×32 fp16 matrices. CPU threads are not GPUs, so the passing runs
use a low --min-ratio: they check the orchestration, the verdict table checks the ratio rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from guard.loadtest.cli import BackendOverride, loadtest
from guard.loadtest.model import MemoryPlan, RunPlan, RunResult
from guard.loadtest.report import JSON_PREFIX, summary
from guard.loadtest.verdict import Criteria, Verdict
from guard.wire import MAX_BYTES as SUMMARY_LIMIT
from tests.numpy_backend import NumpyBackend, NumpyFaults, cpu

FAST = ["--size", "32", "--min-ratio", "0.05", "--no-allreduce"]


def invoke(args: list[str], backend: Any = None) -> Result:
    obj = BackendOverride(backend) if backend is not None else cpu()
    return CliRunner().invoke(loadtest, ["run", *args], obj=obj)


def json_of(result: Result) -> dict[str, Any]:
    lines = [line for line in result.stdout.splitlines() if line.startswith(JSON_PREFIX)]
    assert len(lines) == 1, result.output
    doc: dict[str, Any] = json.loads(lines[0].removeprefix(JSON_PREFIX))
    return doc


def test_three_simulated_gpus_pass_with_table_and_json_line() -> None:
    result = invoke([*FAST, "--expected-gpus", "3", "--duration-s", "0.2"], NumpyBackend(devices=3))
    assert result.exit_code == 0, result.output
    doc = json_of(result)
    assert (doc["verdict"], doc["reasons"], doc["visible_gpus"]) == ("pass", [], 3)
    assert [g["pci"] for g in doc["gpus"]] == ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"]
    for gpu in doc["gpus"]:
        assert set(gpu["burn"]) == {"iterations", "device_s", "tflops", "ratio", "error"}
        assert gpu["burn"]["iterations"] > 0 and gpu["burn"]["tflops"] > 0
        assert 0 < gpu["burn"]["ratio"] <= 1 and gpu["burn"]["error"] is None
        assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
        assert gpu["memory"] is None
    table = result.stdout.splitlines()
    assert table[0].split()[:3] == ["GPU", "PCI", "NAME"]
    assert [row.split()[1] for row in table[1:4]] == [g["pci"] for g in doc["gpus"]]
    assert table[4].startswith("verdict=pass expected_gpus=3 visible_gpus=3")


def test_memory_class_xid_tests_only_the_faulted_gpu_and_fails_on_bad_cells() -> None:
    backend = NumpyBackend(devices=2, faults=NumpyFaults(stuck_words={1: 3}))
    args = [*FAST, "--expected-gpus", "2", "--duration-s", "0.1", "--xid", "48"]
    result = invoke([*args, "--memory-test-pci", "00000000:19:00.0", "--output", "json"], backend)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    # 3 words with bit 0 stuck low: caught by 0xFF… and 0x55… (3 each) and by 2 odd addresses.
    assert doc["reasons"] == ["memory-errors gpu=1 pci=0000:19:00.0 errors=8 bytes=4194304"]
    assert doc["memory_test"] == {"required": True, "pci": "0000:19:00.0"}
    assert [g["memory"] is None for g in doc["gpus"]] == [True, False]


def test_memory_class_xid_without_pci_tests_every_gpu() -> None:
    args = [*FAST, "--expected-gpus", "2", "--duration-s", "0.1", "--xid", "94", "--output", "json"]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    memory = [g["memory"] for g in json.loads(result.stdout)["gpus"]]
    assert [(m["bytes_tested"], m["errors"], m["error"]) for m in memory] == [
        (4194304, 0, None)
    ] * 2
    assert all(m["gbps"] > 0 for m in memory)
    assert all(set(m) == {"bytes_tested", "errors", "gbps", "error"} for m in memory)


def test_other_xid_runs_no_memory_test() -> None:
    args = [*FAST, "--expected-gpus", "2", "--duration-s", "0.1", "--xid", "79", "--output", "json"]
    result = invoke([*args, "--memory-test-pci", "0000:19:00.0"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["memory_test"]["required"] is False
    assert [g["memory"] for g in doc["gpus"]] == [None, None]


@pytest.mark.parametrize(
    ("faults", "expected_reasons"),
    [
        pytest.param(
            NumpyFaults(fail={1: "CUDA error: an illegal memory access was encountered"}),
            [
                "exception gpu=1 pci=0000:19:00.0 "
                "error='RuntimeError: CUDA error: an illegal memory access was encountered'"
            ],
            id="exception-on-one-gpu",
        ),
        pytest.param(
            NumpyFaults(stall=frozenset({0})),
            ["not-run gpu=0 pci=0000:18:00.0 iterations=0 device_s=0"],
            id="gpu-that-never-ran",
        ),
    ],
)
def test_faulty_gpu_fails_with_exit_1(faults: NumpyFaults, expected_reasons: list[str]) -> None:
    backend = NumpyBackend(devices=2, faults=faults)
    args = [*FAST, "--expected-gpus", "2", "--duration-s", "0.1", "--output", "json"]
    result = invoke(args, backend)
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["reasons"] == expected_reasons


def test_missing_gpu_fails_with_exit_1() -> None:
    result = invoke([*FAST, "--expected-gpus", "3", "--duration-s", "0.1", "--output", "json"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["reasons"] == ["gpu-count expected=3 visible=2"]


class NoDriver:
    """A backend whose GPUs cannot be listed, as torch without a working CUDA driver."""

    name = "torch"

    def devices(self) -> Any:
        raise RuntimeError("CUDA driver initialization failed")

    def burn(self, index: int, size: int, duration_s: float) -> Any:
        raise AssertionError("no burn without devices")

    def memory_test(self, index: int) -> Any:
        raise AssertionError("no memory test without devices")

    def pcie_links(self) -> Any:
        raise AssertionError("no PCIe read without devices")


def test_backend_that_cannot_start_fails_with_exit_1() -> None:
    result = invoke(["--expected-gpus", "8", "--duration-s", "0.1"], NoDriver())
    assert result.exit_code == 1, result.output
    assert json_of(result)["reasons"] == [
        "backend-error backend=torch error='RuntimeError: CUDA driver initialization failed'",
        "gpu-count expected=8 visible=0",
        "no-gpu-ran",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "Missing option '--expected-gpus'", id="expected-gpus-missing"),
        pytest.param(["--expected-gpus", "0"], "'--expected-gpus'", id="zero-gpus"),
        pytest.param(["--min-ratio", "0"], "'--min-ratio'", id="ratio-zero"),
        pytest.param(["--min-ratio", "1.5"], "'--min-ratio'", id="ratio-above-one"),
        pytest.param(["--duration-s", "0"], "'--duration-s'", id="zero-duration"),
        pytest.param(["--duration-s", "nan"], "not a finite number", id="nan-duration"),
        pytest.param(["--duration-s", "inf"], "not a finite number", id="endless-duration"),
        pytest.param(["--min-ratio", "nan"], "not a finite number", id="nan-ratio-passes-all"),
        pytest.param(["--allreduce-timeout-s", "nan"], "not a finite number", id="nan-timeout"),
        pytest.param(["--memory-test-pci", "gpu3"], "not a PCI address", id="bad-pci"),
        pytest.param(["--memory-class-xids", "48,x"], "'--memory-class-xids'", id="bad-xids"),
        pytest.param(["--backend", "cuda"], "'--backend'", id="unknown-backend"),
        pytest.param(["--backend", "numpy"], "'--backend'", id="numpy-not-shipped"),
    ],
)
def test_bad_arguments_print_one_line_and_exit_2(args: list[str], message: str) -> None:
    full = args if args == [] or "--expected-gpus" in args else ["--expected-gpus", "2", *args]
    result = CliRunner().invoke(loadtest, ["run", *full])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], lines


def test_summary_for_the_guard_goes_to_an_existing_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet creates the file; the command only writes it
    args = [*FAST, "--expected-gpus", "3", "--duration-s", "0.1", "--termination-log", str(log)]
    result = invoke(args)
    assert result.exit_code == 1, result.output
    assert json.loads(log.read_text()) == {
        "schema": "gpu-node-guard/loadtest-summary/v1",
        "kind": "loadtest",
        "verdict": "fail",
        "expected_gpus": 3,
        "visible_gpus": 2,
        "ratio": json_of(result)["ratio"],
        "allreduce_busbw_gbps": None,
        # The GPUs it ran on, as the backend names them (a device pass must name its GPU).
        "gpus": [
            "CPU-00000000-0000-0000-0000-000000000000",
            "CPU-00000001-0000-0000-0000-000000000000",
        ],
        "reasons": ["gpu-count expected=3 visible=2"],
        "notes": [],
        "left_off": 0,
    }


def test_no_termination_log_is_created_outside_a_container(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    args = [*FAST, "--expected-gpus", "2", "--duration-s", "0.1", "--termination-log", str(log)]
    assert invoke(args).exit_code == 0
    assert not log.exists()


def test_summary_keeps_under_the_kubernetes_limit() -> None:
    plan = RunPlan(32, 0.1, MemoryPlan(False), 10.0, 10.0)
    run = RunResult("torch", plan, (), ())
    reasons = tuple(f"exception gpu={i} error='{'x' * 180}'" for i in range(40))
    verdict = Verdict(False, reasons, ("pcie-unknown error='y'",), None, None)
    text = summary(Criteria(40, 0.8), run, verdict)
    doc = json.loads(text)
    assert len(text.encode()) <= SUMMARY_LIMIT
    assert doc["reasons"] == list(reasons[: len(doc["reasons"])])
    assert doc["left_off"] == 41 - len(doc["reasons"]) - len(doc["notes"]) > 0
