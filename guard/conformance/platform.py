"""Which items apply to this node: is it an RKE2 node, which mode kube-proxy runs in, is it a dpkg
host. Read from files only (where: docs/conformance.md); `--platform` and `--kube-proxy-mode`
replace the reading."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

import yaml

from guard.conformance.hostfs import HostFS, guarded
from guard.doors.hostexec import Unknown

PlatformChoice = Literal["auto", "rke2", "other"]
ProxyChoice = Literal["auto", "ipvs", "iptables", "nftables", "none"]
PLATFORMS: tuple[PlatformChoice, ...] = get_args(PlatformChoice)
PROXY_MODES: tuple[ProxyChoice, ...] = get_args(ProxyChoice)

# Any of these makes a node an RKE2 node: the data and config directories, or an installed unit.
RKE2_MARKERS = (
    "/var/lib/rancher/rke2",
    "/etc/rancher/rke2",
    *(
        f"{d}/{unit}.service"
        for d in ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system")
        for unit in ("rke2-agent", "rke2-server")
    ),
)
RKE2_CONFIG = "/etc/rancher/rke2/config.yaml"
RKE2_CONFIG_D = "/etc/rancher/rke2/config.yaml.d"
RKE2_PROXY_MANIFEST = "/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml"
KUBELET_PODS = "/var/lib/kubelet/pods"
KUBEADM_PROXY_CONFIG = "volumes/kubernetes.io~configmap/kube-proxy/config.conf"
DPKG_STATUS = "/var/lib/dpkg/status"
DEFAULT_MODE = "iptables"  # kube-proxy's default on Linux when no mode is given


@dataclass(frozen=True, slots=True)
class Platform:
    """What decides which items apply; each `*_source` says where it was read or that it was set."""

    rke2: bool
    rke2_source: str
    proxy_mode: str | Unknown  # ipvs, iptables, nftables, none (no kube-proxy on the node)
    proxy_source: str
    dpkg: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "rke2": self.rke2,
            "rke2_source": self.rke2_source,
            "kube_proxy_mode": str(self.proxy_mode),
            "kube_proxy_source": self.proxy_source,
            "dpkg": self.dpkg,
        }


def rke2_configs(fs: HostFS) -> list[dict[str, object]]:
    """config.yaml, then config.yaml.d/*.yaml in name order, as RKE2 merges them; OSError and
    yaml.YAMLError propagate."""
    paths = [RKE2_CONFIG] + [
        f"{RKE2_CONFIG_D}/{n}" for n in fs.listdir(RKE2_CONFIG_D) if n.endswith(".yaml")
    ]
    configs = []
    for path in paths:
        text = fs.read_text(path)
        try:
            loaded = yaml.safe_load(text) if text else None
        except yaml.YAMLError as exc:
            raise yaml.YAMLError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from None
        if isinstance(loaded, dict):
            configs.append(loaded)
    return configs


def mode_in_args(args: list[str]) -> str | None:
    """The last ``--proxy-mode`` in a kube-proxy argv (``--proxy-mode=ipvs`` or two words)."""
    mode = None
    for i, arg in enumerate(args):
        m = re.fullmatch(r"--?proxy-mode(?:=(.*))?", arg)
        if m and m.group(1) is not None:
            mode = m.group(1)
        elif m and i + 1 < len(args):
            mode = args[i + 1]
    return None if mode is None else (mode.strip().lower() or DEFAULT_MODE)


def manifest_mode(text: str) -> str | None:
    """kube-proxy's mode in a static pod manifest; None when it has no kube-proxy container."""
    pod = yaml.safe_load(text)
    containers = pod.get("spec", {}).get("containers", []) if isinstance(pod, dict) else []
    for c in containers if isinstance(containers, list) else []:
        if isinstance(c, dict) and c.get("name") == "kube-proxy":
            argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
            return mode_in_args(argv) or DEFAULT_MODE
    return None


def rke2_config_mode(configs: list[dict[str, object]]) -> str | None:
    """The mode the RKE2 configuration asks for at the next start; None when it says nothing."""
    mode, disabled = None, False
    for config in configs:
        if isinstance(config.get("disable-kube-proxy"), bool):
            disabled = bool(config["disable-kube-proxy"])
        for key in ("kube-proxy-arg", "kube-proxy-arg+"):
            value = config.get(key)
            args = value if isinstance(value, list) else [value] if isinstance(value, str) else []
            mode = mode_in_args(["--" + str(a).lstrip("-") for a in args]) or mode
    return "none" if disabled else mode


def kubeadm_modes(fs: HostFS) -> list[tuple[str, str]]:
    """(mode, path) of every kube-proxy ConfigMap volume kubelet keeps for a pod on this node."""
    found = []
    for uid in fs.listdir(KUBELET_PODS):
        path = f"{KUBELET_PODS}/{uid}/{KUBEADM_PROXY_CONFIG}"
        text = fs.read_text(path)
        config = yaml.safe_load(text) if text is not None else None
        if isinstance(config, dict) and config.get("kind") == "KubeProxyConfiguration":
            found.append((str(config.get("mode") or DEFAULT_MODE).lower(), path))
    return found


def detect_proxy_mode(fs: HostFS, rke2: bool) -> tuple[str, str] | Unknown:
    """(mode, where it was read), or Unknown for a file that is not YAML; OSError propagates."""
    try:
        sources = _proxy_sources(fs, rke2)
    except yaml.YAMLError as exc:
        return Unknown("kube-proxy's configuration", str(exc).splitlines()[0])
    if not sources:
        looked = f"{RKE2_PROXY_MANIFEST}, {KUBELET_PODS}/*/{KUBEADM_PROXY_CONFIG}"
        return "none", f"no kube-proxy found ({looked})"
    return next((source for source in sources if source[0] == "ipvs"), sources[0])


def _proxy_sources(fs: HostFS, rke2: bool) -> list[tuple[str, str]]:
    text = fs.read_text(RKE2_PROXY_MANIFEST)
    manifest = manifest_mode(text) if text else None
    config = rke2_config_mode(rke2_configs(fs)) if rke2 else None
    found = ((manifest, RKE2_PROXY_MANIFEST), (config, RKE2_CONFIG))
    return [(mode, path) for mode, path in found if mode] + kubeadm_modes(fs)


def detect_rke2(fs: HostFS) -> tuple[bool, str]:
    for marker in RKE2_MARKERS:
        if fs.exists(marker):
            return True, f"found {marker}"
    return False, "no /var/lib/rancher/rke2, /etc/rancher/rke2 or rke2 unit file"


def read_platform(fs: HostFS, platform: PlatformChoice, proxy: ProxyChoice) -> Platform:
    if platform == "auto":
        rke2, rke2_source = detect_rke2(fs)
    else:
        rke2, rke2_source = platform == "rke2", f"--platform {platform}"
    mode: str | Unknown = proxy
    source = f"--kube-proxy-mode {proxy}"
    if proxy == "auto":
        read = guarded(lambda: detect_proxy_mode(fs, rke2), "kube-proxy's configuration")
        mode, source = (read, "") if isinstance(read, Unknown) else read
    return Platform(rke2, rke2_source, mode, source, fs.exists(DPKG_STATUS))
