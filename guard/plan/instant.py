"""The instant a cycle's queries ask about: never ahead of what Prometheus has.

For an instant in the future Prometheus answers with each series' last sample (its lookback), so
a GPU loss "holds" until then: a pod clock 60, 120 or 240 s ahead cordoned a loss that had held
20 s of a 30 s hold (held_s 66, 125, 245) and dated the cordon, its ledger line and its Event in
the future. So the cycle reads Prometheus' own time once (the evaluation time of ``time()``,
guard.doors.prom `server_time`) and asks about the earlier of the two clocks; the watch keeps the
same offset from the pod's clock (guard.watch `RunClock`), and every write carries the instant
its decision was made on. A replay's `--at` is its instant as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

# Clocks further apart than this are worth a WARN line (NTP keeps them within milliseconds; a
# scrape interval is 15 to 60 s).
SKEW_WARN_S = 30.0


@dataclass(frozen=True, slots=True)
class Instant:
    at: datetime  # what the queries ask about and the writes carry
    skew_s: float  # the pod's clock less Prometheus' (positive: the pod runs ahead)
    offset: timedelta  # `at` less the pod's clock: zero, or back to Prometheus' time

    @property
    def skewed(self) -> bool:
        return abs(self.skew_s) > SKEW_WARN_S


def cycle_instant(pod: datetime, prometheus: datetime) -> Instant:
    """The earlier clock, to the second.

    >>> from datetime import UTC
    >>> pod = datetime(2026, 9, 21, 5, 57, 0, 400000, tzinfo=UTC)
    >>> ahead = cycle_instant(pod, datetime(2026, 9, 21, 5, 55, 0, 250000, tzinfo=UTC))
    >>> ahead.at.strftime("%H:%M:%S"), ahead.skew_s, ahead.skewed, ahead.offset.total_seconds()
    ('05:55:00', 120.15, True, -120.4)
    >>> behind = cycle_instant(pod, datetime(2026, 9, 21, 5, 57, 20, tzinfo=UTC))
    >>> behind.at.strftime("%H:%M:%S"), behind.skew_s, behind.skewed
    ('05:57:00', -19.6, False)
    """
    at = min(pod, prometheus).replace(microsecond=0)
    return Instant(at, round((pod - prometheus).total_seconds(), 3), at - pod)
