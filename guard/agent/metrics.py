"""The agent's Prometheus exposition (text format 0.0.4), a pure function of one run.

Metric names and labels are a contract (docs/agent.md): the alert rules and the guard's
`nvml-mismatch` isolation query read them.
"""

from __future__ import annotations

from collections.abc import Iterable

from guard.agent.checks import AgentRun
from guard.conformance.model import Status
from guard.metric_names import (
    AGENT_CHECK_INFO,
    AGENT_CHECK_OK,
    AGENT_CHECK_STATUS,
    AGENT_INTERVAL,
    AGENT_LAST_RUN,
    AGENT_NVIDIA_INFO,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DETAIL_MAX_CHARS = 200
OK_VALUE = {Status.PASS: 1, Status.WARN: 1, Status.FAIL: 0}

HELP = {
    AGENT_CHECK_OK: "1 when the check passed (or only warned), 0 when it failed; absent while it is"
    " SKIP (does not apply) or UNKNOWN (could not be read).",
    AGENT_CHECK_STATUS: "1 for the check's current status (PASS, WARN, FAIL, UNKNOWN, SKIP), 0 for"
    " the others.",
    AGENT_CHECK_INFO: "What the check saw, in detail (one line, at most 200 characters); always 1.",
    AGENT_NVIDIA_INFO: "Versions of the loaded NVIDIA kernel module and of the NVML library on disk"
    ' ("" when absent); always 1.',
    AGENT_LAST_RUN: "When the agent last finished its checks, in seconds since the epoch.",
    AGENT_INTERVAL: "How often the agent runs its checks, in seconds.",
}
STATUSES = (Status.PASS, Status.WARN, Status.FAIL, Status.UNKNOWN, Status.SKIP)


def escape(value: str) -> str:
    r"""A label value in the text format: backslash, double quote and newline escaped.

    >>> escape('a"b\\c\nd')
    'a\\"b\\\\c\\nd'
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs) + "}"


def _detail(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= DETAIL_MAX_CHARS else line[: DETAIL_MAX_CHARS - 1] + "…"


def render(node: str, run: AgentRun, finished_s: float, interval_s: float) -> str:
    """The whole /metrics page for one run of the checks on `node`."""
    samples: dict[str, list[str]] = {name: [] for name in HELP}

    def add(name: str, labels: Iterable[tuple[str, str]], value: float) -> None:
        samples[name].append(f"{name}{_labels([('node', node), *labels])} {value:g}")

    for r in run.results:
        check = ("check", r.name)
        if r.status in OK_VALUE:
            add(AGENT_CHECK_OK, [check], OK_VALUE[r.status])
        for status in STATUSES:
            add(AGENT_CHECK_STATUS, [check, ("status", status.value)], int(r.status is status))
        add(
            AGENT_CHECK_INFO,
            [check, ("status", r.status.value), ("detail", _detail(r.observed))],
            1,
        )
    module, nvml = run.nvidia.module_version, run.nvidia.nvml_version
    if isinstance(module, str) or isinstance(nvml, str):
        versions = [
            ("module_version", module if isinstance(module, str) else ""),
            ("nvml_version", nvml if isinstance(nvml, str) else ""),
        ]
        add(AGENT_NVIDIA_INFO, versions, 1)
    samples[AGENT_LAST_RUN].append(f"{AGENT_LAST_RUN}{_labels([('node', node)])} {finished_s:.3f}")
    add(AGENT_INTERVAL, [], interval_s)
    lines = []
    for name, help_text in HELP.items():
        if samples[name]:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"
