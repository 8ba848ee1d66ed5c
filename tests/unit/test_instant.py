"""The instant a cycle asks about (guard.plan.instant): the pod's clock, never ahead of
Prometheus' own; clocks far apart are flagged."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guard.plan.instant import SKEW_WARN_S, cycle_instant
from tests.builders import NOW


@pytest.mark.parametrize(
    ("pod_s", "prom_s", "at_s", "skewed"),
    [
        pytest.param(0, 0, 0, False, id="agree"),
        pytest.param(60, 0, 0, True, id="pod-60s-ahead"),
        pytest.param(240, 0, 0, True, id="pod-240s-ahead"),
        pytest.param(20, 0, 0, False, id="pod-20s-ahead-no-line"),
        pytest.param(0, 45, 0, True, id="pod-behind-keeps-its-own"),
        pytest.param(0.7, 0.2, 0, False, id="to-the-second"),
    ],
)
def test_the_instant_never_runs_ahead_of_prometheus(pod_s, prom_s, at_s, skewed):
    pod, prom = NOW + timedelta(seconds=pod_s), NOW + timedelta(seconds=prom_s)
    found = cycle_instant(pod, prom)
    assert found.at == NOW + timedelta(seconds=at_s)
    assert found.at <= prom and found.at <= pod
    assert found.skewed is skewed and found.skew_s == pytest.approx(pod_s - prom_s)
    assert pod + found.offset == found.at  # the watch's clock keeps the same offset


def test_the_bound_is_thirty_seconds_either_way():
    assert SKEW_WARN_S == 30
    assert not cycle_instant(NOW + timedelta(seconds=30), NOW).skewed
    assert cycle_instant(NOW + timedelta(seconds=30.5), NOW).skewed
    assert cycle_instant(NOW - timedelta(seconds=31), NOW).skewed
