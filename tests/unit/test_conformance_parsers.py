"""The pure readers behind the items: APT configuration, dpkg status, versions, resolv.conf choice,
and path resolution inside the host root."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.conformance.apt import (
    Package,
    is_critical,
    is_part_name,
    items,
    parse_apt_conf,
    parse_dpkg_status,
    scalar,
)
from guard.conformance.dns import (
    ETC_RESOLV,
    FALLBACK,
    SYSTEMD_RESOLV,
    choose,
    is_global_unicast,
    is_usable,
    kubelet_override,
    override_of,
)
from guard.conformance.hostfs import HostFS
from guard.conformance.ipvs import dep_entry, lists_module, module_name
from guard.conformance.nvidia import pick_nvml
from guard.conformance.platform import mode_in_args, rke2_config_mode
from guard.wire import Version, parse_version

BLACKLIST = "Unattended-Upgrade::Package-Blacklist"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            'Unattended-Upgrade::Package-Blacklist { "linux-"; "nvidia-"; };',
            ["linux-", "nvidia-"],
            id="block",
        ),
        pytest.param(
            'Unattended-Upgrade { Package-Blacklist { "libnvidia-"; }; };',
            ["libnvidia-"],
            id="nested-scopes",
        ),
        pytest.param(
            'Unattended-Upgrade::Package-Blacklist:: "nvidia-";\n'
            'unattended-upgrade::package-blacklist:: "libnvidia-";',
            ["nvidia-", "libnvidia-"],
            id="double-colon-items-case-insensitive",
        ),
        pytest.param(
            'Unattended-Upgrade::Package-Blacklist {\n//  "linux-";\n# "nvidia-";\n'
            '/* "x-"; */ "libstdc\\+\\+6$"; };',
            ["libstdc\\+\\+6$"],
            id="commented-entries-do-not-count",
        ),
        pytest.param(
            'Unattended-Upgrade::Package-Blacklist { "linux-"; };\n'
            "#clear Unattended-Upgrade::Package-Blacklist;\n"
            'Unattended-Upgrade::Package-Blacklist { "nvidia-"; };',
            ["nvidia-"],
            id="clear-then-add",
        ),
        pytest.param(
            'Unattended-Upgrade::Allowed-Origins { "${distro_id}:${distro_codename}-security"; };',
            [],
            id="other-lists-ignored",
        ),
    ],
)
def test_blacklist_items(text: str, expected: list[str]) -> None:
    assert [e.value for e in items(parse_apt_conf(text), BLACKLIST)] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('APT::Periodic::Unattended-Upgrade "1";', "1", id="flat"),
        pytest.param('APT::Periodic { Unattended-Upgrade "0"; };', "0", id="scoped"),
        pytest.param(
            'APT::Periodic::Unattended-Upgrade "1";\nAPT::Periodic::Unattended-Upgrade "0";',
            "0",
            id="last-wins",
        ),
        pytest.param("APT::Periodic::Unattended-Upgrade 1;", "1", id="unquoted"),
        pytest.param(
            'APT::Periodic::Unattended-Upgrade "1"; #clear APT::Periodic;', None, id="clear"
        ),
        pytest.param('// APT::Periodic::Unattended-Upgrade "1";', None, id="comment"),
    ],
)
def test_periodic_scalar(text: str, expected: str | None) -> None:
    entry = scalar(parse_apt_conf(text), "apt::periodic::unattended-upgrade")
    assert (entry.value if entry else None) == expected


def test_dpkg_status_installed_and_held() -> None:
    text = (
        "Package: linux-generic\nStatus: hold ok installed\nVersion: 5.15.0.179.1\n\n"
        "Package: nvidia-driver-580\nStatus: install ok installed\n"
        "Description: NVIDIA driver metapackage\n the driver\n\n"
        "Package: nvidia-driver-575\nStatus: deinstall ok config-files\n\n"
        "Package: libnvidia-compute-580\nStatus: install ok half-configured\n"
    )
    pkgs = {p.name: p.held for p in parse_dpkg_status(text)}
    assert pkgs == {
        "linux-generic": True,
        "nvidia-driver-580": False,
        "libnvidia-compute-580": False,
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("v1.34.3+rke2r1", Version(1, 34, 3, 1), id="rke2"),
        pytest.param(
            "/var/lib/rancher/rke2/data/v1.33.8-rke2r1-1b2872361ec5/bin",
            Version(1, 33, 8, 1),
            id="data-dir",
        ),
        pytest.param("v1.34.3", Version(1, 34, 3), id="kubernetes"),
        pytest.param(
            "rke2 version v1.35.7+rke2r2 (4c5e2a1f)\ngo version go1.24.4",
            Version(1, 35, 7, 2),
            id="command",
        ),
        pytest.param("stable", None, id="none"),
    ],
)
def test_parse_version(text: str, expected: Version | None) -> None:
    assert parse_version(text) == expected


STUB = "nameserver 127.0.0.53\noptions edns0 trust-ad\n"


@pytest.mark.parametrize(
    ("etc", "systemd", "expected"),
    [
        pytest.param(
            STUB,
            "nameserver 10.0.0.2\n",
            ("/run/systemd/resolve/resolv.conf", ("10.0.0.2",)),
            id="stub",
        ),
        pytest.param(
            "nameserver 10.0.0.3\n",
            "nameserver 10.0.0.2\n",
            ("/etc/resolv.conf", ("10.0.0.3",)),
            id="plain",
        ),
        pytest.param(
            "search corp\n",
            "nameserver 10.0.0.2\n",
            ("/run/systemd/resolve/resolv.conf", ("10.0.0.2",)),
            id="no-nameserver-skipped",
        ),
        pytest.param(
            " nameserver 10.0.0.3\n",
            None,
            (FALLBACK, ("8.8.8.8",)),
            id="indented-line-not-a-nameserver",
        ),
        pytest.param(STUB, STUB, (FALLBACK, ("8.8.8.8",)), id="both-loopback"),
        pytest.param("nameserver fe80::1%eth0\n", None, (FALLBACK, ("8.8.8.8",)), id="scoped-ipv6"),
        pytest.param(
            "nameserver 2001:db8::53\n", None, ("/etc/resolv.conf", ("2001:db8::53",)), id="ipv6"
        ),
    ],
)
def test_rke2_resolv_conf_choice(
    etc: str, systemd: str | None, expected: tuple[str, tuple[str, ...]]
) -> None:
    texts = {"/etc/resolv.conf": etc, "/run/systemd/resolve/resolv.conf": systemd}
    assert choose(None, texts) == expected
    assert is_usable(etc) == (expected[0] == "/etc/resolv.conf")


def test_absolute_links_resolve_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text("ID=ubuntu\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").symlink_to("/usr/lib/os-release")
    (tmp_path / "lib").symlink_to("/usr/lib")
    (tmp_path / "escape").symlink_to("../../../../..")
    fs = HostFS(tmp_path)
    assert fs.read_text("/etc/os-release") == "ID=ubuntu\n"
    assert fs.read_text("/lib/os-release") == "ID=ubuntu\n"
    assert fs.read_text("/escape/etc/os-release") == "ID=ubuntu\n"  # ".." stops at the root
    assert fs.read_text("/etc/missing") is None


def test_apt_conf_entries_in_file_order() -> None:
    text = (
        'APT::Periodic::Unattended-Upgrade "1"; // daily\n'
        'Unattended-Upgrade::Package-Blacklist { "nvidia-"; /* driver */ "linux-"; };'
    )
    assert [(e.op, e.key, e.value) for e in parse_apt_conf(text)] == [
        ("set", "apt::periodic::unattended-upgrade", "1"),
        ("item", "unattended-upgrade::package-blacklist", "nvidia-"),
        ("item", "unattended-upgrade::package-blacklist", "linux-"),
    ]


def test_apt_reads_only_part_names_apt_reads() -> None:
    names = ("50unattended-upgrades", "99local.conf", "20auto.dpkg-old", "a b")
    assert [n for n in names if is_part_name(n)] == ["50unattended-upgrades", "99local.conf"]


def test_dpkg_status_skips_removed_packages() -> None:
    text = (
        "Package: a\nStatus: hold ok installed\n\nPackage: b\nStatus: deinstall ok config-files\n"
    )
    assert parse_dpkg_status(text) == (Package("a", True),)


def test_critical_packages_are_kernel_and_driver_not_firmware_or_toolkit() -> None:
    names = (
        "linux-image-generic",
        "linux-firmware",
        "libnvidia-compute-580",
        "nvidia-container-toolkit",
    )
    assert [n for n in names if is_critical(n)] == ["linux-image-generic", "libnvidia-compute-580"]


def test_global_unicast_as_go_has_it() -> None:
    addresses = ("10.0.0.53", "127.0.0.53", "fe80::1", "nonsense")
    assert [is_global_unicast(a) for a in addresses] == [True, False, False, False]


def test_resolv_conf_choice_skips_a_stub_on_rke2_only() -> None:
    texts = {
        ETC_RESOLV: "nameserver 127.0.0.53\n",
        SYSTEMD_RESOLV: "nameserver 10.0.0.2\nnameserver 8.8.8.8\n",
    }
    assert choose(None, texts) == (SYSTEMD_RESOLV, ("10.0.0.2", "8.8.8.8"))
    assert choose(None, {ETC_RESOLV: "nameserver 127.0.0.53\n"}, rke2=False) == (
        ETC_RESOLV,
        ("127.0.0.53",),
    )


def test_resolv_conf_settings_the_last_one_wins() -> None:
    assert override_of([{"resolv-conf": "/a"}, {"kubelet-arg+": ["resolv-conf=/b"]}]) == "/b"
    systemd = "/run/systemd/resolve/resolv.conf"
    assert kubelet_override(f"resolvConf: {systemd}\n", None) == systemd
    flags = 'KUBELET_KUBEADM_ARGS="--resolv-conf=/b --v=2"\n'
    assert kubelet_override("resolvConf: /a\n", flags) == "/b"


def test_module_index_names_as_modprobe_has_them() -> None:
    assert module_name("kernel/net/netfilter/ipvs/ip_vs.ko.zst") == "ip_vs"
    dep = "kernel/net/netfilter/ipvs/ip_vs.ko: kernel/net/x.ko\n"
    assert dep_entry(dep, "ip_vs") == "kernel/net/netfilter/ipvs/ip_vs.ko"
    assert (
        lists_module("# for kube-proxy\nip_vs\n", "ip_vs"),
        lists_module("#ip_vs\n", "ip_vs"),
    ) == (
        True,
        False,
    )


def test_nvml_version_is_the_linked_file_else_the_newest() -> None:
    names = ("libnvidia-ml.so.1", "libnvidia-ml.so.580.126.09", "libnvidia-ml.so.580.159.03")
    linked = {"/usr/lib": "libnvidia-ml.so.580.126.09"}
    assert pick_nvml({"/usr/lib": names}, linked) == ("580.126.09", "/usr/lib")
    newest = {"/usr/lib": (*names, "libnvidia-ml.so.575.57.08")}
    assert pick_nvml(newest, {}) == ("580.159.03", "/usr/lib")


def test_kube_proxy_mode_the_last_flag_and_rke2_config() -> None:
    assert mode_in_args(["kube-proxy", "--proxy-mode=iptables", "--proxy-mode", "IPVS"]) == "ipvs"
    arg = {"kube-proxy-arg": ["proxy-mode=ipvs"]}
    assert (rke2_config_mode([arg]), rke2_config_mode([{}])) == ("ipvs", None)
    disabled = [{"kube-proxy-arg": "proxy-mode=ipvs"}, {"disable-kube-proxy": True}]
    assert rke2_config_mode(disabled) == "none"
