"""The run's deadlines, computed once at its start (docs/architecture.md, "Watch"): the cycle's
`cycle_deadline_s` after the start, the watch's end `watch_until_s` after the cron slot, the
run's `RELEASE_S` after the later of the two; each at most the CronJob's deadline less
`END_MARGIN_S`, counted from the Job's schedule (its pod is never killed earlier).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from guard.plan.watch import cron_slot, scheduled_at
from guard.settings import CRONJOB_DEADLINE_S, Settings

# After the watch's end: its last decision's reads and writes and the Lease's release.
RELEASE_S = 15
# Before the CronJob's deadline: the metrics push (guard.apply.push, 5 s at most) and the exit.
END_MARGIN_S = 10


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Wall-clock instants, all computed at the run's start."""

    cycle: datetime  # the cycle's API requests and retries
    watch_end: datetime  # the watch decides until here
    run: datetime  # the watch's requests, the last decision's writes, the Lease's release


def run_deadlines(started: datetime, s: Settings, watching: bool) -> Deadlines:
    """The deadlines of a run that started at `started` (the module docstring).

    >>> from datetime import UTC
    >>> at = datetime(2026, 9, 21, 5, 50, 5, tzinfo=UTC)
    >>> d = run_deadlines(at, Settings(job_name="gpu-node-guard-29832830"), True)
    >>> [t.strftime("%H:%M:%S") for t in (d.cycle, d.watch_end, d.run)]
    ['05:53:25', '05:54:00', '05:54:15']
    """
    base = scheduled_at(s.job_name, started, s.cadence_s) or started
    last = base + timedelta(seconds=CRONJOB_DEADLINE_S - END_MARGIN_S)
    cycle = min(started + timedelta(seconds=s.cycle_deadline_s), last)
    end = cron_slot(started, s) + timedelta(seconds=s.watch_until_s)
    later = max(cycle, end) if watching else cycle
    return Deadlines(cycle, end, min(later + timedelta(seconds=RELEASE_S), last))
