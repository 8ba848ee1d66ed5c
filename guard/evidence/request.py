"""The request draft on-call pastes to the infrastructure team: the package's own template only,
rendered in Jinja's immutable sandbox from plain data with StrictUndefined (docs/security.md)."""

from __future__ import annotations

from typing import Any

import jinja2

from guard.bundle import TemplateError as TemplateError
from guard.bundle import load_template as load_template
from guard.evidence.assess import Assessment
from guard.evidence.report import (
    Tables,
    aer_sentences,
    config_sentence,
    dead_sentences,
    link_sentence,
    recovery_sentence,
    smi_sentences,
    xid_dict,
)

REPEAT_SHOWN = 3  # records of one Xid code listed one by one; more are one summary line
MAX_XID_LINES = 30  # Xid lines in a draft, summaries included
MAX_DRAFT_CHARS = 12_000  # a draft is pasted into a ticket: longer is cut, with a note


def context(
    a: Assessment,
    tables: Tables,
    node: str,
    history: str | None,
    trigger: str | None = None,
    slots: list[str] | None = None,
) -> dict[str, Any]:
    """Everything a template may use; docs/evidence.md lists the names."""
    return {
        "node": node,
        "trigger": trigger,  # node-wide evidence (no GPU): the node trigger
        "slot_sentences": slots or [],
        "pci": a.pci,
        "uuid": a.uuid,
        "verdict": a.verdict.value,
        "reasons": list(a.reasons),
        "xids": xid_lines(a, tables),
        "reported_xid": a.reported_xid,
        "fallen_off": [{"time": f.time, "form": f.form} for f in a.fallen_off],
        "config_space_all_ff": a.config.all_ff if a.config else None,
        "config_sentence": config_sentence(a),
        "recovery_sentence": recovery_sentence(a),
        "dead_sentences": list(dead_sentences(a)),
        "link_sentences": [link_sentence(link) for link in a.links],
        "smi_sentences": list(smi_sentences(a)),
        "aer_sentences": list(aer_sentences(a)),
        "surprise_down": a.surprise_down,
        "root_port": a.root_port,
        "history": history,
        "unknown": [f"{u.what}: {u.why}" for u in a.unknowns],
    }


def xid_lines(a: Assessment, tables: Tables) -> list[dict[str, Any]]:
    """The draft's Xid lines: a code seen up to REPEAT_SHOWN times, each record; more often, one
    line with its count, first and last time ("Xid 13 ×1,500"); at most MAX_XID_LINES in all,
    the last saying how many codes were left out. Each dict is `xid_dict`'s plus `count`,
    `first_time`, `last_time` (count None for a single record)."""
    out: list[dict[str, Any]] = []
    counted = {t.code: t for t in a.xid_totals}
    summarised: set[int] = set()
    for record in a.xids:
        total = counted.get(record.code)
        if total is None or total.count <= REPEAT_SHOWN:
            seen: dict[str, Any] = {"count": None, "first_time": None, "last_time": None}
        elif record.code not in summarised:
            summarised.add(record.code)
            first, last = total.first_time, total.last_time
            seen = {"count": f"{total.count:,}", "first_time": first, "last_time": last}
        else:
            continue
        out.append({**xid_dict(record, tables), **seen})
        if len(out) >= MAX_XID_LINES:
            break
    left = len(set(counted) - {x["code"] for x in out})
    if left:
        out.append({"code": None, "more_codes": left, "count": None})
    return out


def render(template: jinja2.Template, values: dict[str, Any]) -> str:
    try:
        text = template.render(**values)
    except jinja2.TemplateError as err:  # SecurityError (sandbox) is one of them
        raise TemplateError(f"request template: {err}") from err
    if len(text) > MAX_DRAFT_CHARS:
        cut = text.rfind("\n", 0, MAX_DRAFT_CHARS) + 1 or MAX_DRAFT_CHARS
        text = text[:cut] + f"[draft cut at {cut:,} characters: the report above has the rest]\n"
    return text
