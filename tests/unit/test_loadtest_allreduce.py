"""The all-reduce orchestration for real: one gloo process per simulated GPU, over loopback.

The same code starts NCCL ranks on the GPUs; here torch's gloo backend runs it on the CPU with
small tensors (4–256 KiB). Each case starts real processes and injects one failure into one rank
(`RankFaults`): the run must end by itself and name that rank. Needs torch (CI installs it; the
test fails under CI=true without it and skips with one line elsewhere).
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from guard.loadtest.cli import BackendOverride, loadtest
from guard.loadtest.collective import AllreducePlan, AllreduceResult, AllreduceSpec, RankOutcome
from guard.loadtest.ranks import run_allreduce
from tests.numpy_backend import ALLREDUCE_SIZES, NumpyBackend, NumpyFaults, RankFaults
from tests.tiers import unavailable


@pytest.fixture(autouse=True)
def _torch() -> None:
    if importlib.util.find_spec("torch") is None:
        unavailable("gloo", "torch is not installed", "pip install -e '.[test,gloo]'")


def allreduce(world: int, faults: RankFaults | None = None) -> AllreduceResult:
    spec = AllreduceSpec("gloo", "cpu", ALLREDUCE_SIZES, 1, 3, (faults or RankFaults()).by_rank())
    # A generous start-up limit (torch imports on a busy CI machine); a hang is found by the
    # 5 s step limit, long before the ranks' own collective timeout.
    return run_allreduce(AllreducePlan(spec, world, start_timeout_s=120.0, step_timeout_s=5.0))


def statuses(result: AllreduceResult) -> list[tuple[int, str, str]]:
    return [(o.rank, o.status, o.stage) for o in result.outcomes]


def test_four_ranks_reduce_exactly_and_report_every_size() -> None:
    result = allreduce(4)
    assert result.completed, result.outcomes
    assert result.outcomes == tuple(RankOutcome(r, "ok", "done") for r in range(4))
    assert result.mismatches == ()
    assert [f.size_bytes for f in result.sizes] == list(ALLREDUCE_SIZES)
    assert all(f.busbw_gbps == pytest.approx(f.algbw_gbps * 1.5) for f in result.sizes)
    # Four ranks: pairs (0,1), (2,3), then (1,2), (3,0); every GPU has a pair figure.
    assert all(bw is not None and bw > 0 for bw in result.gpu_busbw_gbps)


def test_rank_killed_mid_run_is_named_and_the_others_are_ended() -> None:
    result = allreduce(3, RankFaults(die={1: 1}))
    assert statuses(result) == [
        (0, "stopped", "allreduce-64KiB"),
        (1, "died", "allreduce-64KiB"),
        (2, "stopped", "allreduce-64KiB"),
    ]
    assert result.outcomes[1].detail.startswith("signal=SIGKILL")


def test_silent_rank_is_named_hung_after_the_step_limit() -> None:
    result = allreduce(3, RankFaults(hang={2: 2}))
    assert statuses(result) == [
        (0, "stopped", "allreduce-256KiB"),
        (1, "stopped", "allreduce-256KiB"),
        (2, "hung", "allreduce-256KiB"),
    ]
    assert result.hung_after_s == 5.0
    # Sizes before the hang were timed by every rank; the one it hung in was not.
    assert [f.size_bytes for f in result.sizes] == list(ALLREDUCE_SIZES[:2])


def test_rank_that_raises_is_the_cause_not_the_peers_that_lost_it() -> None:
    result = allreduce(3, RankFaults(fail={0: 1}))
    assert statuses(result) == [
        (0, "error", "allreduce-64KiB"),
        (1, "stopped", "allreduce-64KiB"),
        (2, "stopped", "allreduce-64KiB"),
    ]
    assert result.outcomes[0].detail == "RuntimeError: injected fault at step 1"


def test_wrong_element_in_the_reduced_tensor_is_counted() -> None:
    result = allreduce(2, RankFaults(corrupt={1: 2}))
    assert result.completed
    assert [(m.rank, m.step, m.count) for m in result.mismatches] == [(1, "allreduce-256KiB", 1)]


def invoke(backend: NumpyBackend, *args: str) -> tuple[int, dict[str, Any], str]:
    argv = ["run", "--size", "32", "--min-ratio", "0.05", "--duration-s"]
    result = CliRunner().invoke(
        loadtest, [*argv, "0.1", "--allreduce-timeout-s", "5", *args], obj=BackendOverride(backend)
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("LOADTEST-JSON ")]
    return result.exit_code, json.loads(lines[0].removeprefix("LOADTEST-JSON ")), result.stdout


def test_load_test_fails_naming_the_slow_rank_in_the_table() -> None:
    """A rank whose time counts 1000-fold, as a card on a degraded link: its pairs are slow."""
    backend = NumpyBackend(devices=3, faults=NumpyFaults(ranks=RankFaults(slow={1: 1000.0})))
    code, doc, text = invoke(backend, "--expected-gpus", "3", "--allreduce-min-ratio", "0.5")
    assert code == 1
    assert len(doc["reasons"]) == 1
    assert re.fullmatch(
        r"allreduce-slow rank=1 pci=0000:19:00\.0 bus_gbps=\S+ ratio=0\.\d{3} min_ratio=0\.5",
        doc["reasons"][0],
    ), doc["reasons"]
    # The ALLREDUCE column: "ok <GB/s> GB/s <ratio>"; ranks 0 and 2 share the pair (2, 0).
    ratios = {line.split()[1]: float(line.split()[-1]) for line in text.splitlines()[1:4]}
    assert ratios["0000:18:00.0"] == ratios["0000:1a:00.0"] == 1.0
    assert ratios["0000:19:00.0"] < 0.5
    assert [line.split()[2] for line in text.splitlines() if line.startswith("allreduce ")] == [
        "world=3"
    ] * 3


def test_load_test_with_a_dead_rank_fails_with_its_line() -> None:
    backend = NumpyBackend(devices=2, faults=NumpyFaults(ranks=RankFaults(die={0: 0})))
    code, doc, _text = invoke(backend, "--expected-gpus", "2")
    assert code == 1
    assert [r.split(" last_output=")[0] for r in doc["reasons"]] == [
        "allreduce-died rank=0 pci=0000:18:00.0 at=allreduce-4KiB signal=SIGKILL"
    ]
    assert [g["allreduce"]["status"] for g in doc["gpus"]] == ["died", "stopped"]
