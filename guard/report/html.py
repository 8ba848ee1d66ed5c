"""The report as one self-contained HTML page: inline SVG and CSS, no script, nothing fetched;
the ids of its parts are listed in README.md, "The report"."""

from __future__ import annotations

from datetime import datetime
from html import escape

from guard.figures import Figures, Span
from guard.ledger import format_time
from guard.report.render import duration
from guard.xid_tables import Repair

COLOURS = {  # by verdict; readable on white and to the common colour blindnesses
    Repair.POWER_CYCLE: "#d55e00",
    Repair.RMA: "#cc79a7",
    Repair.RESET: "#0072b2",
    Repair.HUMAN: "#e69f00",
}
FAULTED, HEALTHY = "#b2182b", "#999999"
LABEL_W, CHART_W, ROW_H = 130, 760, 26


def _x(at: datetime, f: Figures) -> float:
    span = (f.until - f.since).total_seconds() or 1.0
    part = (min(max(at, f.since), f.until) - f.since).total_seconds() / span
    return LABEL_W + part * CHART_W


def _bar(i: int, s: Span, row: int, f: Figures) -> str:
    x0, x1 = _x(s.start, f), _x(s.end or f.until, f)
    y = 30 + row * ROW_H + 4
    end = format_time(s.end) if s.end else "still isolated"
    tip = f"{s.node} {s.verdict.value} ({s.unit.value}) {format_time(s.start)} .. {end}"
    return (
        f'<rect id="bar-{i}" class="bar" data-node="{escape(s.node)}" '
        f'data-verdict="{s.verdict.value}" x="{x0:.1f}" y="{y}" '
        f'width="{max(x1 - x0, 3.0):.1f}" height="{ROW_H - 8}" '
        f'fill="{COLOURS[s.verdict]}"><title>{escape(tip)}</title></rect>'
    )


def timeline(f: Figures) -> str:
    nodes = sorted({s.node for s in f.spans} | {r.node for r in f.incidents})
    rows = {n: i for i, n in enumerate(nodes)}
    height = 30 + len(nodes) * ROW_H + 20
    parts = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + CHART_W + 10}" '
        f'height="{height}" role="img" aria-label="fleet timeline">',
        f'<text x="{LABEL_W}" y="18">{escape(f.since.date().isoformat())}</text>',
        f'<text x="{LABEL_W + CHART_W}" y="18" text-anchor="end">'
        f"{escape(f.until.date().isoformat())}</text>",
    ]
    for n, i in rows.items():
        y = 30 + i * ROW_H
        parts.append(
            f'<g id="row-{i}" data-node="{escape(n)}"><rect x="{LABEL_W}" y="{y}" '
            f'width="{CHART_W}" height="{ROW_H}" fill="{"#f4f4f4" if i % 2 else "#ffffff"}"/>'
            f'<text x="4" y="{y + 17}">{escape(n)}</text></g>'
        )
    parts += [_bar(i, s, rows[s.node], f) for i, s in enumerate(f.spans)]
    parts.append("</svg>")
    return "".join(parts)


def legend() -> str:
    items = []
    for i, (verdict, colour) in enumerate(COLOURS.items()):
        x = 10 + i * 150
        items.append(
            f'<g id="legend-{verdict.value}"><rect x="{x}" y="6" width="16" height="16" '
            f'fill="{colour}"/><text x="{x + 22}" y="19">{verdict.value}</text></g>'
        )
    return (
        '<svg id="legend" xmlns="http://www.w3.org/2000/svg" width="620" height="28" '
        f'role="img" aria-label="verdict colours">{"".join(items)}</svg>'
    )


def weeks(f: Figures) -> str:
    top = max((h.total for _, h in f.weeks), default=0.0) or 1.0
    chart_h, bar_w = 160, max(6.0, min(40.0, 760 / max(len(f.weeks), 1) - 4))
    parts = [
        f'<svg id="weeks" xmlns="http://www.w3.org/2000/svg" width="900" height="{chart_h + 40}" '
        'role="img" aria-label="GPU-hours lost per week">'
    ]
    for i, (week, h) in enumerate(f.weeks):
        x = 60 + i * (bar_w + 4)
        fh, hh = h.faulted / top * chart_h, h.healthy / top * chart_h
        base = chart_h + 10
        label = f"week of {week.date().isoformat()}"
        parts.append(
            f'<rect id="week-{i}-faulted" x="{x:.1f}" y="{base - fh:.1f}" width="{bar_w:.1f}" '
            f'height="{fh:.1f}" fill="{FAULTED}"><title>{label}: faulted GPUs '
            f"{h.faulted:.1f} GPU-h</title></rect>"
            f'<rect id="week-{i}-healthy" x="{x:.1f}" y="{base - fh - hh:.1f}" '
            f'width="{bar_w:.1f}" height="{hh:.1f}" fill="{HEALTHY}"><title>{label}: healthy '
            f"GPUs held by a node-wide unit {h.healthy:.1f} GPU-h</title></rect>"
        )
    parts.append(
        f'<text x="4" y="20">{top:.0f} GPU-h</text>'
        f'<rect x="60" y="{chart_h + 22}" width="12" height="12" fill="{FAULTED}"/>'
        f'<text x="78" y="{chart_h + 33}">faulted GPUs</text>'
        f'<rect x="200" y="{chart_h + 22}" width="12" height="12" fill="{HEALTHY}"/>'
        f'<text x="218" y="{chart_h + 33}">healthy GPUs held by a node-wide unit</text></svg>'
    )
    return "".join(parts)


def repeat_cards(f: Figures) -> str:
    rows = "".join(
        f"<tr><td>{escape(c.key)}</td><td>{c.incidents}</td>"
        f"<td>{escape(duration(c.mean_between))}</td><td>{escape(format_time(c.last))}</td></tr>"
        for c in f.repeat_cards()
    )
    return (
        '<table id="repeat-cards"><tr><th>card</th><th>incidents</th>'
        f"<th>mean between</th><th>last</th></tr>{rows}</table>"
    )


def page(f: Figures) -> str:
    h = f.hours
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>gpu-node-guard repair report</title><style>"
        "body{font:14px sans-serif;margin:16px;color:#222}svg text{font:12px sans-serif}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}"
        "</style></head><body>"
        f"<h1>GPU repair report</h1><p>{escape(format_time(f.since))} .. "
        f"{escape(format_time(f.until))}: <b id='total'>{h.total:.1f}</b> GPU-hours out of "
        f"service (faulted GPUs {h.faulted:.1f}, healthy GPUs held by a node-wide unit "
        f"{h.healthy:.1f}).</p>"
        f"<h2>Fleet timeline</h2>{legend()}<br>{timeline(f)}"
        f"<h2>GPU-hours lost per week</h2>{weeks(f)}"
        f"<h2>Cards with repeat incidents</h2>{repeat_cards(f)}"
        "</body></html>\n"
    )
