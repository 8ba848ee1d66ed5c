"""Repair figures from what the guard records: one pure module for the report, the push and tests.

Inputs (`Facts`): the ledger's incidents, the marks the guard's records give on a node's
isolations (`Mark`) and each node's GPU count; nothing here reads a cluster or a clock. How the
marks make isolations (`Span`) and what they count: docs/metrics.md, "Repair figures".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from statistics import mean
from typing import Any

from guard import ledger
from guard.ledger import LedgerEntry
from guard.model import NodeInfo
from guard.names import APP_NAME
from guard.settings import Settings
from guard.xid_tables import Repair, XidClasses

GUARD_RECORDER = APP_NAME  # the recorder word of the guard's own ledger lines
HOUR = timedelta(hours=1)
UNRECORDED = "unrecorded"  # the close of an isolation whose end no record gives: counted as 0
# The verdict that decides an isolation of several incidents: the evidence's precedence.
PRECEDENCE = (Repair.POWER_CYCLE, Repair.RMA, Repair.RESET, Repair.HUMAN)


class MarkKind(StrEnum):
    CORDON = "cordon"
    REPAIR = "repair"  # a repair seen: the load test started, a person's reset-done
    RETURN = "return"
    CANCEL = "cancel"  # a person's uncordon


class Unit(StrEnum):
    NODE = "node"  # a cordon: every GPU of the node is out
    GPU = "gpu"  # a DRA device taint: the faulted GPU only


@dataclass(frozen=True, slots=True)
class Mark:
    node: str
    at: datetime
    kind: MarkKind
    unit: Unit = Unit.NODE
    record: bool = False  # the node's cordon record in force (`auto-cordon-at`), not an Event


@dataclass(frozen=True, slots=True)
class Facts:
    incidents: tuple[LedgerEntry, ...]
    marks: tuple[Mark, ...]
    gpus: Mapping[str, int]  # node → its GPU count (the capacity recorded at the cordon first)
    # Nodes schedulable now without the guard's cordon: a node-wide isolation no record closes
    # ended at a time nobody recorded (a person's uncordon before the guard ran).
    serving: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Budget:
    """Expected repair time per verdict (the site's `--budget`: `budget_of`)."""

    hours: Mapping[Repair, float]

    def of(self, verdict: Repair) -> timedelta:
        return timedelta(hours=self.hours[verdict])

    def past(self, verdict: Repair, start: datetime, now: datetime) -> timedelta | None:
        """The isolation's age when it is past its verdict's budget, else None."""
        age = now - start
        return age if age > self.of(verdict) else None


def budget_of(s: Settings) -> Budget:
    """The quarantine budget of the site's settings (`Settings()`: the defaults)."""
    return Budget({v: getattr(s, f"budget_{v.value.replace('-', '_')}_h") for v in Repair})


@dataclass(frozen=True, slots=True)
class Span:
    """One isolation of a node, with its incidents."""

    node: str
    gpus: int
    unit: Unit
    incidents: tuple[LedgerEntry, ...]
    verdict: Repair
    start: datetime  # the cordon, else the first incident's time
    onset: datetime | None  # the Xid onset, when a hand-copied line recorded it
    cordon: datetime | None
    repair: datetime | None
    end: datetime | None  # None: still isolated
    closed_by: str  # return, cancel, or "" while open

    @property
    def faulted(self) -> int:
        return max(1, len({e.uuid.lower() for e in self.incidents}))

    @property
    def healthy_held(self) -> int:
        return max(0, self.gpus - self.faulted) if self.unit is Unit.NODE else 0

    def isolated(self, until: datetime) -> timedelta:
        return (self.end or until) - self.start

    def window(self, since: datetime, until: datetime) -> timedelta:
        """The part of the isolation inside [since, until)."""
        lo, hi = max(self.start, since), min(self.end or until, until)
        return max(hi - lo, timedelta(0))


@dataclass(frozen=True, slots=True)
class IncidentRow:
    node: str
    uuid: str
    pci: str
    xid: int
    verdict: Repair
    at: datetime  # the ledger line's time
    open: bool
    onset_to_cordon: timedelta | None
    cordon_to_repair: timedelta | None
    repair_to_return: timedelta | None
    isolated: timedelta | None  # of the isolation it opened; None for one that joined


@dataclass(frozen=True, slots=True)
class Recurrence:
    """Incidents of one card (by UUID), one slot (node + PCI) or one node."""

    key: str
    incidents: int
    mean_between: timedelta | None  # None below two incidents
    last: datetime


@dataclass(frozen=True, slots=True)
class GpuHours:
    faulted: float
    healthy: float

    @property
    def total(self) -> float:
        return self.faulted + self.healthy


@dataclass(frozen=True, slots=True)
class OverBudget:
    node: str
    verdict: Repair
    age: timedelta
    budget: timedelta


@dataclass(frozen=True, slots=True)
class Figures:
    since: datetime
    until: datetime
    spans: tuple[Span, ...]
    incidents: tuple[IncidentRow, ...]
    cards: tuple[Recurrence, ...]
    slots: tuple[Recurrence, ...]
    nodes: tuple[Recurrence, ...]
    hours: GpuHours  # the period's
    weeks: tuple[tuple[datetime, GpuHours], ...]  # Monday 00:00 UTC → that week's
    over_budget: tuple[OverBudget, ...]
    per_span: tuple[GpuHours, ...] = field(default=())  # in `spans` order, over the period

    def repeat_cards(self) -> tuple[Recurrence, ...]:
        return tuple(c for c in self.cards if c.incidents >= 2)


# ---- Isolations ---------------------------------------------------------------------------


def verdict_of(entries: Iterable[LedgerEntry], classes: XidClasses) -> Repair:
    found = {classes.verdict_of(e.xid) for e in entries}
    return next((v for v in PRECEDENCE if v in found), Repair.HUMAN)


@dataclass(slots=True)
class _Open:
    start: datetime
    unit: Unit
    incidents: list[LedgerEntry]
    cordon: datetime | None = None
    repair: datetime | None = None


def spans(facts: Facts, classes: XidClasses) -> tuple[Span, ...]:
    """Every isolation, by node then start (the walk of docs/metrics.md)."""
    nodes = sorted({e.node for e in facts.incidents} | {m.node for m in facts.marks})
    return tuple(span for node in nodes for span in _node_spans(node, facts, classes))


# At one instant the opening comes first, then what joins, then the close.
_ORDER = {MarkKind.CORDON: 0, "incident": 1, MarkKind.REPAIR: 2, MarkKind.RETURN: 3, "cancel": 3}


def _node_spans(node: str, facts: Facts, classes: XidClasses) -> list[Span]:
    steps: list[tuple[datetime, int, LedgerEntry | Mark]] = []
    steps += [(e.at, _ORDER["incident"], e) for e in facts.incidents if e.node == node]
    steps += [(m.at, _ORDER[m.kind], m) for m in set(facts.marks) if m.node == node]
    steps.sort(key=lambda s: (s[0], s[1]))
    gpus = facts.gpus.get(node, 0)
    out: list[Span] = []
    cur: _Open | None = None
    for at, _, step in steps:
        if isinstance(step, LedgerEntry):
            guard_line = step.recorder == GUARD_RECORDER
            if cur is None:
                cur = _Open(at, Unit.NODE, [], at if guard_line else None)
            elif guard_line and cur.cordon is None:
                cur.cordon = at
            cur.incidents.append(step)
        elif step.kind is MarkKind.CORDON:
            if cur and step.record and cur.unit is Unit.NODE and (cur.cordon or at) < at:
                # This cordon removed the record of that isolation's end: it ended before.
                out.append(_span(node, gpus, cur, classes, cur.cordon, UNRECORDED))
                cur = None
            if cur is None:
                cur = _Open(at, step.unit, [], at)
            elif cur.cordon is None:
                cur.cordon, cur.unit = at, step.unit
        elif cur is None:
            continue  # a repair or a close with nothing open: an isolation before the records
        elif step.kind is MarkKind.REPAIR:
            cur.repair = cur.repair or at
        else:
            out.append(_span(node, gpus, cur, classes, at, step.kind.value))
            cur = None
    if cur is not None and cur.unit is Unit.NODE and node in facts.serving:
        out.append(_span(node, gpus, cur, classes, cur.cordon or cur.start, UNRECORDED))
    elif cur is not None:
        out.append(_span(node, gpus, cur, classes, None, ""))
    return out


def _span(
    node: str, gpus: int, o: _Open, classes: XidClasses, end: datetime | None, closed_by: str
) -> Span:
    first = o.incidents[0] if o.incidents else None
    onset = first.at if first is not None and first.recorder != GUARD_RECORDER else None
    return Span(
        node=node,
        gpus=max(gpus, 1),
        unit=o.unit,
        incidents=tuple(o.incidents),
        verdict=verdict_of(o.incidents, classes),
        start=o.cordon or o.start,
        onset=onset,
        cordon=o.cordon,
        repair=o.repair,
        end=end,
        closed_by=closed_by,
    )


def gpu_hours(span: Span, since: datetime, until: datetime) -> GpuHours:
    hours = span.window(since, until) / HOUR
    return GpuHours(span.faulted * hours, span.healthy_held * hours)


def _sum(parts: Iterable[GpuHours]) -> GpuHours:
    got = list(parts)
    return GpuHours(sum(p.faulted for p in got), sum(p.healthy for p in got))


# ---- Incidents and recurrences ------------------------------------------------------------


def incident_rows(all_spans: Iterable[Span], until: datetime) -> tuple[IncidentRow, ...]:
    rows: list[IncidentRow] = []
    for s in all_spans:
        for i, e in enumerate(s.incidents):
            phases = _phases(s, until) if i == 0 else (None, None, None, None)
            rows.append(
                IncidentRow(s.node, e.uuid, e.pci, e.xid, s.verdict, e.at, s.end is None, *phases)
            )
    return tuple(sorted(rows, key=lambda r: (r.at, r.node)))


def _phases(s: Span, until: datetime) -> tuple[timedelta | None, ...]:
    """Onset to cordon, cordon to repair, repair to return, time isolated: the isolation's, on
    the row of its first incident."""
    return (
        _between(s.onset, s.cordon),
        _between(s.cordon, s.repair),
        _between(s.repair, s.end) if s.closed_by == "return" else None,
        s.isolated(until) if s.closed_by != UNRECORDED else None,
    )


def _between(a: datetime | None, b: datetime | None) -> timedelta | None:
    return b - a if a is not None and b is not None and b >= a else None


def recurrences(keyed: Iterable[tuple[str, datetime]]) -> tuple[Recurrence, ...]:
    """Per key: the count, the mean time between consecutive incidents, the last one; keys with
    the most incidents first."""
    times: dict[str, list[datetime]] = defaultdict(list)
    for key, at in keyed:
        times[key].append(at)
    out = []
    for key, ats in times.items():
        ats.sort()
        gaps = [(b - a).total_seconds() for a, b in pairwise(ats)]
        between = timedelta(seconds=mean(gaps)) if gaps else None
        out.append(Recurrence(key, len(ats), between, ats[-1]))
    return tuple(sorted(out, key=lambda r: (-r.incidents, r.key)))


# ---- Periods and the budget ---------------------------------------------------------------


def week_of(at: datetime) -> datetime:
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


def weekly(
    all_spans: Iterable[Span], since: datetime, until: datetime
) -> tuple[tuple[datetime, GpuHours], ...]:
    listed = list(all_spans)
    out: list[tuple[datetime, GpuHours]] = []
    week = week_of(since)
    while week < until:
        lo, hi = max(week, since), min(week + timedelta(days=7), until)
        out.append((week, _sum(gpu_hours(s, lo, hi) for s in listed)))
        week += timedelta(days=7)
    return tuple(out)


def over_budget(all_spans: Iterable[Span], budget: Budget, now: datetime) -> tuple[OverBudget, ...]:
    """Open isolations older than their verdict's expected repair time."""
    return tuple(
        OverBudget(s.node, s.verdict, age, budget.of(s.verdict))
        for s in all_spans
        if s.end is None and (age := budget.past(s.verdict, s.start, now)) is not None
    )


def figures(
    facts: Facts,
    classes: XidClasses,
    since: datetime,
    until: datetime,
    budget: Budget | None = None,
) -> Figures:
    """Every figure of the period [since, until); `until` is also "now" for open isolations, and
    a record made after it (a report `--at` a past instant) did not exist yet."""
    facts = replace(
        facts,
        incidents=tuple(e for e in facts.incidents if e.at <= until),
        marks=tuple(m for m in facts.marks if m.at <= until),
    )
    found = tuple(s for s in spans(facts, classes) if s.start < until)
    shown = tuple(s for s in found if (s.end or until) > since)
    per_span = tuple(gpu_hours(s, since, until) for s in shown)
    entries = [e for e in facts.incidents if since <= e.at < until]
    return Figures(
        since=since,
        until=until,
        spans=shown,
        incidents=incident_rows(shown, until),
        cards=recurrences((e.uuid, e.at) for e in entries),
        slots=recurrences((f"{e.node} {e.pci}", e.at) for e in entries),
        nodes=recurrences((e.node, e.at) for e in entries),
        hours=_sum(per_span),
        weeks=weekly(shown, since, until),
        over_budget=over_budget(found, budget or budget_of(Settings()), until),
        per_span=per_span,
    )


# ---- Facts from the guard's records (docs/metrics.md: which record gives which mark) -------

EVENT_MARKS = {
    "GuardCordoned": (MarkKind.CORDON, Unit.NODE),
    "GuardDeviceTainted": (MarkKind.CORDON, Unit.GPU),
    "GuardReturned": (MarkKind.RETURN, Unit.NODE),
    "GuardCancelled": (MarkKind.CANCEL, Unit.NODE),
}
LOADTEST = "loadtest"


def facts(
    lines: Iterable[ledger.LedgerLine],
    nodes: tuple[NodeInfo, ...],
    events: Iterable[Mapping[str, Any]],
    jobs: Iterable[tuple[str, str, Mapping[str, Any]]],  # (kind, node, raw Job)
) -> Facts:
    marks: list[Mark] = []
    gpus: dict[str, int] = {}
    for n in nodes:
        marks.extend(node_marks(n))
        recorded = n.cordon.gpu_capacity if n.cordon is not None else None
        gpus[n.name] = recorded or n.gpu_capacity
    marks.extend(m for e in events if (m := event_mark(e)) is not None)
    for kind, node, job in jobs:
        at = _time((job.get("metadata") or {}).get("creationTimestamp"))
        if kind == LOADTEST and node and at is not None:
            marks.append(Mark(node, at, MarkKind.REPAIR))
    serving = frozenset(n.name for n in nodes if not n.unschedulable and n.cordon is None)
    ordered = sorted(set(marks), key=lambda m: (m.node, m.at, m.kind.value))
    return Facts(ledger.entries(lines), tuple(ordered), gpus, serving)


def node_marks(n: NodeInfo) -> list[Mark]:
    recorded = (
        (MarkKind.CORDON, n.cordon.at if n.cordon else None),
        (MarkKind.REPAIR, n.reset_done_at),
        (MarkKind.RETURN, n.returned.at if n.returned else None),
        (MarkKind.CANCEL, n.cancelled.at if n.cancelled else None),
    )
    return [
        Mark(n.name, at, k, record=k is MarkKind.CORDON) for k, at in recorded if at is not None
    ]


def event_mark(event: Mapping[str, Any]) -> Mark | None:
    """The mark of one of the guard's Events: its first time (`eventTime`, else the core
    view's firstTimestamp), about the node it regards."""
    kind = EVENT_MARKS.get(str(event.get("reason", "")))
    about = event.get("regarding") or event.get("involvedObject") or {}
    at = _time(event.get("eventTime") or event.get("firstTimestamp"))
    if kind is None or not isinstance(about, Mapping) or about.get("kind") != "Node":
        return None
    node = str(about.get("name") or "")
    return Mark(node, at, kind[0], kind[1]) if node and at is not None else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:  # a MicroTime too: the figures count seconds
        return ledger.parse_time(value.strip()).replace(microsecond=0)
    except ValueError:
        return None
