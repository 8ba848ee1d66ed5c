"""Each conformance item on a fake host root: the healthy worker changed one way per row."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from guard.conformance.model import Config, Status
from guard.doors.hostexec import CommandResult
from tests.fixtures.hosts.hosttree import (
    CONFIG,
    DRIVER,
    HEALTHY,
    KERNEL,
    LIBDIR,
    MODDIR,
    PACKAGES,
    UNITDIR,
    WANTS,
    FakeRunner,
    Link,
    Tree,
    check_host,
    dpkg_status,
    exited,
    ok,
    timed_out,
)

P, W, F, U, S = Status.PASS, Status.WARN, Status.FAIL, Status.UNKNOWN, Status.SKIP
IPVS_KO = f"{MODDIR}/kernel/net/netfilter/ipvs/ip_vs.ko"
PERSIST = "etc/modules-load.d/ipvs.conf"
NO_IP_VS = "ip_vs_rr 16384 0 - Live 0x0000000000000000\nnvidia 56807424 0 - Live 0x0\n"
NEW_DRIVER = "580.159.03"
TWO_LINE_BLACKLIST = 'Unattended-Upgrade::Package-Blacklist { "linux-"; "nvidia-"; };\n'
RKE2_CONFIG = "token: x\nresolv-conf: /etc/rancher/rke2/resolv.conf\n"


def merged_usr() -> dict[str, str | Link | None]:
    """The module tree under usr/lib with lib -> usr/lib, as on merged-/usr hosts."""
    moved: dict[str, str | Link | None] = {"lib": Link("usr/lib")}
    for rel, value in HEALTHY.items():
        if rel.startswith("lib/"):
            moved[rel] = None
            moved["usr/" + rel] = value
    return moved


def apt_periodic(**files: str) -> dict[str, str | Link | None]:
    return {f"etc/apt/apt.conf.d/{name}": text for name, text in files.items()}


def uu(value: str) -> str:
    return f'APT::Periodic::Unattended-Upgrade "{value}";\n'


ROWS = [
    # ipvs-resolvable
    pytest.param({}, None, {}, "ipvs-resolvable", P, "module", id="ipvs-indexed-module"),
    pytest.param(
        {
            f"{MODDIR}/modules.dep": "kernel/net/netfilter/nf_conntrack.ko:\n",
            f"{MODDIR}/modules.builtin": "kernel/net/netfilter/ipvs/ip_vs.ko\n",
            IPVS_KO: None,
        },
        None,
        {},
        "ipvs-resolvable",
        P,
        "builtin",
        id="ipvs-builtin",
    ),
    pytest.param(
        {
            f"{MODDIR}/modules.dep": "kernel/net/netfilter/ipvs/ip_vs.ko.zst: kernel/x.ko.zst\n",
            IPVS_KO: None,
            IPVS_KO + ".zst": "",
        },
        None,
        {},
        "ipvs-resolvable",
        P,
        "ip_vs.ko.zst",
        id="ipvs-compressed-module",
    ),
    pytest.param(merged_usr(), None, {}, "ipvs-resolvable", P, "module", id="ipvs-merged-usr"),
    pytest.param(
        {"proc/sys/kernel/osrelease": "5.15.0-180-generic\n"},
        None,
        {},
        "ipvs-resolvable",
        F,
        "no modules.dep",
        id="ipvs-no-index-for-running-kernel",
    ),
    pytest.param(
        {f"{MODDIR}/modules.dep": "kernel/net/netfilter/nf_conntrack.ko:\n"},
        None,
        {},
        "ipvs-resolvable",
        F,
        "not in the module index",
        id="ipvs-not-indexed",
    ),
    pytest.param({IPVS_KO: None}, None, {}, "ipvs-resolvable", F, "missing", id="ipvs-file-gone"),
    pytest.param(
        {"proc/sys/kernel/osrelease": None},
        None,
        {("uname", "-r"): ok(KERNEL + "\n")},
        "ipvs-resolvable",
        P,
        KERNEL,
        id="ipvs-kernel-from-uname",
    ),
    pytest.param(
        {"proc/sys/kernel/osrelease": None},
        None,
        {("uname", "-r"): timed_out},
        "ipvs-resolvable",
        U,
        "timed out",
        id="ipvs-uname-hangs",
    ),
    # ipvs-persist
    pytest.param({}, None, {}, "ipvs-persist", P, "/etc/modules-load.d/ipvs.conf", id="persist"),
    pytest.param({PERSIST: None}, None, {}, "ipvs-persist", F, "reboot", id="persist-missing"),
    pytest.param(
        {PERSIST: "# ip_vs\n;ip_vs\n"}, None, {}, "ipvs-persist", F, "", id="persist-commented"
    ),
    pytest.param(
        {PERSIST: None, "etc/modules-load.d/ipvs.txt": "ip_vs\n"},
        None,
        {},
        "ipvs-persist",
        F,
        "",
        id="persist-not-a-conf-file",
    ),
    pytest.param(
        {PERSIST: None, "usr/lib/modules-load.d/ipvs.conf": "ip_vs\n"},
        None,
        {},
        "ipvs-persist",
        P,
        "/usr/lib/modules-load.d/ipvs.conf",
        id="persist-vendor-dir",
    ),
    pytest.param(
        {PERSIST: Link("/dev/null"), "usr/lib/modules-load.d/ipvs.conf": "ip_vs\n"},
        None,
        {},
        "ipvs-persist",
        F,
        "",
        id="persist-masked-by-etc",
    ),
    pytest.param(
        {
            PERSIST: None,
            "etc/modules-load.d/modules.conf": Link("../modules"),
            "etc/modules": "ip_vs\n",
        },
        None,
        {},
        "ipvs-persist",
        P,
        "modules.conf",
        id="persist-debian-etc-modules",
    ),
    # ipvs-loaded
    pytest.param({}, None, {}, "ipvs-loaded", P, "loaded", id="loaded"),
    pytest.param({"proc/modules": NO_IP_VS}, None, {}, "ipvs-loaded", F, "Ipvs", id="not-loaded"),
    pytest.param(
        {"proc/modules": NO_IP_VS, "sys/module/ip_vs/parameters/conn_tab_bits": "12\n"},
        None,
        {},
        "ipvs-loaded",
        P,
        "loaded",
        id="loaded-builtin-in-sysfs",
    ),
    pytest.param(
        {"proc/modules": None, "sys/module/ip_vs/refcnt": "3\n"},
        None,
        {},
        "ipvs-loaded",
        P,
        "loaded",
        id="loaded-from-sys-module-alone",
    ),
    pytest.param(
        {"proc/modules": None}, None, {}, "ipvs-loaded", F, "Ipvs", id="not-in-sys-module-alone"
    ),
    pytest.param(
        {"proc/modules": None, "sys/module/nvidia/version": None},
        None,
        {},
        "ipvs-loaded",
        U,
        "neither /proc/modules nor /sys/module",
        id="no-proc-modules-no-sys-module",
    ),
    # nvidia-match
    pytest.param({}, None, {}, "nvidia-match", P, f"module {DRIVER} = NVML {DRIVER}", id="nvml"),
    pytest.param(
        {
            f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None,
            f"{LIBDIR}/libnvidia-ml.so.{NEW_DRIVER}": "",
            f"{LIBDIR}/libnvidia-ml.so.1": Link(f"libnvidia-ml.so.{NEW_DRIVER}"),
        },
        None,
        {},
        "nvidia-match",
        F,
        f"module {DRIVER} != NVML {NEW_DRIVER}",
        id="nvml-upgraded-without-reboot",
    ),
    pytest.param(
        {f"{LIBDIR}/libnvidia-ml.so.575.57.08": ""},
        None,
        {},
        "nvidia-match",
        P,
        "",
        id="nvml-soname-link-wins-over-stale-file",
    ),
    pytest.param(
        {f"{LIBDIR}/libnvidia-ml.so.1": None, f"{LIBDIR}/libnvidia-ml.so.{NEW_DRIVER}": ""},
        None,
        {},
        "nvidia-match",
        F,
        NEW_DRIVER,
        id="nvml-unlinked-newest-file",
    ),
    pytest.param(
        {
            "sys/module/nvidia/version": None,
            f"{LIBDIR}/libnvidia-ml.so.1": None,
            f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None,
        },
        None,
        {},
        "nvidia-match",
        S,
        "not a GPU node",
        id="nvml-no-driver-no-gpu",
    ),
    pytest.param(
        {"sys/module/nvidia/version": None}, None, {}, "nvidia-match", W, "not loaded", id="no-mod"
    ),
    pytest.param(
        {f"{LIBDIR}/libnvidia-ml.so.1": None, f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None},
        None,
        {},
        "nvidia-match",
        W,
        "no libnvidia-ml",
        id="nvml-library-missing",
    ),
    pytest.param(
        {
            f"{LIBDIR}/libnvidia-ml.so.1": None,
            f"{LIBDIR}/libnvidia-ml.so.{DRIVER}": None,
            f"run/nvidia/driver/{LIBDIR}/libnvidia-ml.so.{DRIVER}": "",
        },
        None,
        {},
        "nvidia-match",
        P,
        "/run/nvidia/driver",
        id="nvml-in-driver-container",
    ),
    # rke2-unit
    pytest.param({}, None, {}, "rke2-unit", P, "only rke2-agent", id="unit-worker-agent"),
    pytest.param(
        {f"{WANTS}/rke2-server.service": Link(f"/{UNITDIR}/rke2-server.service")},
        None,
        {},
        "rke2-unit",
        F,
        "standalone cluster",
        id="unit-worker-with-server-left-enabled",
    ),
    pytest.param(
        {f"{WANTS}/rke2-agent.service": None},
        None,
        {},
        "rke2-unit",
        F,
        "none",
        id="unit-agent-not-enabled",
    ),
    pytest.param(
        {f"{UNITDIR}/rke2-agent.service": None},
        None,
        {},
        "rke2-unit",
        F,
        "none",
        id="unit-dangling-wants-link",
    ),
    pytest.param(
        {
            f"{WANTS}/rke2-server.service": Link(f"/{UNITDIR}/rke2-server.service"),
            "etc/systemd/system/rke2-server.service": Link("/dev/null"),
        },
        None,
        {},
        "rke2-unit",
        P,
        "",
        id="unit-masked-server-not-counted",
    ),
    pytest.param(
        {},
        replace(CONFIG, role="server"),
        {},
        "rke2-unit",
        F,
        "systemctl enable rke2-server",
        id="unit-wrong-role",
    ),
    pytest.param(
        {
            f"{WANTS}/rke2-agent.service": None,
            f"{WANTS}/rke2-server.service": Link(f"/{UNITDIR}/rke2-server.service"),
        },
        replace(CONFIG, role="server"),
        {},
        "rke2-unit",
        P,
        "only rke2-server",
        id="unit-server-role",
    ),
    # rke2-version
    pytest.param({}, None, {}, "rke2-version", P, "v1.34.3+rke2r1", id="version-equal"),
    pytest.param(
        {"var/lib/rancher/rke2/bin": Link("/var/lib/rancher/rke2/data/v1.35.7-rke2r1-9a8b/bin")},
        None,
        {},
        "rke2-version",
        F,
        "minor differs",
        id="version-minor-ahead",
    ),
    pytest.param(
        {"var/lib/rancher/rke2/bin": Link("/var/lib/rancher/rke2/data/v1.34.5-rke2r1-9a8b/bin")},
        None,
        {},
        "rke2-version",
        W,
        "patch differs",
        id="version-patch-ahead",
    ),
    pytest.param(
        {"var/lib/rancher/rke2/bin": Link("/var/lib/rancher/rke2/data/v1.34.3-rke2r2-9a8b/bin")},
        None,
        {},
        "rke2-version",
        W,
        "v1.34.3+rke2r2",
        id="version-rke2-release-differs",
    ),
    pytest.param(
        {}, Config(), {}, "rke2-version", S, "not compared", id="version-no-control-plane-given"
    ),
    pytest.param(
        {"var/lib/rancher/rke2/bin": None},
        None,
        {("rke2", "--version"): ok("rke2 version v1.34.3+rke2r1 (1b28723)\ngo version go1.24\n")},
        "rke2-version",
        P,
        "",
        id="version-from-rke2-command",
    ),
    pytest.param(
        {"var/lib/rancher/rke2/bin": None}, None, {}, "rke2-version", F, "no RKE2", id="no-rke2"
    ),
    pytest.param(
        {"var/lib/rancher/rke2/bin": None},
        None,
        {("rke2", "--version"): exited(1, "fatal: exec format error")},
        "rke2-version",
        U,
        "exec format error",
        id="version-command-fails",
    ),
    # auto-upgrade
    pytest.param({}, None, {}, "auto-upgrade", P, '"0"', id="auto-upgrade-off"),
    pytest.param(
        apt_periodic(**{"20auto-upgrades": uu("1")}),
        None,
        {},
        "auto-upgrade",
        W,
        "20auto-upgrades",
        id="auto-upgrade-on",
    ),
    pytest.param(
        apt_periodic(**{"99local.conf": uu("1")}),
        None,
        {},
        "auto-upgrade",
        W,
        "99local.conf",
        id="auto-upgrade-later-file-wins",
    ),
    pytest.param(
        apt_periodic(**{"20auto-upgrades": uu("1"), "99local": uu("0")}),
        None,
        {},
        "auto-upgrade",
        P,
        "99local",
        id="auto-upgrade-turned-off-later",
    ),
    pytest.param(
        apt_periodic(**{"20auto-upgrades.dpkg-old": uu("1"), "99local.bak": uu("1")}),
        None,
        {},
        "auto-upgrade",
        P,
        "",
        id="auto-upgrade-ignored-file-names",
    ),
    pytest.param(
        apt_periodic(
            **{"20auto-upgrades": uu("1"), "10periodic": 'APT::Periodic { Enable "0"; };\n'}
        ),
        None,
        {},
        "auto-upgrade",
        P,
        "Enable",
        id="auto-upgrade-periodic-disabled",
    ),
    pytest.param(
        {
            **apt_periodic(**{"20auto-upgrades": uu("1")}),
            "var/lib/dpkg/status": dpkg_status("bash"),
        },
        None,
        {},
        "auto-upgrade",
        P,
        "not installed",
        id="auto-upgrade-package-absent",
    ),
    pytest.param(
        {"etc/apt/apt.conf.d/20auto-upgrades": None},
        None,
        {},
        "auto-upgrade",
        P,
        "default",
        id="auto-upgrade-unset",
    ),
    # package-hold
    pytest.param({}, None, {}, "package-hold", P, "linux-firmware", id="hold-seed-blacklist"),
    pytest.param(
        apt_periodic(**{"50unattended-upgrades": TWO_LINE_BLACKLIST}),
        None,
        {},
        "package-hold",
        W,
        '"nvidia-" is anchored at the start: it misses libnvidia-compute-580',
        id="hold-nvidia-prefix-trap",
    ),
    pytest.param(
        {
            "etc/apt/apt.conf.d/50unattended-upgrades": None,
            "var/lib/dpkg/status": dpkg_status(*PACKAGES, held=PACKAGES),
        },
        None,
        {},
        "package-hold",
        P,
        "",
        id="hold-apt-mark",
    ),
    pytest.param(
        {"etc/apt/apt.conf.d/50unattended-upgrades": None},
        None,
        {},
        "package-hold",
        W,
        f"linux-image-{KERNEL}",
        id="hold-nothing-protected",
    ),
    pytest.param(
        apt_periodic(**{"99reset": "#clear Unattended-Upgrade::Package-Blacklist;\n"}),
        None,
        {},
        "package-hold",
        W,
        "libnvidia-compute-580, linux-generic",
        id="hold-blacklist-cleared-later",
    ),
    pytest.param(
        {"var/lib/dpkg/status": None}, None, {}, "package-hold", S, "not a Debian", id="no-dpkg"
    ),
    # dns-upstream
    pytest.param(
        {}, None, {}, "dns-upstream", P, "/run/systemd/resolve/resolv.conf", id="dns-stub-node"
    ),
    pytest.param(
        {
            "run/systemd/resolve/resolv.conf": "nameserver 10.20.0.53\nnameserver 10.20.0.54\n"
            "nameserver 8.8.8.8\n"
        },
        None,
        {},
        "dns-upstream",
        F,
        "8.8.8.8 outside",
        id="dns-public-resolver-third",
    ),
    pytest.param(
        {
            "etc/resolv.conf": "nameserver 10.20.0.53\n",
            "run/systemd/resolve/resolv.conf": "nameserver 8.8.8.8\n",
        },
        None,
        {},
        "dns-upstream",
        P,
        "/etc/resolv.conf",
        id="dns-non-stub-node-uses-etc",
    ),
    pytest.param(
        {
            "etc/resolv.conf": "nameserver 10.20.0.53\nnameserver 127.0.0.1\n",
            "run/systemd/resolve/resolv.conf": "nameserver 1.1.1.1\n",
        },
        None,
        {},
        "dns-upstream",
        F,
        "/run/systemd/resolve/resolv.conf lists 1.1.1.1",
        id="dns-any-loopback-skips-etc",
    ),
    pytest.param(
        {"run/systemd/resolve/resolv.conf": None},
        None,
        {},
        "dns-upstream",
        F,
        "RKE2 fallback",
        id="dns-no-usable-file-falls-back-to-8888",
    ),
    pytest.param(
        {
            "etc/rancher/rke2/config.yaml": RKE2_CONFIG,
            "etc/rancher/rke2/resolv.conf": "nameserver 10.20.1.1\n",
            "run/systemd/resolve/resolv.conf": "nameserver 8.8.8.8\n",
        },
        None,
        {},
        "dns-upstream",
        P,
        "/etc/rancher/rke2/resolv.conf",
        id="dns-rke2-resolv-conf-setting",
    ),
    pytest.param(
        {"etc/rancher/rke2/config.yaml": "token: [unclosed\n"},
        None,
        {},
        "dns-upstream",
        U,
        "not YAML",
        id="dns-rke2-config-unreadable",
    ),
    pytest.param(
        {}, Config(), {}, "dns-upstream", S, "not checked", id="dns-no-allowed-list-given"
    ),
]


@pytest.mark.parametrize(("changes", "config", "answers", "item", "status", "seen"), ROWS)
def test_item(
    tmp_path: Path,
    changes: Tree,
    config: Config | None,
    answers: dict[tuple[str, ...], CommandResult],
    item: str,
    status: Status,
    seen: str,
) -> None:
    result = check_host(tmp_path, changes, config or CONFIG, FakeRunner(dict(answers)))[item]
    assert result.status is status, result
    assert seen in f"{result.observed} | {result.action}", result
