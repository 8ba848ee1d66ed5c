"""The report: a text table for people, one JSON line with every item, and the summary the guard
reads back from the Job's termination message (`render_summary` writes it, `parse_summary` reads
it). Only FAIL fails; WARN, UNKNOWN and SKIP are reported, not fatal.

The summary is the contract with the guard (docs/conformance.md): kubelet keeps at most 4096 bytes
of a termination message, so `render_summary` stays under `SUMMARY_MAX_BYTES`, dropping the `why`
texts (skipped first, failed last) before it would drop a name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guard.conformance.checks import Run
from guard.conformance.model import Config, ItemResult, Status
from guard.termination import summary_doc

SCHEMA = "gpu-node-guard/conformance/v2"
SUMMARY_SCHEMA = "gpu-node-guard/conformance-summary/v1"
SUMMARY_MAX_BYTES = 4000  # kubelet truncates a termination message at 4096 bytes
WHY_MAX_CHARS = 160
EXIT_OK = 0
EXIT_FAIL = 1


class ReportError(ValueError):
    """A summary that does not have the documented shape; the message is one line."""


def failed_items(results: tuple[ItemResult, ...]) -> tuple[str, ...]:
    return tuple(r.name for r in results if r.status is Status.FAIL)


def exit_code(results: tuple[ItemResult, ...]) -> int:
    return EXIT_FAIL if failed_items(results) else EXIT_OK


def counts(results: tuple[ItemResult, ...]) -> dict[str, int]:
    return {s.value: sum(r.status is s for r in results) for s in Status}


def to_json(run: Run, config: Config, root: str, fix: bool) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "ok": not failed_items(run.results),
        "failed": list(failed_items(run.results)),
        "counts": counts(run.results),
        "root": root,
        "role": config.role,
        "fix": fix,
        "platform": run.platform.as_dict(),
        "items": [
            {"name": r.name, "status": r.status.value, "observed": r.observed, "action": r.action}
            for r in run.results
        ],
    }


def render_json(run: Run, config: Config, root: str, fix: bool) -> str:
    """One line, keys sorted."""
    return json.dumps(to_json(run, config, root, fix), sort_keys=True)


def render_text(run: Run) -> str:
    results = run.results
    p = run.platform
    width = max(len("ITEM"), *(len(r.name) for r in results))
    rke2 = "RKE2" if p.rke2 else "not RKE2"
    lines = [
        f"node: {rke2} ({p.rke2_source}); kube-proxy {p.proxy_mode}"
        + (f" ({p.proxy_source})" if p.proxy_source else ""),
        f"{'ITEM':<{width}}  {'STATUS':<7}  OBSERVED / ACTION",
    ]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status.value:<7}  {r.observed}")
        if r.action and r.status not in (Status.PASS, Status.SKIP):
            lines.append(f"{'':<{width}}  {'':<7}  -> {r.action}")
    tally = " ".join(f"{k.lower()}={v}" for k, v in counts(results).items())
    verdict = "FAIL" if failed_items(results) else "OK"
    lines.append(
        f"result: {verdict} {tally} (only FAIL fails; WARN, UNKNOWN and SKIP are reported)"
    )
    return "\n".join(lines)


# ── The summary for the guard ───────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Finding:
    item: str
    why: str  # the item's `observed` line, shortened; "" when the summary had to drop it


@dataclass(frozen=True, slots=True)
class Summary:
    """What the guard needs from one run: did it pass, and which items failed, could not be
    checked, warned, did not apply or were repaired (each in item order)."""

    ok: bool
    failed: tuple[Finding, ...] = ()
    unknown: tuple[Finding, ...] = ()
    warned: tuple[Finding, ...] = ()
    skipped: tuple[Finding, ...] = ()
    fixed: tuple[str, ...] = ()

    @property
    def failed_items(self) -> tuple[str, ...]:
        return tuple(f.item for f in self.failed)


_LISTS = ("failed", "unknown", "warned", "skipped")


def _short(text: str) -> str:
    return text if len(text) <= WHY_MAX_CHARS else text[: WHY_MAX_CHARS - 1] + "…"


def summarize(results: tuple[ItemResult, ...]) -> Summary:
    def found(status: Status) -> tuple[Finding, ...]:
        return tuple(Finding(r.name, _short(r.observed)) for r in results if r.status is status)

    return Summary(
        ok=not failed_items(results),
        failed=found(Status.FAIL),
        unknown=found(Status.UNKNOWN),
        warned=found(Status.WARN),
        skipped=found(Status.SKIP),
        fixed=tuple(r.name for r in results if r.status is Status.FIXED),
    )


def _summary_doc(s: Summary, keep_why: frozenset[str]) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SUMMARY_SCHEMA, "status": "PASS" if s.ok else "FAIL"}
    for key in _LISTS:
        doc[key] = [
            {"item": f.item, "why": f.why if key in keep_why else ""} for f in getattr(s, key)
        ]
    doc["fixed"] = list(s.fixed)
    return doc


def render_summary(s: Summary) -> str:
    """Compact JSON under SUMMARY_MAX_BYTES: `why` texts go first (skipped, warned, unknown,
    failed), names never."""
    keep = list(_LISTS)  # popped from the end: skipped first, failed last
    while True:
        text = json.dumps(_summary_doc(s, frozenset(keep)), separators=(",", ":"))
        if len(text.encode()) <= SUMMARY_MAX_BYTES or not keep:
            return text
        keep.pop()


def parse_summary(text: str) -> Summary:
    """The summary from a conformance Pod's termination message; ReportError with one line when it
    is empty (the program did not finish) or not a conformance summary.

    >>> parse_summary(render_summary(Summary(False, failed=(Finding("ipvs-persist", "…"),))))
    ... # doctest: +NORMALIZE_WHITESPACE
    Summary(ok=False, failed=(Finding(item='ipvs-persist', why='…'),), unknown=(), warned=(),
            skipped=(), fixed=())
    """
    doc = summary_doc(text, SUMMARY_SCHEMA, program="the conformance program",
                      name="conformance summary", error=ReportError)  # fmt: skip
    status = doc.get("status")
    if status not in ("PASS", "FAIL"):
        raise ReportError(f"conformance summary status is {status!r}, not PASS or FAIL")
    lists = {key: _findings(doc, key) for key in _LISTS}
    fixed = doc.get("fixed", [])
    if not isinstance(fixed, list) or not all(isinstance(n, str) for n in fixed):
        raise ReportError(f"conformance summary `fixed` is not a list of names: {fixed!r}")
    if (status == "FAIL") != bool(lists["failed"]):
        raise ReportError(f"conformance summary says {status} with {len(lists['failed'])} failed")
    return Summary(status == "PASS", fixed=tuple(fixed), **lists)


def _findings(doc: Mapping[str, Any], key: str) -> tuple[Finding, ...]:
    value = doc.get(key, [])
    ok = isinstance(value, list) and all(
        isinstance(f, Mapping) and isinstance(f.get("item"), str) and isinstance(f.get("why"), str)
        for f in value
    )
    if not ok:
        raise ReportError(f"conformance summary `{key}` is not a list of {{item, why}}: {value!r}")
    return tuple(Finding(f["item"], f["why"]) for f in value)
