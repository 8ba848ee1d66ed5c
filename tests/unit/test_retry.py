"""The run's retry budget (guard/doors/retry.py) and when Prometheus answers are retried."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from guard.doors.prom import _Answer, _retry_wait
from guard.doors.retry import Anchor, Backoff, retry_after_s


def test_backoff_sleeps_within_its_ceiling_and_never_past_the_deadline() -> None:
    slept: list[float] = []
    b = Backoff(10.0, base_s=1.0, cap_s=4.0, clock=lambda: 0.0, sleep=slept.append)
    b.rng = random.Random(7)
    assert [b.wait(n) for n in (1, 2, 3, 4)] == [True, True, True, True]
    assert all(0 <= s <= c for s, c in zip(slept, (1, 2, 4, 4), strict=True))
    assert Backoff(0.0, clock=lambda: 0.0).wait(1) is False  # the deadline has come
    assert (b.wait(1, at_least_s=3.0), slept[-1]) == (True, 3.0)
    assert (b.wait(1, at_least_s=10.0), b.wait(1, until=0.0)) == (False, False)


def test_the_anchor_counts_wall_time_on_the_monotonic_clock() -> None:
    ticks = iter([100.0, 130.0])
    a = Anchor(datetime(2026, 9, 21, 5, 50, tzinfo=UTC), 100.0, lambda: next(ticks))
    assert a.at(datetime(2026, 9, 21, 5, 54, tzinfo=UTC)) == 340.0
    assert a.now().strftime("%H:%M:%S") == "05:50:00"
    assert a.now().strftime("%H:%M:%S") == "05:50:30"


def test_retry_after_is_seconds_or_an_http_date() -> None:
    at = datetime(2026, 9, 21, 5, 50, tzinfo=UTC)
    assert retry_after_s("2", at) == 2.0
    assert retry_after_s("Mon, 21 Sep 2026 05:50:07 GMT", at) == 7.0
    assert (retry_after_s("soon", at), retry_after_s("-1", at)) == (None, None)


def test_only_a_gateways_answer_or_a_429_that_says_when_is_retried() -> None:
    assert _retry_wait(_Answer(503, "", bytearray())) == 0.0
    assert _retry_wait(_Answer(400, "", bytearray())) is None
    assert _retry_wait(_Answer(429, "", bytearray(), retry_after="3")) == 3.0
    assert _retry_wait(_Answer(429, "", bytearray())) is None  # no word on when: not retried
