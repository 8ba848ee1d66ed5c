"""One retry budget per cycle: full-jitter exponential backoff that never sleeps past the deadline.

The CronJob's pod is killed at ``activeDeadlineSeconds`` (270 s), so every retry of a transient API
error or a write conflict shares one deadline (`Settings.cycle_deadline_s` after the cycle
started) instead of counting tries per request. Full jitter spreads concurrent writers apart
(AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    deadline: float  # on `clock`'s scale (time.monotonic)
    base_s: float = 0.05
    cap_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    waits: int = 0  # retries so far, all requests together (reported in the `done` line)

    @classmethod
    def for_seconds(cls, seconds: float) -> Backoff:
        return cls(time.monotonic() + seconds)

    def remaining_s(self) -> float:
        return self.deadline - self.clock()

    def wait(self, attempt: int) -> bool:
        """Sleep before retry number `attempt` (1 after the first failure); False, without
        sleeping, when that sleep would reach the deadline: the caller gives up.

        >>> slept = []
        >>> b = Backoff(10.0, base_s=1.0, cap_s=4.0, clock=lambda: 0.0, sleep=slept.append,
        ...             rng=random.Random(7))
        >>> [b.wait(n) for n in (1, 2, 3, 4)], all(0 <= s <= c for s, c in zip(slept, (1, 2, 4, 4)))
        ([True, True, True, True], True)
        >>> Backoff(0.0, clock=lambda: 0.0).wait(1)  # the deadline has come
        False
        """
        ceiling = min(self.cap_s, self.base_s * 2 ** max(0, attempt - 1))
        delay = self.rng.uniform(0, ceiling)
        if self.remaining_s() <= delay:
            return False
        self.waits += 1
        self.sleep(delay)
        return True
