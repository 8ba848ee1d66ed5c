"""The hold (guard.plan.hold): which facts make a cordon candidate, and when a pending one
decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guard.codec.series import loss_since
from guard.doors.prom import Series
from guard.model import GpuSample, PromView
from guard.plan.hold import candidates, decides_at, hold_window_s, loss_held_s, nvml_candidates
from guard.settings import Settings

NOW = datetime(2026, 9, 21, 5, 55, 0, tzinfo=UTC)
S = Settings(prometheus_url="http://unused")


def steps(*minutes_ago: float, node: str = "n") -> Series:
    return Series((("node", node),), tuple((NOW.timestamp() - 60 * m, 1.0) for m in minutes_ago))


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def gpu(node: str, xid: int) -> GpuSample:
    return GpuSample(node, "4", "GPU-1", "0000:99:00.0", xid)


@pytest.mark.parametrize(
    ("xid", "held", "cordoned", "expected"),
    [
        pytest.param(79, 120, False, True, id="fast-path-at-its-window"),
        pytest.param(79, 119, False, False, id="fast-path-1s-short"),
        pytest.param(48, 599, False, False, id="full-hold-1s-short"),
        pytest.param(48, 600, False, True, id="full-hold-at-its-window"),
        pytest.param(48, 900, True, False, id="cordoned-in-kube-state-metrics"),
        pytest.param(48, None, False, False, id="no-loss-now"),
    ],
)
def test_candidates(xid, held, cordoned, expected):
    view = PromView(
        hardware_xids=(gpu("n", xid),),
        loss_since=(("n", ago(held)),) if held is not None else (),
        cordoned=("n",) if cordoned else (),
    )
    assert (candidates(view, NOW, S) == (gpu("n", xid),)) is expected


@pytest.mark.parametrize(
    ("changes", "held", "cordoned", "expected"),
    [
        pytest.param({}, 600, False, True, id="mismatch-at-the-hold-window"),
        pytest.param({}, 599, False, False, id="mismatch-1s-short"),
        pytest.param({"nvml_mismatch_hold_s": 1800}, 1200, False, False, id="own-hold-longer"),
        pytest.param({"nvml_mismatch_hold_s": 300}, 300, False, True, id="own-hold-shorter"),
        pytest.param({"hold_window_s": 900}, 600, False, False, id="default-follows-the-hold"),
        pytest.param({}, 900, True, False, id="cordoned-in-kube-state-metrics"),
    ],
)
def test_nvml_candidates(changes, held, cordoned, expected):
    view = PromView(nvml_since=(("n", ago(held)),), cordoned=("n",) if cordoned else ())
    s = Settings(prometheus_url="http://unused", **changes)
    assert (nvml_candidates(view, NOW, s) == ("n",)) is expected


def test_a_mismatch_seen_before_and_after_a_gap_is_held_only_since_the_gap():
    """The agent's series went away for two steps (SKIP, UNKNOWN, no scrape): absent is not a
    mismatch, so the hold starts again where the failure is seen again."""
    history = steps(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 8, 7, 6, 5, 4, 3, 2, 1, 0)
    since = dict(loss_since([history], NOW, 60, 1800))
    assert since == {"n": ago(8 * 60)}
    view = PromView(nvml_since=tuple(since.items()))
    assert nvml_candidates(view, NOW, S) == ()  # 8 minutes, not 20
    assert nvml_candidates(view, NOW + timedelta(minutes=2), S) == ("n",)


def test_candidates_come_back_sorted_by_node_and_gpu_whatever_the_input_order():
    xids = (gpu("b", 79), gpu("a", 48), GpuSample("a", "1", "GPU-0", "0000:18:00.0", 79))
    view = PromView(hardware_xids=xids, loss_since=(("a", ago(900)), ("b", ago(900))))
    found = [(g.node, g.gpu) for g in candidates(view, NOW, S)]
    assert found == [("a", "1"), ("a", "4"), ("b", "4")]


def test_a_pending_hold_decides_when_its_window_has_passed():
    since = ago(60)
    view = PromView(hardware_xids=(gpu("n", 79),), loss_since=(("n", since),))
    at = decides_at(since, hold_window_s(79, S))
    assert at == NOW + timedelta(seconds=60)
    assert candidates(view, at - timedelta(seconds=1), S) == ()
    assert candidates(view, at, S) == (gpu("n", 79),)
    assert loss_held_s(view, "n", at) == S.fast_hold_window_s
    assert loss_held_s(view, "other", at) == 0
