"""The all-reduce accounting without processes: who failed first, the figures, the per-GPU pairs."""

from __future__ import annotations

import json

import pytest

from guard.loadtest.collective import (
    AllreducePlan,
    AllreduceSpec,
    RankOutcome,
    RankReport,
    SizeFigure,
    Step,
    hung_ranks,
    pair_rounds,
    rank_config,
    size_label,
    stage,
    steps,
    steps_from_json,
)
from guard.loadtest.collective_summary import exit_text, summarise

SPEC = AllreduceSpec("gloo", "cpu", (1_000_000, 4_000_000), warmup=1, iterations=3)
PLAN = AllreducePlan(SPEC, world=3, start_timeout_s=300.0, step_timeout_s=60.0)
STEPS = steps(SPEC, 3)  # allreduce-1000000B, allreduce-4000000B, pairs-1 … pairs-3
DONE = 12
# Seconds of one all-reduce per step: 1 ms and 2 ms together, then the pairs (0,1), (1,2), (2,0);
# rank 1's two pairs take 8 ms, the pair without it 2 ms.
SECONDS = {0: 0.001, 1: 0.002}
PAIR_SECONDS = {0: {2: 0.008, 4: 0.002}, 1: {2: 0.008, 3: 0.008}, 2: {3: 0.008, 4: 0.002}}


def done(rank: int) -> RankReport:
    seconds: dict[int, float | None] = {**SECONDS, 2: None, 3: None, 4: None}
    seconds |= PAIR_SECONDS[rank]
    return RankReport(rank, DONE, seconds, exit=0)


def test_every_rank_done_gives_the_figures_and_each_gpus_best_pair() -> None:
    result = summarise(PLAN, STEPS, [done(0), done(1), done(2)])
    assert result.completed
    assert result.outcomes == tuple(RankOutcome(r, "ok", "done") for r in range(3))
    # algbw = bytes / seconds; busbw = algbw · 2(n−1)/n = algbw · 4/3 for three ranks.
    assert result.sizes == (
        SizeFigure(1_000_000, 0.001, pytest.approx(1.0), pytest.approx(4 / 3)),
        SizeFigure(4_000_000, 0.002, pytest.approx(2.0), pytest.approx(8 / 3)),
    )
    # A pair's bus factor is 1: 4 MB in 8 ms is 0.5 GB/s, in 2 ms 2 GB/s. Rank 1 has no fast pair.
    assert result.gpu_busbw_gbps == pytest.approx((2.0, 0.5, 2.0))


@pytest.mark.parametrize(
    ("reports", "hung", "expected", "hung_after_s"),
    [
        pytest.param(
            [
                RankReport(
                    0,
                    4,
                    SECONDS,
                    error="RuntimeError: Connection closed by peer",
                    error_seq=9,
                    exit=1,
                ),
                RankReport(1, 4, SECONDS, exit=-9, log_tail="Killed"),
                RankReport(2, 4, SECONDS, killed=True, exit=-9),
            ],
            (),
            (
                RankOutcome(
                    0, "stopped", "allreduce-4000000B", "RuntimeError: Connection closed by peer"
                ),
                RankOutcome(1, "died", "allreduce-4000000B", "signal=SIGKILL last_output='Killed'"),
                RankOutcome(2, "stopped", "allreduce-4000000B"),
            ),
            None,
            id="dead-rank-is-the-cause-even-after-a-peer-reported",
        ),
        pytest.param(
            [
                RankReport(
                    0, 6, SECONDS, error="RuntimeError: Connection reset", error_seq=8, exit=1
                ),
                RankReport(1, 6, SECONDS, killed=True, exit=-9),
                RankReport(
                    2,
                    6,
                    SECONDS,
                    error="RuntimeError: CUDA error: an illegal memory access was encountered",
                    error_seq=4,
                    exit=1,
                ),
            ],
            (),
            (
                RankOutcome(0, "stopped", "pairs-1", "RuntimeError: Connection reset"),
                RankOutcome(1, "stopped", "pairs-1"),
                RankOutcome(
                    2,
                    "error",
                    "pairs-1",
                    "RuntimeError: CUDA error: an illegal memory access was encountered",
                ),
            ),
            None,
            id="first-error-reported-is-the-cause",
        ),
        pytest.param(
            [
                RankReport(0, 4, SECONDS, killed=True, exit=-9),
                RankReport(1, 3, SECONDS, killed=True, exit=-9),
                RankReport(2, 4, SECONDS, killed=True, exit=-9),
            ],
            (1,),
            (
                RankOutcome(0, "stopped", "allreduce-4000000B"),
                RankOutcome(1, "hung", "allreduce-4000000B"),
                RankOutcome(2, "stopped", "allreduce-4000000B"),
            ),
            60.0,
            id="laggard-is-hung-after-the-step-limit",
        ),
        pytest.param(
            [
                RankReport(0, 0, killed=True, exit=-9),
                RankReport(1, -1, killed=True, exit=-9),
                RankReport(2, 0, killed=True, exit=-9),
            ],
            (1,),
            (
                RankOutcome(0, "stopped", "init"),
                RankOutcome(1, "hung", "start"),
                RankOutcome(2, "stopped", "init"),
            ),
            300.0,
            id="rank-that-never-started-is-hung-after-the-start-limit",
        ),
        pytest.param(
            [done(0), RankReport(1, DONE, exit=-9, killed=True), RankReport(2, 8, exit=0)],
            (),
            (
                RankOutcome(0, "ok", "done"),
                RankOutcome(1, "ok", "done"),
                RankOutcome(2, "died", "pairs-2", "exit=0"),
            ),
            None,
            id="done-rank-ended-at-exit-is-ok-exit-0-before-done-is-not",
        ),
    ],
)
def test_attribution(
    reports: list[RankReport],
    hung: tuple[int, ...],
    expected: tuple[RankOutcome, ...],
    hung_after_s: float | None,
) -> None:
    result = summarise(PLAN, STEPS, reports, hung)
    assert result.outcomes == expected
    assert result.hung_after_s == hung_after_s
    assert not result.completed


def test_partial_run_keeps_the_sizes_every_rank_timed() -> None:
    reports = [
        RankReport(0, 4, {0: 0.001}, error="RuntimeError: x", error_seq=1, exit=1),
        RankReport(1, 4, {0: 0.001}, killed=True, exit=-9),
        RankReport(2, 4, {0: 0.003}, killed=True, exit=-9),
    ]
    result = summarise(PLAN, STEPS, reports)
    assert [(f.size_bytes, f.seconds) for f in result.sizes] == [
        (1_000_000, pytest.approx(0.005 / 3))
    ]
    assert result.gpu_busbw_gbps == (None, None, None)


def test_two_ranks_share_the_nodes_figure_and_one_rank_has_none() -> None:
    two = AllreducePlan(SPEC, 2, 300.0, 60.0)
    two_steps = steps(SPEC, 2)
    assert [s.name for s in two_steps] == ["allreduce-1000000B", "allreduce-4000000B"]
    reports = [RankReport(r, 6, {0: 0.001, 1: 0.004}, exit=0) for r in range(2)]
    # Two ranks: bus factor 1, 4 MB in 4 ms.
    assert summarise(two, two_steps, reports).gpu_busbw_gbps == pytest.approx((1.0, 1.0))
    one = AllreducePlan(SPEC, 1, 300.0, 60.0)
    result = summarise(one, steps(SPEC, 1), [RankReport(0, 6, {0: 0.001, 1: 0.004}, exit=0)])
    assert result.gpu_busbw_gbps == (None,)
    # One rank moves no data between GPUs: busbw 0 by nccl-tests' factor, algbw still reported.
    assert [(f.algbw_gbps, f.busbw_gbps) for f in result.sizes] == [(1.0, 0.0), (1.0, 0.0)]


def test_size_labels_take_the_largest_whole_unit() -> None:
    assert (size_label(256 << 20), size_label(64 << 10), size_label(1000)) == (
        "256MiB",
        "64KiB",
        "1000B",
    )


def test_pair_rounds_put_no_rank_twice_in_a_round() -> None:
    assert pair_rounds(4) == (((0, 1), (2, 3)), ((1, 2), (3, 0)))
    assert pair_rounds(3) == (((0, 1),), ((1, 2),), ((2, 0),))
    assert pair_rounds(2) == ()


def test_steps_reach_a_rank_unchanged_through_its_config() -> None:
    sent = (Step("allreduce-4KiB", 4096), Step("pairs-1", 8, ((0, 1),)))
    plan = AllreducePlan(SPEC, 2, 300.0, 60.0)
    assert steps_from_json(json.loads(rank_config(plan, sent, 1, 7))["steps"]) == sent


def test_stage_names_where_a_rank_stopped() -> None:
    two = (Step("allreduce-4KiB", 4096), Step("allreduce-64KiB", 65536))
    assert [stage(p, two) for p in (-1, 0, 1, 2, 3, 5, 6)] == [
        "start",
        "init",
        "allreduce-4KiB",
        "allreduce-4KiB",
        "allreduce-64KiB",
        "finish",
        "done",
    ]


def test_hung_ranks_are_the_laggards_or_all_past_the_limit() -> None:
    plan = AllreducePlan(AllreduceSpec("gloo", "cpu", (4096,), 1, 1), 3, 60.0, 5.0)
    assert (hung_ranks([4, 3, 4], 5.0, plan), hung_ranks([4, 4, 4], 5.0, plan)) == (
        (1,),
        (0, 1, 2),
    )
    assert (hung_ranks([4, 3, 4], 4.9, plan), hung_ranks([1, 0, 1], 30.0, plan)) == ((), ())


def test_exit_text_names_the_signal() -> None:
    assert (exit_text(-9), exit_text(3), exit_text(None)) == ("signal=SIGKILL", "exit=3", "running")
