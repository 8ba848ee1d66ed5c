"""The report: a text table for people, one JSON line for the return path, and `summary`, which
turns that JSON back into pass/fail. Only FAIL fails; WARN and UNKNOWN are reported, not fatal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from guard.conformance.model import Config, ItemResult, Status

SCHEMA = "gpu-node-guard/conformance/v1"
EXIT_OK = 0
EXIT_FAIL = 1


class ReportError(ValueError):
    """A conformance report that does not have the documented shape; the message is one line."""


def failed_items(results: tuple[ItemResult, ...]) -> tuple[str, ...]:
    return tuple(r.name for r in results if r.status is Status.FAIL)


def exit_code(results: tuple[ItemResult, ...]) -> int:
    return EXIT_FAIL if failed_items(results) else EXIT_OK


def counts(results: tuple[ItemResult, ...]) -> dict[str, int]:
    return {s.value: sum(r.status is s for r in results) for s in Status}


def to_json(
    results: tuple[ItemResult, ...], config: Config, root: str, fix: bool
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "ok": not failed_items(results),
        "failed": list(failed_items(results)),
        "counts": counts(results),
        "root": root,
        "role": config.role,
        "fix": fix,
        "items": [
            {"name": r.name, "status": r.status.value, "observed": r.observed, "action": r.action}
            for r in results
        ],
    }


def render_json(results: tuple[ItemResult, ...], config: Config, root: str, fix: bool) -> str:
    """One line, so a reader of the Job log finds it with `parse_report`."""
    return json.dumps(to_json(results, config, root, fix), sort_keys=True)


def render_text(results: tuple[ItemResult, ...]) -> str:
    width = max(len("ITEM"), *(len(r.name) for r in results))
    lines = [f"{'ITEM':<{width}}  {'STATUS':<7}  OBSERVED / ACTION"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status.value:<7}  {r.observed}")
        if r.action and r.status is not Status.PASS:
            lines.append(f"{'':<{width}}  {'':<7}  -> {r.action}")
    tally = " ".join(f"{k.lower()}={v}" for k, v in counts(results).items())
    verdict = "FAIL" if failed_items(results) else "OK"
    lines.append(f"result: {verdict} {tally} (only FAIL fails; WARN and UNKNOWN are reported)")
    return "\n".join(lines)


def parse_report(log_text: str) -> dict[str, Any]:
    """The report in a Job log: the last line that is a JSON object."""
    for line in reversed(log_text.splitlines()):
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReportError(f"conformance report is not JSON: {exc}") from None
            if isinstance(obj, dict):
                return obj
    raise ReportError("no conformance report (a JSON line) in the log")


def summary(report: Mapping[str, Any]) -> tuple[bool, tuple[str, ...]]:
    """(ok, names of FAILed items), recomputed from the items; ReportError on a foreign shape.

    >>> summary({"schema": SCHEMA, "items": [{"name": "ipvs-persist", "status": "FAIL"},
    ...                                      {"name": "auto-upgrade", "status": "WARN"}]})
    (False, ('ipvs-persist',))
    """
    if report.get("schema") != SCHEMA:
        raise ReportError(f"conformance report schema is {report.get('schema')!r}, not {SCHEMA!r}")
    items = report.get("items")
    if not isinstance(items, list) or not items:
        raise ReportError("conformance report has no items")
    failed = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ReportError(f"conformance report item without a name: {item!r}")
        status = item.get("status")
        if status not in {s.value for s in Status}:
            raise ReportError(f"conformance item {item['name']} has status {status!r}")
        if status == Status.FAIL.value:
            failed.append(item["name"])
    return not failed, tuple(failed)
