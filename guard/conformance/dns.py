"""dns-upstream: the resolv.conf that kubelet hands pods lists only allowed resolvers.

CoreDNS runs with dnsPolicy: Default, so it forwards to whatever this file lists; one public
resolver in it answered internal registry names with public records. The file is RKE2's choice
(k3s pkg/agent/config `locateOrGenerateResolvConf`): `resolv-conf` from the RKE2 config if set;
else /etc/resolv.conf when every nameserver in it is a global unicast address; else
/run/systemd/resolve/resolv.conf under the same rule; else a generated file with 8.8.8.8. A
systemd-resolved stub (127.0.0.53) therefore sends the check to the second file.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import yaml

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import IpNetwork, ItemResult, Status, unknown_result
from guard.hostexec import Unknown

NAME = "dns-upstream"
ETC_RESOLV = "/etc/resolv.conf"
SYSTEMD_RESOLV = "/run/systemd/resolve/resolv.conf"
CANDIDATES = (ETC_RESOLV, SYSTEMD_RESOLV)
FALLBACK = "/var/lib/rancher/rke2/agent/etc/resolv.conf"
FALLBACK_SERVERS = ("8.8.8.8",)
RKE2_CONFIG = "/etc/rancher/rke2/config.yaml"
RKE2_CONFIG_D = "/etc/rancher/rke2/config.yaml.d"
_NAMESERVER = re.compile(r"^nameserver\s+(\S*)", re.M)  # the same pattern as RKE2's check


@dataclass(frozen=True, slots=True)
class DnsFacts:
    override: str | Unknown | None  # resolv-conf from the RKE2 configuration
    texts: tuple[tuple[str, str | None], ...] | Unknown  # (path, contents or None when missing)


def nameservers(text: str) -> tuple[str, ...]:
    return tuple(_NAMESERVER.findall(text))


def is_global_unicast(address: str) -> bool:
    """Go's net.IP.IsGlobalUnicast, which RKE2 uses: private ranges count, loopback does not.

    >>> [is_global_unicast(a) for a in ("10.0.0.53", "127.0.0.53", "fe80::1", "nonsense")]
    [True, False, False, False]
    """
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


def choose(override: str | None, texts: dict[str, str | None]) -> tuple[str, tuple[str, ...]]:
    """(path, nameservers) of the file RKE2 gives kubelet.

    >>> choose(None, {ETC_RESOLV: "nameserver 127.0.0.53\\n",
    ...               SYSTEMD_RESOLV: "nameserver 10.0.0.2\\nnameserver 8.8.8.8\\n"})
    ('/run/systemd/resolve/resolv.conf', ('10.0.0.2', '8.8.8.8'))
    """
    if override:
        return override, nameservers(texts.get(override) or "")
    for path in CANDIDATES:
        text = texts.get(path)
        if text is not None and is_usable(text):
            return path, nameservers(text)
    return FALLBACK, FALLBACK_SERVERS


def override_of(configs: list[dict[str, object]]) -> str | None:
    """The last `resolv-conf`, or `resolv-conf=` in kubelet-arg (passed last, so it wins).

    >>> override_of([{"resolv-conf": "/a"}, {"kubelet-arg+": ["resolv-conf=/b"]}])
    '/b'
    """
    key_value: str | None = None
    arg_value: str | None = None
    for config in configs:
        if isinstance(config.get("resolv-conf"), str):
            key_value = str(config["resolv-conf"])
        for key in ("kubelet-arg", "kubelet-arg+"):
            args = config.get(key)
            for arg in args if isinstance(args, list) else []:
                m = re.match(r"^(?:--)?resolv-conf=(.+)$", str(arg))
                if m:
                    arg_value = m.group(1)
    return arg_value or key_value


def _read_override(fs: HostFS) -> str | Unknown | None:
    paths = [RKE2_CONFIG] + [
        f"{RKE2_CONFIG_D}/{n}" for n in fs.listdir(RKE2_CONFIG_D) if n.endswith(".yaml")
    ]
    configs = []
    for path in paths:
        text = fs.read_text(path)
        try:
            loaded = yaml.safe_load(text) if text else None
        except yaml.YAMLError as exc:
            return Unknown(path, f"not YAML: {str(exc).splitlines()[0]}")
        if isinstance(loaded, dict):
            configs.append(loaded)
    return override_of(configs)


def read_dns(fs: HostFS) -> DnsFacts:
    override = guarded(lambda: _read_override(fs), RKE2_CONFIG)
    paths = [*CANDIDATES, *([override] if isinstance(override, str) else [])]
    texts = guarded(lambda: tuple((p, fs.read_text(p)) for p in paths), "resolv.conf")
    return DnsFacts(override, texts)


# Cases: --allowed-dns not given → WARN (not checked); a nameserver outside every allowed CIDR
# → FAIL; the file lists none → WARN; all inside → PASS.
def judge_dns(facts: DnsFacts, allowed: tuple[IpNetwork, ...] | None) -> ItemResult:
    override, texts = facts.override, facts.texts
    if isinstance(override, Unknown):
        return unknown_result(NAME, override)
    if isinstance(texts, Unknown):
        return unknown_result(NAME, texts)
    path, servers = choose(override, dict(texts))
    where = path + (" (RKE2 fallback: no usable resolv.conf)" if path == FALLBACK else "")
    listed = ", ".join(servers)
    if allowed is None:
        seen = f"not checked: {where} lists {listed}"
        return ItemResult(NAME, Status.WARN, seen, "pass --allowed-dns")
    if not servers:
        seen = f"{where} lists no nameserver"
        return ItemResult(NAME, Status.WARN, seen, "fix the node's resolver")
    outside = [s for s in servers if not _inside(s, allowed)]
    if outside:
        return ItemResult(
            NAME,
            Status.FAIL,
            f"{where} lists {', '.join(outside)} outside --allowed-dns (all: {listed})",
            "fix the resolver source (netplan, systemd-resolved), not the stub file; then restart "
            "rke2-agent and the CoreDNS pods on this node",
        )
    return ItemResult(NAME, Status.PASS, f"{where}: {listed}")


def _inside(address: str, allowed: tuple[IpNetwork, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in allowed)
