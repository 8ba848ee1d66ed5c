"""The in-run watch's decisions (guard/watch.py runs them): which holds it waits for, when it ends
and the snapshot one decision plans on (docs/architecture.md, "Watch"). The watch re-reads a node
on the scrape grid, where a loss shows up to one query step less one scrape earlier than on the
cycle's, so a node is due that much before its cycle's `decides at`; never before its window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from guard.model import NodeInfo, PromView, Snapshot
from guard.plan.pending import PendingNode, pending
from guard.settings import Settings
from guard.states import Reason


@dataclass(frozen=True, slots=True)
class Due:
    """A node whose hold completes at `at`, for the reason of its GPU that completes first."""

    node: str
    reason: Reason  # xid-79
    at: datetime


_SCHEDULED = re.compile(r"-(\d{1,12})\Z")  # the CronJob's Job: <cronjob>-<minutes since epoch>


def fine(s: Settings) -> Settings:
    """The settings of the watch's one-node re-reads: the loss history at the scrape step."""
    return replace(s, query_step_s=s.scrape_interval_s)


def dues(snap: Snapshot, s: Settings, step_s: int | None = None) -> tuple[Due, ...]:
    """Per node with a pending Xid hold, the earliest instant the first of its holds can
    complete; by time, name. `snap` read on the `step_s` grid (default the cycle's): on the
    scrape grid the hold may complete up to one step less one scrape before it says."""
    early = timedelta(seconds=(s.query_step_s if step_s is None else step_s) - s.scrape_interval_s)
    first: dict[str, Due] = {}
    for p in pending(snap, s):
        # A name no Node has is not-in-api; a node trigger's hold: the next cycle decides it.
        if snap.node(p.node) is None or (isinstance(p, PendingNode) and p.trigger):
            continue
        seen = first.get(p.node)
        if seen is None or p.decides_at - early < seen.at:
            first[p.node] = Due(p.node, p.reason, p.decides_at - early)
    return tuple(sorted(first.values(), key=lambda d: (d.at, d.node)))


def scheduled_at(job_name: str, started: datetime, cadence_s: int) -> datetime | None:
    """The schedule the CronJob gave the run's Job, from its name, when that fits a run
    started at `started` (within one period before it); else None.

    >>> at = datetime(2026, 9, 21, 5, 50, 59, tzinfo=UTC)
    >>> scheduled_at("gpu-node-guard-29832830", at, 300).strftime("%H:%M:%S")
    '05:50:00'
    >>> scheduled_at("gpu-node-guard-manual-1", at, 300) is None
    True
    """
    found = _SCHEDULED.search(job_name)
    if not found:
        return None
    at = datetime.fromtimestamp(int(found.group(1)) * 60, UTC)
    return at if at <= started < at + timedelta(seconds=cadence_s) else None


def cron_slot(started: datetime, s: Settings) -> datetime:
    """The cron slot of a run: its Job's schedule, else its start on the cadence's grid (a run
    by hand in the same five minutes as the CronJob's is in that run's slot).

    >>> cron_slot(datetime(2026, 9, 21, 5, 54, 59, tzinfo=UTC), Settings()).strftime("%H:%M")
    '05:50'
    """
    on_grid = datetime.fromtimestamp(started.timestamp() // s.cadence_s * s.cadence_s, UTC)
    return scheduled_at(s.job_name, started, s.cadence_s) or on_grid


def watch_end(started: datetime, s: Settings) -> datetime:
    """`watch_until_s` after the Job's schedule (its start is never earlier, and the deadline
    counts from there), or after the run's start without one (a replay's: guard.plan.deadlines)."""
    scheduled = scheduled_at(s.job_name, started, s.cadence_s)  # never after `started`
    return (scheduled or started) + timedelta(seconds=s.watch_until_s)


def split(found: tuple[Due, ...], end: datetime) -> tuple[tuple[Due, ...], tuple[Due, ...]]:
    """(those the watch waits for, those left to the next run): a hold must complete by `end`."""
    return tuple(d for d in found if d.at <= end), tuple(d for d in found if d.at > end)


def decision_snapshot(
    base: Snapshot, name: str, node: NodeInfo | None, view: PromView, now: datetime
) -> Snapshot:
    """The cycle's snapshot with the node `name` as re-read (None: deleted since, so
    `not-in-api`) and, of Prometheus, only that node's facts as re-read at `now`: no other
    node's old facts can become a candidate by the clock alone."""
    nodes = tuple(n for n in base.nodes if n.name != name) + ((node,) if node else ())
    prom = PromView(
        hardware_xids=tuple(g for g in view.hardware_xids if g.node == name),
        loss_since=tuple(x for x in view.loss_since if x[0] == name),
        cordoned=tuple(n for n in view.cordoned if n == name),
        unreadable=tuple(p for p in view.unreadable if p.node == name),
        nvml_since=tuple(x for x in view.nvml_since if x[0] == name),
        nvml_status=tuple(a for a in view.nvml_status if a.node == name),
    )
    return replace(base, now=now, nodes=tuple(sorted(nodes, key=lambda n: n.name)), prom=prom)
