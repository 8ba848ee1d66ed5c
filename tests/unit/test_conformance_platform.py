"""Conformance that fits the cluster: every item on whole fake hosts of four setups (RKE2 + IPVS,
kubeadm + iptables, kubeadm + IPVS, no kube-proxy at all), and how the platform is read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from guard.conformance.checks import ITEMS
from guard.conformance.model import Config, Status
from tests.fixtures.hosts.hosttree import (
    CONFIG,
    KUBEADM,
    NO_KUBE_PROXY,
    PROC_MODULES,
    RKE2_PROXY_MANIFEST,
    FakeRunner,
    Link,
    check_host,
    kubeadm_proxy,
    rke2_proxy_manifest,
)

P, W, F, U, S = Status.PASS, Status.WARN, Status.FAIL, Status.UNKNOWN, Status.SKIP
IPVS = ("ipvs-resolvable", "ipvs-persist", "ipvs-loaded")
RKE2 = ("rke2-unit", "rke2-version")
PERSIST = "etc/modules-load.d/ipvs.conf"
NO_IP_VS = {
    PERSIST: None,
    "proc/modules": "".join(
        line + "\n" for line in PROC_MODULES.splitlines() if "ip_vs" not in line
    ),
}
RKE2_CONFIG = "etc/rancher/rke2/config.yaml"


def expect(**statuses: Status) -> dict[str, Status]:
    """Every item PASS except those named (dashes written as underscores)."""
    named = {k.replace("_", "-"): v for k, v in statuses.items()}
    return {item: named.get(item, P) for item in ITEMS}


def skipping(items: tuple[str, ...], **others: Status) -> dict[str, Status]:
    return expect(**dict.fromkeys((i.replace("-", "_") for i in items), S), **others)


@pytest.mark.parametrize(
    ("changes", "config", "expected"),
    [
        pytest.param({}, CONFIG, expect(), id="rke2-ipvs-healthy"),
        pytest.param(
            NO_IP_VS,
            CONFIG,
            expect(ipvs_persist=F, ipvs_loaded=F),
            id="rke2-ipvs-after-reboot-without-ip-vs",
        ),
        pytest.param(KUBEADM, CONFIG, skipping(IPVS + RKE2), id="kubeadm-iptables-healthy"),
        pytest.param(
            {**KUBEADM, **NO_IP_VS},
            CONFIG,
            skipping(IPVS + RKE2),
            id="kubeadm-iptables-does-not-need-ip-vs",
        ),
        pytest.param(
            {**KUBEADM, **kubeadm_proxy("ipvs")}, CONFIG, skipping(RKE2), id="kubeadm-ipvs-healthy"
        ),
        pytest.param(
            {**KUBEADM, **kubeadm_proxy("ipvs"), **NO_IP_VS},
            CONFIG,
            skipping(RKE2, ipvs_persist=F, ipvs_loaded=F),
            id="kubeadm-ipvs-without-ip-vs",
        ),
        pytest.param(
            {**NO_KUBE_PROXY, **NO_IP_VS},
            CONFIG,
            skipping(IPVS + RKE2),
            id="cilium-without-kube-proxy",
        ),
        pytest.param(
            {**NO_KUBE_PROXY, **NO_IP_VS},
            replace(CONFIG, kube_proxy_mode="ipvs"),
            skipping(RKE2, ipvs_persist=F, ipvs_loaded=F),
            id="mode-set-by-flag-wins-over-the-node",
        ),
        pytest.param(
            {},
            replace(CONFIG, platform="other"),
            # kubelet's default file is the systemd-resolved stub: RKE2's choice is not made
            skipping(RKE2, dns_upstream=F),
            id="platform-set-by-flag-wins-over-the-node",
        ),
    ],
)
def test_items_apply_by_platform(
    tmp_path: Path,
    changes: dict[str, str | Link | None],
    config: Config,
    expected: dict[str, Status],
) -> None:
    results = check_host(tmp_path, changes, config)
    assert {name: r.status for name, r in results.items()} == expected


def test_a_kubeadm_node_runs_no_rke2_command(tmp_path: Path) -> None:
    runner = FakeRunner()
    results = check_host(tmp_path, {**KUBEADM, "var/lib/rancher/rke2/bin": None}, runner=runner)
    assert runner.calls == []
    assert results["rke2-version"].observed == (
        "not an RKE2 node (no /var/lib/rancher/rke2, /etc/rancher/rke2 or rke2 unit file)"
    )


@pytest.mark.parametrize(
    ("changes", "item", "status", "observed"),
    [
        pytest.param(
            {RKE2_PROXY_MANIFEST: rke2_proxy_manifest("iptables"), **NO_IP_VS},
            "ipvs-loaded",
            S,
            "kube-proxy mode iptables (/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml)",
            id="rke2-iptables-manifest",
        ),
        pytest.param(
            {
                RKE2_PROXY_MANIFEST: rke2_proxy_manifest("iptables"),
                RKE2_CONFIG: "kube-proxy-arg:\n  - proxy-mode=ipvs\n",
                **NO_IP_VS,
            },
            "ipvs-persist",
            F,
            "no modules-load.d file lists ip_vs",
            id="rke2-config-asks-for-ipvs-at-the-next-start",
        ),
        pytest.param(
            {RKE2_PROXY_MANIFEST: None, RKE2_CONFIG: "disable-kube-proxy: true\n", **NO_IP_VS},
            "ipvs-loaded",
            S,
            "kube-proxy mode none (/etc/rancher/rke2/config.yaml)",
            id="rke2-cilium-kube-proxy-disabled",
        ),
        pytest.param(
            {RKE2_PROXY_MANIFEST: None},
            "ipvs-loaded",
            S,
            "kube-proxy mode none (no kube-proxy found (/var/lib/rancher/rke2/agent/pod-manifests/"
            "kube-proxy.yaml, /var/lib/kubelet/pods/*/volumes/kubernetes.io~configmap/kube-proxy/"
            "config.conf)): ip_vs not needed",
            id="no-kube-proxy-says-where-it-looked",
        ),
        pytest.param(
            {RKE2_PROXY_MANIFEST: "spec: [unclosed\n"},
            "ipvs-persist",
            U,
            "kube-proxy's configuration: while parsing",
            id="unreadable-manifest-is-unknown-not-skip",
        ),
        pytest.param(
            {**KUBEADM, **kubeadm_proxy("IPVS")},
            "ipvs-loaded",
            P,
            "loaded",
            id="kubeadm-mode-is-case-insensitive",
        ),
        pytest.param(
            {"var/lib/dpkg/status": None},
            "auto-upgrade",
            S,
            "not a Debian/Ubuntu host",
            id="no-dpkg-skips-apt-items",
        ),
    ],
)
def test_platform_detail(
    tmp_path: Path, changes: dict[str, str | Link | None], item: str, status: Status, observed: str
) -> None:
    result = check_host(tmp_path, changes)[item]
    assert result.status is status, result
    assert observed in result.observed, result


@pytest.mark.parametrize(
    ("changes", "config", "status", "observed"),
    [
        pytest.param(
            {**KUBEADM, "run/systemd/resolve/resolv.conf": "nameserver 10.20.0.53\n"},
            CONFIG,
            P,
            "/run/systemd/resolve/resolv.conf: 10.20.0.53",
            id="kubeadm-kubelet-config-names-the-file",
        ),
        pytest.param(
            {
                **KUBEADM,
                "var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n",
                "etc/resolv.conf": "nameserver 10.20.0.53\nnameserver 1.1.1.1\n",
            },
            CONFIG,
            F,
            "/etc/resolv.conf lists 1.1.1.1 outside --allowed-dns",
            id="kubeadm-without-setting-uses-kubelet-default",
        ),
        pytest.param(
            {
                **KUBEADM,
                "var/lib/kubelet/kubeadm-flags.env": (
                    'KUBELET_KUBEADM_ARGS="--resolv-conf=/etc/kubelet-resolv.conf"\n'
                ),
                "etc/kubelet-resolv.conf": "nameserver 8.8.8.8\n",
            },
            CONFIG,
            F,
            "/etc/kubelet-resolv.conf lists 8.8.8.8",
            id="kubeadm-flag-wins-over-config",
        ),
        pytest.param(
            {"etc/pods-resolv.conf": "nameserver 10.20.9.9\n"},
            replace(CONFIG, resolv_conf="/etc/pods-resolv.conf"),
            P,
            "/etc/pods-resolv.conf: 10.20.9.9",
            id="file-set-by-flag",
        ),
    ],
)
def test_dns_file_by_platform(
    tmp_path: Path,
    changes: dict[str, str | Link | None],
    config: Config,
    status: Status,
    observed: str,
) -> None:
    result = check_host(tmp_path, changes, config)["dns-upstream"]
    assert (result.status, observed in result.observed) == (status, True), result


def test_no_rke2_command_runs_when_no_control_plane_version_is_given(tmp_path: Path) -> None:
    runner = FakeRunner()
    results = check_host(
        tmp_path,
        {"var/lib/rancher/rke2/bin": None},
        replace(CONFIG, control_plane_version=None),
        runner,
    )
    assert runner.calls == []  # the version would need `rke2 --version`: not asked for
    assert (results["rke2-unit"].status, results["rke2-version"].status) == (P, S)
