"""The node agent's checks on fake host trees: a whole host, and only what the DaemonSet mounts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from guard.agent.metrics import CHECKS, run_checks
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config, Status
from tests.fixtures.hosts.hosttree import (
    CONFIG,
    DRIVER,
    HEALTHY,
    KUBEADM,
    LIBDIR,
    NO_KUBE_PROXY,
    PROC_MODULES,
    Link,
    Tree,
    build_host,
    kubeadm_proxy,
)

ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = ROOT / "manifests" / "agent" / "daemonset.yaml"
P, W, F, U, S = Status.PASS, Status.WARN, Status.FAIL, Status.UNKNOWN, Status.SKIP
NEW_DRIVER = "580.159.03"
UPGRADED_WITHOUT_REBOOT = {
    f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None,
    f"{LIBDIR}/libnvidia-ml.so.{NEW_DRIVER}": "",
    f"{LIBDIR}/libnvidia-ml.so.1": Link(f"libnvidia-ml.so.{NEW_DRIVER}"),
}
NO_IP_VS = {
    "proc/modules": "".join(
        f"{line}\n" for line in PROC_MODULES.splitlines() if "ip_vs" not in line
    )
}
PUBLIC_THIRD = {
    "run/systemd/resolve/resolv.conf": "nameserver 10.20.0.53\nnameserver 10.20.0.54\n"
    "nameserver 8.8.8.8\n"
}


def statuses(root: Path, config: Config = CONFIG) -> dict[str, Status]:
    return {r.name: r.status for r in run_checks(HostFS(root), config).results}


def expect(**changes: Status) -> dict[str, Status]:
    return {c: changes.get(c.replace("-", "_"), P) for c in CHECKS}


@pytest.mark.parametrize(
    ("changes", "config", "expected"),
    [
        pytest.param({}, CONFIG, expect(), id="rke2-ipvs-healthy"),
        pytest.param(
            UPGRADED_WITHOUT_REBOOT, CONFIG, expect(nvidia_match=F), id="nvml-upgraded-no-reboot"
        ),
        pytest.param(NO_IP_VS, CONFIG, expect(ipvs_loaded=F), id="rke2-ipvs-without-ip-vs"),
        pytest.param(PUBLIC_THIRD, CONFIG, expect(dns_upstream=F), id="public-resolver-third"),
        pytest.param({**KUBEADM, **NO_IP_VS}, CONFIG, expect(ipvs_loaded=S), id="kubeadm-iptables"),
        pytest.param(
            {**KUBEADM, **kubeadm_proxy("ipvs"), **NO_IP_VS},
            CONFIG,
            expect(ipvs_loaded=F),
            id="kubeadm-ipvs-without-ip-vs",
        ),
        pytest.param(
            {**NO_KUBE_PROXY, **NO_IP_VS}, CONFIG, expect(ipvs_loaded=S), id="cilium-no-kube-proxy"
        ),
        pytest.param({}, Config(), expect(dns_upstream=S), id="no-allowed-dns-given"),
        pytest.param(
            {"sys/module/nvidia/version": None, f"{LIBDIR}/libnvidia-ml.so.1": None}
            | {f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None},
            CONFIG,
            expect(nvidia_match=S),
            id="not-a-gpu-node",
        ),
    ],
)
def test_checks_on_a_whole_host(
    tmp_path: Path, changes: Tree, config: Config, expected: dict[str, Status]
) -> None:
    assert statuses(build_host(tmp_path, changes), config) == expected


def test_a_file_that_cannot_be_read_is_unknown_and_the_rest_still_runs(tmp_path: Path) -> None:
    root = build_host(tmp_path, {"sys/module/nvidia/version": None})
    (root / "sys/module/nvidia/version").mkdir(parents=True)  # reading it fails with EISDIR
    run = run_checks(HostFS(root), CONFIG)
    assert [r.status for r in run.results] == [U, P, P]
    assert run.results[0].observed.startswith("reading /sys/module/nvidia/version: ")


LIB64 = "usr/lib64"


def _soname(directory: str, version: str) -> dict[str, str | Link | None]:
    return {f"{directory}/libnvidia-ml.so.1": Link(f"libnvidia-ml.so.{version}")}


# A RHEL-family GPU worker: NVML in /usr/lib64, no systemd-resolved (its /run/systemd/resolve is
# the empty directory the runtime leaves), a resolv.conf with the site's resolvers.
RHEL: dict[str, str | Link | None] = {
    f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None,
    f"{LIBDIR}/libnvidia-ml.so.1": None,
    f"{LIB64}/libnvidia-ml.so.{DRIVER}": "",
    **_soname(LIB64, DRIVER),
    "run/systemd/resolve/resolv.conf": None,
    "etc/resolv.conf": "nameserver 10.20.0.53\nnameserver 10.20.0.54\n",
}


def mounted_tree(extra: Tree | None = None) -> dict[str, str | Link | None]:
    """Changes that leave of the healthy host only what the DaemonSet mounts under /host."""
    daemonset = yaml.safe_load(DAEMONSET.read_text(encoding="utf-8"))
    mounts = daemonset["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    kept = tuple(m["mountPath"].removeprefix("/host/") for m in mounts)
    # /proc is not mounted: ip_vs is seen in /sys/module, as on a real host.
    full = {**HEALTHY, "sys/module/ip_vs/refcnt": "3\n", **dict(extra or {})}
    return {rel: value if rel.startswith(kept) else None for rel, value in full.items()}


def agent_config() -> Config:
    """The flags of the DaemonSet's container, plus allowed upstreams."""
    daemonset = yaml.safe_load(DAEMONSET.read_text(encoding="utf-8"))
    argv = daemonset["spec"]["template"]["spec"]["containers"][0]["command"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--"))
    return replace(CONFIG, platform=flags["platform"], kube_proxy_mode=flags["kube-proxy-mode"])


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({}, expect(), id="healthy"),
        pytest.param(UPGRADED_WITHOUT_REBOOT, expect(nvidia_match=F), id="nvml-mismatch"),
        pytest.param({"sys/module/ip_vs/refcnt": None}, expect(ipvs_loaded=F), id="no-ip-vs"),
        pytest.param(PUBLIC_THIRD, expect(dns_upstream=F), id="public-resolver"),
        pytest.param(RHEL, expect(), id="rhel-nvml-in-lib64-no-systemd-resolved"),
        pytest.param(
            RHEL | {f"{LIB64}/libnvidia-ml.so.{NEW_DRIVER}": "", **_soname(LIB64, NEW_DRIVER)},
            expect(nvidia_match=F),
            id="rhel-nvml-upgraded-no-reboot",
        ),
    ],
)
def test_the_daemonset_mounts_are_enough(
    tmp_path: Path, extra: Tree, expected: dict[str, Status]
) -> None:
    root = build_host(tmp_path / "host", mounted_tree(extra))
    assert not (root / "proc").exists() and not (root / "var").exists()
    assert statuses(root, agent_config()) == expected
