"""The status report as text: the breaker and the candidates above one table, kubectl-style;
``text`` cuts long texts with …, ``wide`` adds the GPU UUID and the runbook link."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from guard.ledger import format_time
from guard.log import printable
from guard.status.model import Candidate, NodeRow, Report

CUT = 48  # characters of BLOCKED BY and NEXT in the narrow table
CANDIDATES_SHOWN = 20


def render(r: Report, wide: bool = False) -> str:
    lines = [*_prometheus(r), _breaker(r), *_candidates(r, wide)]
    if r.nodes:
        lines += ["", *_table(r, wide)]
        if not wide:
            lines.append(
                "STATE is a section of docs/runbook.md; -o wide shows whole texts, -o json all"
            )
    else:
        lines.append("nodes: none held or watched by the guard")
    # A newline in a person's annotation or a Prometheus label never makes a row of its own.
    return "\n".join(printable(line) for line in lines) + "\n"


def age(since: datetime | None, now: datetime) -> str:
    """How long ago, as kubectl shows an age.

    >>> from datetime import UTC, timedelta
    >>> now = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)
    >>> [age(now - timedelta(seconds=s), now) for s in (42, 600, 9000, 11_000, 200_000, 900_000)]
    ['42s', '10m', '2h30m', '3h', '2d7h', '10d']
    """
    if since is None:
        return "-"
    s = max(0, int((now - since).total_seconds()))
    if s < 120:
        return f"{s}s"
    if s < 3 * 3600:
        return f"{s // 60}m" if s < 3600 else f"{s // 3600}h{s % 3600 // 60}m"
    if s < 8 * 86400:
        return f"{s // 3600}h" if s < 86400 else f"{s // 86400}d{s % 86400 // 3600}h"
    return f"{s // 86400}d"


def cut(text: str, width: int = CUT) -> str:
    """At most `width` characters.

    >>> cut("a" * 60, 10)
    'aaaaaaaaa…'
    """
    return text if len(text) <= width else text[: width - 1] + "…"


def _prometheus(r: Report) -> list[str]:
    p = r.prometheus
    if p.seen:
        return []
    if not p.url:
        return [
            "prometheus: none (no --prometheus-url): Xid, GPU loss, row remap and GPU pods not seen"
        ]
    return [f"prometheus: {p.error}; shown as without Prometheus"]


def _breaker(r: Report) -> str:
    b = r.breaker
    counted = f"{b.guarded} of {b.limit} isolations (nodes cordoned + devices tainted)"
    if b.open:
        return f"breaker: OPEN, {counted}: no new isolations ({b.runbook})"
    more = "1 more isolation" if b.headroom == 1 else f"{b.headroom} more isolations"
    return f"breaker: closed, {counted} ({more} allowed)"


def _candidates(r: Report, wide: bool) -> list[str]:
    if r.candidates is None:
        why = "no --prometheus-url" if not r.prometheus.url else "Prometheus failed"
        return [f"pending candidates: unknown ({why})"]
    if not r.candidates:
        return ["pending candidates: none"]
    waiting = sum(1 for c in r.candidates if c.decision == "pending")
    held = len(r.candidates) - waiting
    head = f"pending candidates: {waiting}" + (f", {held} held long enough" if held else "")
    shown = r.candidates[:CANDIDATES_SHOWN]
    rows = [[c.node, c.reason, c.pci or "-", _held(c), _decided(c, wide)] for c in shown]
    out = [head, *("  " + line for line in _columns(None, rows))]
    if len(r.candidates) > len(shown):
        out.append(f"  … and {len(r.candidates) - len(shown)} more (-o json lists every one)")
    return out


def _held(c: Candidate) -> str:
    what = "loss" if c.xid is not None else "mismatch"
    return f"{what} held {c.held_s} of {c.needs_s} s"


def _decided(c: Candidate, wide: bool) -> str:
    if c.decision == "pending":
        word = f"pending, decides at {c.decides_at}" if c.decides_at else "pending"
    elif c.decision == "cordon":
        word = "held: the next cycle cordons it"
    else:
        word = f"held: {c.decision}"
    if c.detail is None:
        return word
    return f"{word}; {c.detail if wide else cut(c.detail)}"


def _table(r: Report, wide: bool) -> list[str]:
    head = ["NODE", "STATE", "REASON", "SINCE", "GPU"]
    head += ["UUID"] if wide else []
    head += ["CARD", "SLOT", "BLOCKED BY", "NEXT"]
    head += ["RUNBOOK"] if wide else []
    return _columns(head, [_cells(n, r.at, wide) for n in r.nodes])


def _cells(n: NodeRow, now: datetime, wide: bool) -> list[str]:
    blocked = f"{n.blocked.condition}: {n.blocked.observed}" if n.blocked else "-"
    since = age(n.since, now)
    if wide and n.since is not None:
        since = f"{format_time(n.since)} ({since})"
    cells = [n.node, n.state, n.reason or "-", since, n.gpu.pci if n.gpu else "-"]
    cells += [n.gpu.uuid if n.gpu else "-"] if wide else []
    cells += [_count(n.card_incidents), _count(n.slot_incidents)]
    cells += [blocked, n.next] if wide else [cut(blocked), cut(n.next)]
    cells += [n.runbook or "-"] if wide else []
    return cells


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _columns(head: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last one is not padded."""
    table = [list(head), *rows] if head else [list(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=False)) + "  " + row[-1]
        for row in table
    ]
