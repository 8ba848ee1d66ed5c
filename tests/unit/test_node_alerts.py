"""The node lifecycle alerts' building blocks: the allowed-upstream regex against ipaddress, the
settings that reach the rules, and one alert per agent check (promtool cases: node.test.yaml)."""

from __future__ import annotations

import ipaddress
import random
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from guard import metric_names, wire
from guard.agent.metrics import CHECKS
from guard.apply import push
from guard.codec import queries
from guard.generate import alert_queries, alerts
from guard.settings import INTERNAL_UPSTREAMS, Settings, SettingsError
from tests.tiers import tool

RULES_FILE = Path(__file__).resolve().parents[2] / alerts.RULES_FILE
NODE_ALERT_NAMES = [
    "GPURowRemapUncorrectable",
    "GPURowRemapFailed",
    "NodeServiceNetworkDown",
    "CoreDNSForwardNotAllowed",
    "GPUFeatureDiscoveryRestartLoop",
    "GPUNodeDriverMismatch",
    "GPUNodeIpvsNotLoaded",
    "GPUNodeDnsUpstreamNotAllowed",
    "GPUNodeAgentCheckUnknown",
    "GPUNodeAgentMissing",
]


def test_the_node_group_ships_these_alerts_in_this_order() -> None:
    assert [r.alert for r in alerts.node_rules(Settings())] == NODE_ALERT_NAMES


def test_the_internal_upstream_regex_matches_exactly_the_internal_networks() -> None:
    allowed = [ipaddress.ip_network(n) for n in INTERNAL_UPSTREAMS.split(",")]
    pattern = re.compile(alert_queries.INTERNAL_UPSTREAM_REGEX)
    rng = random.Random(INTERNAL_UPSTREAMS)
    addresses = [ipaddress.ip_address(rng.getrandbits(32)) for _ in range(3000)]
    for net in allowed:  # inside, on the edges, and just outside each network
        addresses += [net.network_address, net.broadcast_address]
        addresses += [net.network_address - 1, net.broadcast_address + 1]
        addresses += [net.network_address + rng.randrange(net.num_addresses) for _ in range(50)]
        for octet in range(256):  # every value of the octet the prefix cuts
            cut = min(net.prefixlen // 8, 3)
            packed = bytearray(net.network_address.packed)
            packed[cut] = octet
            addresses.append(ipaddress.IPv4Address(bytes(packed)))
    for address in addresses:
        inside = any(address in net for net in allowed)
        assert bool(pattern.fullmatch(f"{address}:53")) == inside, address


def test_the_guards_allowed_dns_setting_reaches_the_coredns_rule_through_its_push() -> None:
    """The rule is the same for every site (it joins with the pushed prefixes); the push carries
    the site's networks, else the internal ranges the rule also falls back to."""
    custom = Settings(conformance_allowed_dns="10.20.0.0/16")
    rules = {r.alert: r for r in alerts.node_rules(custom)}
    default = {r.alert: r.expr for r in alerts.node_rules(Settings())}
    expr = rules["CoreDNSForwardNotAllowed"].expr
    assert expr == default["CoreDNSForwardNotAllowed"]
    assert "unless on (to) (\n  gpu_node_guard:coredns_upstream_allowed\n)" in expr
    assert alert_queries.coredns_upstream_allowed().endswith(
        "and on (prefix) gpu_node_guard_allowed_dns_prefix"
    )
    assert expr.count("to!~") == 2 and "192[.]168[.]" in expr  # before the first push
    pushed = push.site_filters(custom)[metric_names.ALLOWED_DNS_PREFIX.name]
    assert pushed == {(("prefix", "10.20."),): 1.0}
    internal = push.site_filters(Settings())[metric_names.ALLOWED_DNS_PREFIX.name]
    assert len(internal) == 84 and (("prefix", "172.31."),) in internal


def _prefixes_of(to: str) -> set[str]:
    """The prefixes coredns_upstream_allowed cuts from one upstream (its label_replace terms,
    run with Python's re: RE2 and re agree on these patterns)."""
    out = set()
    for term in alert_queries.coredns_upstream_prefix().split("\nor "):
        _, value, _, regex = re.findall(r'"([^"]*)"', term)
        # Python's re warns on `[[]` (a future nested set); the same bracket, escaped.
        if match := re.fullmatch(regex.replace("[[]", r"\[").replace("[]]", r"\]"), to):
            out.add(match.expand(value.replace("$1", r"\1")))
    return out


@pytest.mark.parametrize(
    "networks",
    [
        INTERNAL_UPSTREAMS,
        "10.20.0.0/16,192.0.2.53",
        "100.64.0.0/10,198.18.0.0/15,203.0.113.128/25",
        "2001:db8::/32,fd00::53,2001:db8:1200::/40",
    ],
)
def test_the_pushed_prefixes_allow_what_ipaddress_allows(networks: str) -> None:
    allowed = [ipaddress.ip_network(n.strip()) for n in networks.split(",")]
    prefixes = set(wire.allowed_dns_prefixes(networks))
    rng = random.Random(networks)
    addresses = [ipaddress.ip_address(rng.getrandbits(32)) for _ in range(2000)]
    for net in allowed:  # inside, on the edges, and just outside each network
        addresses += [net.network_address, net.broadcast_address]
        addresses += [net.network_address - 1, net.broadcast_address + 1]
        if net.version == 4:
            addresses += [net.network_address + rng.randrange(net.num_addresses) for _ in range(50)]
        else:
            addresses += [net.network_address + rng.getrandbits(16) for _ in range(50)]
    for address in addresses:
        to = f"[{address}]:53" if address.version == 6 else f"{address}:53"
        inside = any(address in net for net in allowed if net.version == address.version)
        assert bool(_prefixes_of(to) & prefixes) == inside, to


def test_a_network_of_too_many_prefixes_is_refused_by_the_settings() -> None:
    with pytest.raises(SettingsError, match="conformance_allowed_dns: each CIDR at most 8 bits"):
        Settings(conformance_allowed_dns="10.0.0.0/8,fc00::/7")


def test_every_agent_check_has_its_alert() -> None:
    exprs = [r.expr for r in alerts.node_rules(Settings())]
    alerted = {c for c in CHECKS for e in exprs if f'check="{c}"' in e}
    assert alerted == set(CHECKS)


def test_params_reach_the_expressions() -> None:
    p = alert_queries.NodeAlertParams(gfd_restarts=5, agent_stale_after_s=300)
    rules = {r.alert: r for r in alerts.node_rules(Settings(), p)}
    assert ">= 5" in rules["GPUFeatureDiscoveryRestartLoop"].expr
    assert rules["GPUNodeAgentMissing"].expr.endswith("< 300\n)")
    assert rules["GPUNodeAgentMissing"].for_s == 300


def test_service_network_pods_are_the_return_conditions_selectors() -> None:
    """One fact: the guard's settings choose the pods of the alert and of the return check."""
    flannel = Settings(
        service_network_kube_proxy_pods="",
        service_network_cni_namespace="kube-flannel",
        service_network_cni_daemonsets="kube-flannel-ds",
    )
    rule = {r.alert: r for r in alerts.node_rules(flannel)}["NodeServiceNetworkDown"]
    flannel_pods = (
        'kube_pod_info{namespace="kube-flannel", created_by_kind="DaemonSet",'
        ' created_by_name=~"kube-flannel-ds"}'
    )
    assert flannel_pods in rule.expr
    assert "kube-proxy" not in rule.expr
    (matchers,) = (m for _, m in queries.service_network_selectors(flannel))
    assert f"kube_pod_info{{{matchers}}}" in rule.expr
    assert matchers in queries.service_network_pods(flannel)


@pytest.mark.prometheus
def test_promtool_matches_allowed_ipv4_and_ipv6_upstreams_as_python_does(tmp_path: Path) -> None:
    promtool = tool("promtool", "prometheus", "install the Debian package `prometheus`")
    """The shipped rules with the push of a site's networks: the join allows what they hold."""
    custom = Settings(conformance_allowed_dns="10.20.0.0/16,2001:db8::/32")
    expr = alert_queries.alert_coredns_forward_not_allowed(custom, alert_queries.NodeAlertParams())
    ups = ("10.20.9.9:53", "10.21.0.1:53", "[2001:db8::53]:53", "[2001:4860:4860::8888]:53")
    metric = "coredns_proxy_request_duration_seconds_count"
    ALLOWED = metric_names.ALLOWED_DNS_PREFIX.name
    pushed = push.site_filters(custom)[ALLOWED]
    scenario = {
        "rule_files": [str(RULES_FILE)],
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'{metric}{{proxy_name="forward", to="{to}", pod="p"}}',
                        "values": "0+1x20",
                    }
                    for to in ups
                ]
                + [
                    {
                        "series": f'{ALLOWED}{{prefix="{dict(labels)["prefix"]}"}}',
                        "values": "1x20",
                    }
                    for labels in pushed
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "15m",
                        "exp_samples": [
                            {"labels": f'{{pod="p", to="{to}"}}', "value": 10}
                            for to in ("10.21.0.1:53", "[2001:4860:4860::8888]:53")
                        ],
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "upstreams.test.yaml"
    test_file.write_text(yaml.safe_dump(scenario, width=10_000), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", test_file.name], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
