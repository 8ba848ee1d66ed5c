"""One retry budget per run: full-jitter exponential backoff that never sleeps past the deadline
both doors share (the cycle's, then the run's: guard.plan.deadlines), on the monotonic clock.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

# A restarted kube-apiserver's RBAC authorizer denies until its caches fill: an authorizer's
# 403 is retried this long after the request's first (docs/writes.md).
FORBIDDEN_GRACE_S = 5.0


@dataclass
class Backoff:
    deadline: float  # on `clock`'s scale (time.monotonic)
    base_s: float = 0.05
    cap_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    waits: int = 0  # retries so far, all requests together (reported in the `done` line)
    part: str = "cycle"  # whose deadline it is, for the error that says it has passed

    @classmethod
    def for_seconds(cls, seconds: float) -> Backoff:
        return cls(time.monotonic() + seconds)

    @classmethod
    def once(cls) -> Backoff:
        """No budget: the first try is the only one."""
        return cls(-math.inf, part="request")

    def remaining_s(self) -> float:
        return self.deadline - self.clock()

    def until(self, deadline: float, part: str) -> None:
        """The next part of the run (the watch, the release) retries until `deadline`."""
        self.deadline, self.part = deadline, part

    def wait(self, attempt: int, at_least_s: float = 0.0, until: float = math.inf) -> bool:
        """Sleep before retry `attempt` (1 after the first failure), at least `at_least_s` (a
        Retry-After); False, not sleeping, when that reaches the deadline or `until`: give up."""
        ceiling = min(self.cap_s, self.base_s * 2 ** max(0, attempt - 1))
        delay = max(at_least_s, self.rng.uniform(0, ceiling))
        if min(self.deadline, until) - self.clock() <= delay:
            return False
        self.waits += 1
        self.sleep(delay)
        return True


@dataclass(frozen=True, slots=True)
class Anchor:
    """The run's start on both clocks: wall-clock instants are counted on the monotonic clock
    from there, so a step of the wall clock (NTP) neither lengthens nor shortens a wait."""

    wall: datetime
    mono: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def start(cls) -> Anchor:
        return cls(datetime.now(UTC), time.monotonic())

    def at(self, when: datetime) -> float:
        return self.mono + (when - self.wall).total_seconds()

    def now(self) -> datetime:
        return self.wall + timedelta(seconds=self.clock() - self.mono)


def retry_after_s(value: str, now: datetime) -> float | None:
    """A Retry-After header's wait in seconds (delta-seconds or an HTTP date, RFC 9110 10.2.3)."""
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())
