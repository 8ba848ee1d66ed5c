"""The report: a text table for people, one JSON line with every item, and the summary the guard
reads back from the Job's termination message (`summarize`; its format, the contract with the
guard, is guard.wire's `render_summary` and `parse_summary`, docs/conformance.md). Only FAIL
fails; WARN, UNKNOWN and SKIP are reported, not fatal.
"""

from __future__ import annotations

import json
from typing import Any

from guard.conformance.checks import Run
from guard.conformance.model import Config, ItemResult, Status
from guard.wire import Finding, Summary, short_why

SCHEMA = "gpu-node-guard/conformance/v2"
EXIT_OK = 0
EXIT_FAIL = 1


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


def summarize(results: tuple[ItemResult, ...]) -> Summary:
    def found(status: Status) -> tuple[Finding, ...]:
        return tuple(Finding(r.name, short_why(r.observed)) for r in results if r.status is status)

    return Summary(
        ok=not failed_items(results),
        failed=found(Status.FAIL),
        unknown=found(Status.UNKNOWN),
        warned=found(Status.WARN),
        skipped=found(Status.SKIP),
        fixed=tuple(r.name for r in results if r.status is Status.FIXED),
    )
