"""The report's text and JSON forms of `guard.figures.Figures`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from guard.figures import UNRECORDED, Figures, GpuHours, Recurrence
from guard.ledger import format_time

SCHEMA = "gpu-node-guard.report/v1"


def duration(d: timedelta | None) -> str:
    """``38d 00:00`` / ``0:12:26`` style; ``-`` when unknown."""
    if d is None:
        return "-"
    total = int(d.total_seconds())
    days, rest = divmod(total, 86_400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{days}d {h:02d}:{m:02d}" if days else f"{h}:{m:02d}:{sec:02d}"


def _hours(h: GpuHours) -> str:
    return f"{h.total:.1f} GPU-h (faulted {h.faulted:.1f}, healthy held {h.healthy:.1f})"


def text(f: Figures) -> str:
    out = [f"Repair figures {format_time(f.since)} .. {format_time(f.until)}", ""]
    out += [f"GPU-hours out of service: {_hours(f.hours)}", "", "ISOLATIONS"]
    out.append(f"{'NODE':<14} {'UNIT':<5} {'VERDICT':<12} {'START':<21} {'END':<21} {'GPU-H':>9}")
    for s, h in zip(f.spans, f.per_span, strict=True):
        end = "(not recorded)" if s.closed_by == UNRECORDED else "(isolated)"
        end = format_time(s.end) if s.end and s.closed_by != UNRECORDED else end
        start = format_time(s.start)
        out.append(
            f"{s.node:<14} {s.unit.value:<5} {s.verdict.value:<12} {start:<21} {end:<21} "
            f"{h.total:>9.1f}"
        )
    out += ["", "INCIDENTS"]
    out.append(
        f"{'TIME':<21} {'NODE':<14} {'XID':>4} {'SLOT':<13} {'VERDICT':<12} "
        f"{'XID>CORDON':>10} {'CORDON>REPAIR':>13} {'REPAIR>RETURN':>13} {'ISOLATED':>10}  CARD"
    )
    for r in f.incidents:
        out.append(
            f"{format_time(r.at):<21} {r.node:<14} {r.xid:>4} {r.pci:<13} {r.verdict.value:<12} "
            f"{duration(r.onset_to_cordon):>10} {duration(r.cordon_to_repair):>13} "
            f"{duration(r.repair_to_return):>13} {duration(r.isolated):>10}  {r.uuid}"
        )
    for title, rows in (("CARDS", f.cards), ("SLOTS", f.slots), ("NODES", f.nodes)):
        out += ["", title, f"{'INCIDENTS':>9} {'MEAN BETWEEN':>12} {'LAST':<21} KEY"]
        out += [_recurrence(r) for r in rows]
    out += ["", "GPU-HOURS PER WEEK (faulted / healthy held)"]
    for week, h in f.weeks:
        out.append(f"{week.date().isoformat()}  {h.faulted:9.1f} / {h.healthy:9.1f}")
    out += ["", "OVER THEIR QUARANTINE BUDGET"]
    out += [
        f"{o.node}: {o.verdict.value} isolated {duration(o.age)} (budget {duration(o.budget)})"
        for o in f.over_budget
    ] or ["(none)"]
    return "\n".join(out) + "\n"


def _recurrence(r: Recurrence) -> str:
    return f"{r.incidents:>9} {duration(r.mean_between):>12} {format_time(r.last):<21} {r.key}"


def _t(at: datetime | None) -> str | None:
    return format_time(at) if at is not None else None


def _s(d: timedelta | None) -> float | None:
    return d.total_seconds() if d is not None else None


def _h(h: GpuHours) -> dict[str, float]:
    return {"faulted": round(h.faulted, 3), "healthy": round(h.healthy, 3)}


def to_json(f: Figures) -> dict[str, Any]:
    def rec(r: Recurrence) -> dict[str, Any]:
        return {
            "key": r.key,
            "incidents": r.incidents,
            "meanBetweenSeconds": _s(r.mean_between),
            "last": _t(r.last),
        }

    return {
        "schema": SCHEMA,
        "since": _t(f.since),
        "until": _t(f.until),
        "gpuHours": _h(f.hours),
        "isolations": [
            {
                "node": s.node,
                "unit": s.unit.value,
                "gpus": s.gpus,
                "verdict": s.verdict.value,
                "onset": _t(s.onset),
                "cordon": _t(s.cordon),
                "start": _t(s.start),
                "repairSeen": _t(s.repair),
                "end": _t(s.end),
                "closedBy": s.closed_by or None,
                "gpuHours": _h(h),
            }
            for s, h in zip(f.spans, f.per_span, strict=True)
        ],
        "incidents": [
            {
                "node": r.node,
                "uuid": r.uuid,
                "pci": r.pci,
                "xid": r.xid,
                "verdict": r.verdict.value,
                "at": _t(r.at),
                "onsetToCordonSeconds": _s(r.onset_to_cordon),
                "cordonToRepairSeconds": _s(r.cordon_to_repair),
                "repairToReturnSeconds": _s(r.repair_to_return),
                "isolatedSeconds": _s(r.isolated),
                "open": r.open,
            }
            for r in f.incidents
        ],
        "cards": [rec(r) for r in f.cards],
        "slots": [rec(r) for r in f.slots],
        "nodes": [rec(r) for r in f.nodes],
        "weeks": [{"week": _t(w), "gpuHours": _h(h)} for w, h in f.weeks],
        "overBudget": [
            {
                "node": o.node,
                "verdict": o.verdict.value,
                "ageSeconds": o.age.total_seconds(),
                "budgetSeconds": o.budget.total_seconds(),
            }
            for o in f.over_budget
        ],
    }
