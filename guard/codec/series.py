"""What the read stage and the planners both say of Prometheus series."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from guard.codec import queries
from guard.doors.prom import Series

_TOLERANCE_S = 0.001
_SHOWN = 60  # characters of a refused value in the WARN line


PROM_FIX = (
    "fix the series at its exporter (dcgm-exporter, kube-state-metrics, the node agent) or its"
    " scrape; the guard leaves this node alone while it is wrong"
)


def loss_since(
    history: Iterable[Series], now: datetime, step_s: int, lookback_s: int
) -> tuple[tuple[str, datetime], ...]:
    """Per node, the first step of the run of loss steps that reaches up to `now`; a run from the
    history's start is `lookback_s - step_s` old, the most every engine shows (Prometheus 3 leaves
    a range's first step out), so engines agree on the order of old losses too.

    >>> now = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)
    >>> def at(minute): return now.timestamp() - 60 * minute, 1.0
    >>> s = Series((("node", "a"),), (at(12), at(3), at(2), at(1), at(0)))
    >>> loss_since([s], now, 60, 1800)[0][1].strftime("%H:%M")
    '05:52'
    >>> loss_since([Series((("node", "b"),), (at(5),))], now, 60, 1800)
    ()
    """
    last = on_step(now, step_s).timestamp()  # the history was evaluated there
    earliest = last - (lookback_s - step_s)
    out = []
    for series in history:
        stamps = sorted(t for t, value in series.points if value > 0)
        if not stamps or last - stamps[-1] > _TOLERANCE_S:
            continue  # no loss at the last step before now
        first = len(stamps) - 1
        while first > 0 and stamps[first] - stamps[first - 1] <= step_s + _TOLERANCE_S:
            first -= 1
        start = max(stamps[first], earliest)
        out.append((series.label(queries.NODE_LABEL), datetime.fromtimestamp(start, UTC)))
    return tuple(sorted(out))


def on_step(now: datetime, step_s: int) -> datetime:
    """The last multiple of `step_s` (since the epoch) at or before `now`."""
    return datetime.fromtimestamp(now.timestamp() // step_s * step_s, UTC)


def shown(value: str) -> str:
    """A refused value for a log line: escaped, at most `_SHOWN` characters."""
    if len(value) <= _SHOWN:
        return repr(value)
    return f"{value[:_SHOWN]!r}…({len(value)} characters)"
