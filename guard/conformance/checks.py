"""One conformance run: read the platform, read the facts of the items that apply (a host problem is
an `Unknown` fact, never an exception), judge every item (pure), then apply --fix."""

from __future__ import annotations

from dataclasses import dataclass

from guard.conformance import apt, dns, ipvs, nvidia, rke2
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config, ItemResult, Status, unknown_result
from guard.conformance.platform import Platform, read_platform
from guard.doors.hostexec import Runner, Unknown

IPVS_ITEMS = ("ipvs-resolvable", "ipvs-persist", "ipvs-loaded")
RKE2_ITEMS = ("rke2-unit", "rke2-version")
APT_ITEMS = ("auto-upgrade", "package-hold")
ITEMS = (*IPVS_ITEMS, "nvidia-match", *RKE2_ITEMS, *APT_ITEMS, "dns-upstream")


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
        gate(item, facts.platform, config) or _judge_item(item, facts, config) for item in ITEMS
    )


def _judge_item(item: str, f: HostFacts, c: Config) -> ItemResult:
    """An item that applies; its facts were read (read_host and gate agree on that)."""
    match item:
        case "ipvs-resolvable" if f.ipvs:
            return ipvs.judge_resolvable(f.ipvs)
        case "ipvs-persist" if f.ipvs:
            return ipvs.judge_persist(f.ipvs)
        case "ipvs-loaded" if f.ipvs:
            return ipvs.judge_loaded(f.ipvs.loaded)
        case "nvidia-match":
            return nvidia.judge_nvidia(f.nvidia)
        case "rke2-unit" if f.rke2:
            return rke2.judge_unit(f.rke2, c.role)
        case "rke2-version" if f.rke2 and c.control_plane_version:
            return rke2.judge_version(f.rke2, c.control_plane_version)
        case "auto-upgrade" if f.apt:
            return apt.judge_auto_upgrade(f.apt)
        case "package-hold" if f.apt:
            return apt.judge_package_hold(f.apt)
        case "dns-upstream" if f.dns and c.allowed_dns:
            return dns.judge_dns(f.dns, c.allowed_dns)
    raise AssertionError(f"{item}: applies but its facts were not read")


def run_conformance(fs: HostFS, runner: Runner, config: Config, fix: bool = False) -> Run:
    facts = read_host(fs, runner, config)
    results = judge(facts, config)
    if fix:
        repaired = {r.name: r for r in ipvs.apply_fixes(ipvs.plan_fixes(results), fs, runner)}
        results = tuple(repaired.get(r.name, r) for r in results)
    return Run(facts.platform, results)
