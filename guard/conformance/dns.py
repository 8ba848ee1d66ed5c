"""dns-upstream: the resolv.conf that kubelet hands pods lists only allowed resolvers. Which file:
`--resolv-conf`; on RKE2, RKE2's choice (k3s `locateOrGenerateResolvConf`); elsewhere kubelet's
own setting (docs/conformance.md)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import yaml

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import ItemResult, Status, unknown_result
from guard.conformance.platform import rke2_configs
from guard.doors.hostexec import Unknown
from guard.wire import IpNetwork

NAME = "dns-upstream"
ETC_RESOLV = "/etc/resolv.conf"
SYSTEMD_RESOLV = "/run/systemd/resolve/resolv.conf"
CANDIDATES = (ETC_RESOLV, SYSTEMD_RESOLV)
FALLBACK = "/var/lib/rancher/rke2/agent/etc/resolv.conf"
FALLBACK_SERVERS = ("8.8.8.8",)
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
_NAMESERVER = re.compile(r"^nameserver\s+(\S*)", re.M)  # the same pattern as RKE2's check


@dataclass(frozen=True, slots=True)
class DnsFacts:
    rke2: bool  # RKE2's rule picks the file; else kubelet's default
    override: str | Unknown | None  # the file set by --resolv-conf, RKE2's or kubelet's config
    texts: tuple[tuple[str, str | None], ...] | Unknown  # (path, contents or None when missing)


def nameservers(text: str) -> tuple[str, ...]:
    return tuple(_NAMESERVER.findall(text))


def is_global_unicast(address: str) -> bool:
    """Go's net.IP.IsGlobalUnicast, which RKE2 uses: private ranges count, loopback does not."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    special = ip.is_loopback or ip.is_multicast or ip.is_link_local or ip.is_unspecified
    return not special and ip != ipaddress.ip_address("255.255.255.255")


def is_usable(text: str) -> bool:
    """RKE2 takes a resolv.conf only when it has nameservers and all are global unicast."""
    servers = nameservers(text)
    return bool(servers) and all(is_global_unicast(s) for s in servers)


def choose(
    override: str | None, texts: dict[str, str | None], rke2: bool = True
) -> tuple[str, tuple[str, ...]]:
    """(path, nameservers) of the file kubelet hands pods."""
    if override or not rke2:
        path = override or ETC_RESOLV
        return path, nameservers(texts.get(path) or "")
    for path in CANDIDATES:
        text = texts.get(path)
        if text is not None and is_usable(text):
            return path, nameservers(text)
    return FALLBACK, FALLBACK_SERVERS


def override_of(configs: list[dict[str, object]]) -> str | None:
    """The last `resolv-conf`, or `resolv-conf=` in kubelet-arg (passed last, so it wins)."""
    key_value: str | None = None
    arg_value: str | None = None
    for config in configs:
        if isinstance(config.get("resolv-conf"), str):
            key_value = str(config["resolv-conf"])
        for key in ("kubelet-arg", "kubelet-arg+"):
            args = config.get(key)
            for arg in args if isinstance(args, list) else []:
                m = re.match(r"^(?:--)?resolv-conf=(.+)\Z", str(arg))
                if m:
                    arg_value = m.group(1)
    return arg_value or key_value


def kubelet_override(config_text: str | None, flags_text: str | None) -> str | None:
    """kubelet's resolv.conf setting: the flag in kubeadm-flags.env wins over the config file."""
    m = re.search(r"--resolv-conf=([^\s\"']+)", flags_text or "")
    if m:
        return m.group(1)
    config = yaml.safe_load(config_text) if config_text else None
    value = config.get("resolvConf") if isinstance(config, dict) else None
    return value if isinstance(value, str) and value else None


def _read_override(fs: HostFS, rke2: bool) -> str | Unknown | None:
    try:
        if rke2:
            return override_of(rke2_configs(fs))
        return kubelet_override(fs.read_text(KUBELET_CONFIG), fs.read_text(KUBEADM_FLAGS))
    except yaml.YAMLError as exc:
        where = "the RKE2 configuration" if rke2 else KUBELET_CONFIG
        return Unknown(where, str(exc).splitlines()[0])


def read_dns(fs: HostFS, rke2: bool, resolv_conf: str | None = None) -> DnsFacts:
    override: str | Unknown | None = resolv_conf
    if override is None:
        override = guarded(lambda: _read_override(fs, rke2), "the resolv.conf setting")
    paths = [*CANDIDATES, *([override] if isinstance(override, str) else [])]
    texts = guarded(lambda: tuple((p, fs.read_text(p)) for p in paths), "resolv.conf")
    return DnsFacts(rke2, override, texts)


def judge_dns(facts: DnsFacts, allowed: tuple[IpNetwork, ...]) -> ItemResult:
    override, texts = facts.override, facts.texts
    if isinstance(override, Unknown):
        return unknown_result(NAME, override)
    if isinstance(texts, Unknown):
        return unknown_result(NAME, texts)
    path, servers = choose(override, dict(texts), facts.rke2)
    where = path + (" (RKE2 fallback: no usable resolv.conf)" if path == FALLBACK else "")
    listed = ", ".join(servers)
    if not servers:
        seen = f"{where} lists no nameserver"
        return ItemResult(NAME, Status.WARN, seen, "fix the node's resolver")
    outside = [s for s in servers if not _inside(s, allowed)]
    if outside:
        seen = f"{where} lists {', '.join(outside)} outside --allowed-dns (all: {listed})"
        service = "rke2-agent" if facts.rke2 else "kubelet"
        fix = "fix the resolver source (netplan, systemd-resolved), not the stub file; then restart"
        fix += f" {service} and the CoreDNS pods on this node"
        return ItemResult(NAME, Status.FAIL, seen, fix)
    return ItemResult(NAME, Status.PASS, f"{where}: {listed}")


def _inside(address: str, allowed: tuple[IpNetwork, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in allowed)
