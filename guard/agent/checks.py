"""The agent's checks: the conformance items that files alone answer (nvidia-match, ipvs-loaded,
dns-upstream; docs/agent.md), judged by the same code. No command runs: the agent has no runner;
a file that cannot be read makes its check UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.conformance import dns, ipvs, nvidia
from guard.conformance.checks import gate
from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import Config, ItemResult
from guard.conformance.platform import Platform, read_platform

CHECKS = ("nvidia-match", "ipvs-loaded", "dns-upstream")


@dataclass(frozen=True, slots=True)
class AgentRun:
    platform: Platform
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
    return AgentRun(p, (nvidia.judge_nvidia(nv), ipvs_result, dns_result), nv)
