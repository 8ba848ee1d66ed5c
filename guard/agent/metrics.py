"""The agent's checks (the conformance items that files alone answer, judged by the same code;
no command runs, an unreadable file is UNKNOWN) and their Prometheus exposition (text format
0.0.4), whose names and labels are a contract: docs/agent.md."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from guard.conformance import dns, ipvs, nvidia
from guard.conformance.checks import gate
from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import Config, ItemResult, Status
from guard.conformance.platform import read_platform
from guard.metric_names import (
    AGENT_CHECK_INFO,
    AGENT_CHECK_OK,
    AGENT_CHECK_STATUS,
    AGENT_INTERVAL,
    AGENT_LAST_RUN,
    AGENT_NVIDIA_INFO,
)

CHECKS = ("nvidia-match", "ipvs-loaded", "dns-upstream")


@dataclass(frozen=True, slots=True)
class AgentRun:
    results: tuple[ItemResult, ...]  # in CHECKS order
    nvidia: nvidia.NvidiaFacts


def run_checks(fs: HostFS, config: Config) -> AgentRun:
    p = read_platform(fs, config.platform, config.kube_proxy_mode)
    nv = nvidia.read_nvidia(fs)
    ipvs_result = gate("ipvs-loaded", p, config) or ipvs.judge_loaded(
        guarded(lambda: ipvs.read_loaded(fs), "/sys/module")
    )
    # gate() answers whenever no allowed upstreams are given, so `or ()` is never what is judged.
    dns_result = gate("dns-upstream", p, config) or dns.judge_dns(
        dns.read_dns(fs, p.rke2, config.resolv_conf), config.allowed_dns or ()
    )
    return AgentRun((nvidia.judge_nvidia(nv), ipvs_result, dns_result), nv)


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
    nv = run.nvidia
    versions = [("module_version", nv.module_version), ("nvml_version", nv.nvml_version)]
    if any(isinstance(v, str) for _, v in versions):
        add(AGENT_NVIDIA_INFO, [(k, v if isinstance(v, str) else "") for k, v in versions], 1)
    samples[AGENT_LAST_RUN].append(f"{AGENT_LAST_RUN}{_labels([('node', node)])} {finished_s:.3f}")
    add(AGENT_INTERVAL, [], interval_s)
    lines = []
    for name, help_text in HELP.items():
        if samples[name]:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"
