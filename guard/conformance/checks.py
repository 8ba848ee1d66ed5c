"""One conformance run: read the platform, read the facts of the items that apply (a host problem is
an `Unknown` fact, never an exception), judge every item (pure), then apply --fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from guard.conformance import apt, dns, ipvs, nvidia, rke2
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config, ItemResult, Status, unknown_result
from guard.conformance.platform import Platform, read_platform
from guard.doors.hostexec import Runner, Unknown

IPVS_ITEMS = ("ipvs-resolvable", "ipvs-persist", "ipvs-loaded")
RKE2_ITEMS = ("rke2-unit", "rke2-version")
APT_ITEMS = ("auto-upgrade", "package-hold")
ITEMS = (*IPVS_ITEMS, "nvidia-match", *RKE2_ITEMS, *APT_ITEMS, "dns-upstream")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What was read; None where the items do not apply and nothing was read."""

    platform: Platform
    nvidia: nvidia.NvidiaFacts
    ipvs: ipvs.IpvsFacts | None = None
    rke2: rke2.Rke2Facts | None = None
    apt: apt.AptFacts | None = None
    dns: dns.DnsFacts | None = None


@dataclass(frozen=True, slots=True)
class Run:
    platform: Platform
    results: tuple[ItemResult, ...]  # in ITEMS order


# Which items apply: docs/conformance.md; nvidia-match's own judge says SKIP off a GPU node.
def gate(item: str, p: Platform, c: Config) -> ItemResult | None:
    """The item's result when it does not (or cannot be known to) apply; None when it applies."""
    if item in IPVS_ITEMS:
        if isinstance(p.proxy_mode, Unknown):
            return unknown_result(item, p.proxy_mode)
        if p.proxy_mode != "ipvs":
            why = f"kube-proxy mode {p.proxy_mode} ({p.proxy_source}): ip_vs not needed"
            return ItemResult(item, Status.SKIP, why)
    if item in RKE2_ITEMS and not p.rke2:
        return ItemResult(item, Status.SKIP, f"not an RKE2 node ({p.rke2_source})")
    if item == "rke2-version" and c.control_plane_version is None:
        return ItemResult(item, Status.SKIP, "no --control-plane-version given: not compared")
    if item in APT_ITEMS and not p.dpkg:
        return ItemResult(item, Status.SKIP, "no /var/lib/dpkg/status: not a Debian/Ubuntu host")
    if item == "dns-upstream" and c.allowed_dns is None:
        return ItemResult(item, Status.SKIP, "no --allowed-dns given: upstreams not checked")
    return None


def read_host(fs: HostFS, runner: Runner, config: Config) -> HostFacts:
    p = read_platform(fs, config.platform, config.kube_proxy_mode)

    def applies(*items: str) -> bool:
        return any(gate(item, p, config) is None for item in items)

    return HostFacts(
        platform=p,
        nvidia=nvidia.read_nvidia(fs),
        ipvs=ipvs.read_ipvs(fs, runner) if applies(*IPVS_ITEMS) else None,
        rke2=rke2.read_rke2(fs, runner, applies("rke2-version")) if applies(*RKE2_ITEMS) else None,
        apt=apt.read_apt(fs) if applies(*APT_ITEMS) else None,
        dns=dns.read_dns(fs, p.rke2, config.resolv_conf) if applies("dns-upstream") else None,
    )


def judge(facts: HostFacts, config: Config) -> tuple[ItemResult, ...]:
    """Every item, in ITEMS order; a pure function of the facts and the expectations."""
    return tuple(
        gate(item, facts.platform, config) or JUDGES[item](facts, config) for item in ITEMS
    )


def _read(facts: T | None) -> T:
    """An item that applies has its facts read (read_host and gate agree on that)."""
    assert facts is not None, "an item applies but its facts were not read"
    return facts


JUDGES: dict[str, Callable[[HostFacts, Config], ItemResult]] = {
    "ipvs-resolvable": lambda f, c: ipvs.judge_resolvable(_read(f.ipvs)),
    "ipvs-persist": lambda f, c: ipvs.judge_persist(_read(f.ipvs)),
    "ipvs-loaded": lambda f, c: ipvs.judge_loaded(_read(f.ipvs).loaded),
    "nvidia-match": lambda f, c: nvidia.judge_nvidia(f.nvidia),
    "rke2-unit": lambda f, c: rke2.judge_unit(_read(f.rke2), c.role),
    "rke2-version": lambda f, c: rke2.judge_version(_read(f.rke2), _read(c.control_plane_version)),
    "auto-upgrade": lambda f, c: apt.judge_auto_upgrade(_read(f.apt)),
    "package-hold": lambda f, c: apt.judge_package_hold(_read(f.apt)),
    "dns-upstream": lambda f, c: dns.judge_dns(_read(f.dns), _read(c.allowed_dns)),
}


def run_conformance(fs: HostFS, runner: Runner, config: Config, fix: bool = False) -> Run:
    facts = read_host(fs, runner, config)
    results = judge(facts, config)
    if fix:
        repaired = {r.name: r for r in ipvs.apply_fixes(ipvs.plan_fixes(results), fs, runner)}
        results = tuple(repaired.get(r.name, r) for r in results)
    return Run(facts.platform, results)
