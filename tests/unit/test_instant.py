"""The run's clock (guard.plan.instant): Prometheus' own time, never the pod's; clocks far apart
are flagged."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guard.plan.instant import SKEW_WARN_S, cycle_instant
from tests.builders import NOW


@pytest.mark.parametrize(
    ("pod_s", "prom_s", "skewed"),
    [
        pytest.param(0, 0, False, id="agree"),
        pytest.param(60, 0, True, id="pod-60s-ahead"),
        pytest.param(240, 0, True, id="pod-240s-ahead"),
        pytest.param(20, 0, False, id="pod-20s-ahead-no-line"),
        pytest.param(0, 45, True, id="pod-45s-behind"),
        pytest.param(0.7, 0.2, False, id="to-the-second"),
    ],
)
def test_the_instant_is_prometheus_time_whatever_the_pods_clock(pod_s, prom_s, skewed):
    pod, prom = NOW + timedelta(seconds=pod_s), NOW + timedelta(seconds=prom_s)
    found = cycle_instant(pod, prom)
    assert found.at == prom.replace(microsecond=0) <= prom
    assert found.skewed is skewed and found.skew_s == pytest.approx(pod_s - prom_s)
    assert pod + found.offset == prom  # the run's clock: the pod's monotonic time from there


def test_the_bound_is_thirty_seconds_either_way():
    assert SKEW_WARN_S == 30
    assert not cycle_instant(NOW + timedelta(seconds=30), NOW).skewed
    assert cycle_instant(NOW + timedelta(seconds=30.5), NOW).skewed
    assert cycle_instant(NOW - timedelta(seconds=31), NOW).skewed
