"""The run's clock: Prometheus' own time, not the pod's (docs/architecture.md, "Time"). For an
instant in the future Prometheus answers with each series' last sample, so a pod clock ahead
once cordoned a loss that had not held its window, and dated the writes in the future.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

# Clocks further apart than this are worth a WARN line (NTP keeps them within milliseconds; a
# scrape interval is 15 to 60 s).
SKEW_WARN_S = 30.0


@dataclass(frozen=True, slots=True)
class Instant:
    at: datetime  # what the cycle's queries ask about and its writes carry
    skew_s: float  # the pod's clock less Prometheus' (positive: the pod runs ahead)
    offset: timedelta  # Prometheus' clock less the pod's: what the run's clock adds to the pod's

    @property
    def skewed(self) -> bool:
        return abs(self.skew_s) > SKEW_WARN_S


def cycle_instant(pod: datetime, prometheus: datetime) -> Instant:
    """Prometheus' time, to the second (`pod` read after its answer came: the run's clock,
    the pod's plus `offset`, never runs ahead of Prometheus').

    >>> from datetime import UTC
    >>> pod = datetime(2026, 9, 21, 5, 57, 0, 400000, tzinfo=UTC)
    >>> ahead = cycle_instant(pod, datetime(2026, 9, 21, 5, 55, 0, 250000, tzinfo=UTC))
    >>> ahead.at.strftime("%H:%M:%S"), ahead.skew_s, ahead.skewed, ahead.offset.total_seconds()
    ('05:55:00', 120.15, True, -120.15)
    >>> behind = cycle_instant(pod, datetime(2026, 9, 21, 5, 57, 20, tzinfo=UTC))
    >>> behind.at.strftime("%H:%M:%S"), behind.skew_s, behind.skewed
    ('05:57:20', -19.6, False)
    """
    skew_s = round((pod - prometheus).total_seconds(), 3)
    return Instant(prometheus.replace(microsecond=0), skew_s, prometheus - pod)
