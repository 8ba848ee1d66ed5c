"""A `guard.run.Run` for the watch's unit tests: a dry run (its executors print), on the given
settings, Prometheus client and log, with an optional Lease and the outcomes so far."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from guard.apply.outcome import Outcome, RunTrace
from guard.doors.prom import PromClient
from guard.doors.retry import Anchor
from guard.log import Log
from guard.plan.deadlines import run_deadlines
from guard.run import Budget, Inputs, Run
from guard.settings import Settings
from tests.builders import TEMPLATES


def dry_run(
    s: Settings,
    prom: PromClient,
    log: Log,
    at: datetime,
    lease: Any = None,
    outcomes: tuple[Outcome, ...] = (),
) -> Run:
    trace = RunTrace(prom, templates=TEMPLATES, outcomes=list(outcomes))
    budget = Budget(Anchor(at, 0.0), run_deadlines(at, s, True))
    inputs = Inputs(dry_run=True, at=at, snapshot_file=None, output="json", watch=True)
    return Run(s, trace, log, log, inputs, budget, lease=lease)
