"""One conformance run: read every fact, judge every item (pure), then apply --fix.

Reading never raises for a host problem: a file that cannot be read or a command that fails or
hangs becomes an `Unknown` fact and its item reports UNKNOWN; the other items still run.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.conformance import apt, dns, ipvs, nvidia, rke2
from guard.conformance.fix import apply_fixes, plan_fixes
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config, ItemResult
from guard.hostexec import Runner

ITEMS = (
    "ipvs-resolvable",
    "ipvs-persist",
    "ipvs-loaded",
    "nvidia-match",
    "rke2-unit",
    "rke2-version",
    "auto-upgrade",
    "package-hold",
    "dns-upstream",
)


@dataclass(frozen=True, slots=True)
class HostFacts:
    ipvs: ipvs.IpvsFacts
    nvidia: nvidia.NvidiaFacts
    rke2: rke2.Rke2Facts
    apt: apt.AptFacts
    dns: dns.DnsFacts


def read_host(fs: HostFS, runner: Runner) -> HostFacts:
    return HostFacts(
        ipvs=ipvs.read_ipvs(fs, runner),
        nvidia=nvidia.read_nvidia(fs),
        rke2=rke2.read_rke2(fs, runner),
        apt=apt.read_apt(fs),
        dns=dns.read_dns(fs),
    )


def judge(facts: HostFacts, config: Config) -> tuple[ItemResult, ...]:
    """Every item, in ITEMS order; a pure function of the facts and the expectations."""
    return (
        ipvs.judge_resolvable(facts.ipvs),
        ipvs.judge_persist(facts.ipvs),
        ipvs.judge_loaded(facts.ipvs),
        nvidia.judge_nvidia(facts.nvidia),
        rke2.judge_unit(facts.rke2, config.role),
        rke2.judge_version(facts.rke2, config.control_plane_version),
        apt.judge_auto_upgrade(facts.apt),
        apt.judge_package_hold(facts.apt),
        dns.judge_dns(facts.dns, config.allowed_dns),
    )


def run_conformance(
    fs: HostFS, runner: Runner, config: Config, fix: bool = False
) -> tuple[ItemResult, ...]:
    results = judge(read_host(fs, runner), config)
    if not fix:
        return results
    repaired = {r.name: r for r in apply_fixes(plan_fixes(results), fs, runner)}
    return tuple(repaired.get(r.name, r) for r in results)
