"""rke2-unit and rke2-version: the node runs the RKE2 service of its role, at the control plane's
version (an unpinned install takes the newest release, outside the version-skew policy)."""

from __future__ import annotations

from dataclasses import dataclass

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import ItemResult, Role, Status, unknown_result
from guard.doors.hostexec import Runner, Unknown
from guard.wire import parse_version

UNITS = ("rke2-agent", "rke2-server")
SYSTEMD_DIR = "/etc/systemd/system"
# rke2 points this at data/<version>-<hash>/bin of the runtime it started last.
BIN_LINK = "/var/lib/rancher/rke2/bin"


@dataclass(frozen=True, slots=True)
class Rke2Facts:
    enabled: frozenset[str] | Unknown
    version: str | Unknown | None  # raw text; None: no RKE2 found
    version_source: str = ""


def enabled_units(fs: HostFS) -> frozenset[str] | Unknown:
    """RKE2 units enabled the way `systemctl enable` does it: a *.wants/ or *.requires/ link in
    /etc/systemd/system that leads to an existing unit file, and the unit not masked."""
    if not fs.exists(SYSTEMD_DIR):
        return Unknown(SYSTEMD_DIR, "not under the root")
    enabled = set()
    for entry in fs.listdir(SYSTEMD_DIR):
        if not entry.endswith((".wants", ".requires")):
            continue
        for name in fs.listdir(f"{SYSTEMD_DIR}/{entry}"):
            unit = name.removesuffix(".service")
            if unit in UNITS and fs.exists(f"{SYSTEMD_DIR}/{entry}/{name}"):
                enabled.add(unit)
    masked = {u for u in UNITS if fs.readlink(f"{SYSTEMD_DIR}/{u}.service") == "/dev/null"}
    return frozenset(enabled - masked)


def read_version(fs: HostFS, runner: Runner) -> tuple[str | Unknown | None, str]:
    """The data directory behind BIN_LINK, else the first line of `rke2 --version`."""
    link = fs.readlink(BIN_LINK)
    if link:
        return link, BIN_LINK
    result = runner.run(("rke2", "--version"))
    if result.ok:
        return (result.stdout.strip().splitlines() or [""])[0], "rke2 --version"
    if result.missing:
        return None, ""
    return result.as_unknown(), "rke2 --version"


def read_rke2(fs: HostFS, runner: Runner, with_version: bool = True) -> Rke2Facts:
    """`with_version=False` when rke2-version does not apply: no `rke2 --version` for nothing."""
    enabled = guarded(lambda: enabled_units(fs), SYSTEMD_DIR)
    if not with_version:
        return Rke2Facts(enabled, None)
    version = guarded(lambda: read_version(fs, runner), BIN_LINK)
    if isinstance(version, Unknown):
        return Rke2Facts(enabled, version)
    return Rke2Facts(enabled, *version)


# The role's unit not enabled: the node would not rejoin after a reboot.
def judge_unit(facts: Rke2Facts, role: Role) -> ItemResult:
    name = "rke2-unit"
    if isinstance(facts.enabled, Unknown):
        return unknown_result(name, facts.enabled)
    want = "rke2-agent" if role == "worker" else "rke2-server"
    other = "rke2-server" if want == "rke2-agent" else "rke2-agent"
    shown = ", ".join(sorted(facts.enabled)) or "none"
    if facts.enabled == {want}:
        return ItemResult(name, Status.PASS, f"{role}: only {want} enabled")
    steps = []
    if other in facts.enabled:
        steps.append(f"systemctl disable {other}")
    if want not in facts.enabled:
        steps.append(f"systemctl enable {want}")
    why = f" (a {role} with {other} enabled boots as a standalone cluster)"
    seen = f"{role}: enabled RKE2 units: {shown}" + (why if other in facts.enabled else "")
    return ItemResult(name, Status.FAIL, seen, "; ".join(steps))


def judge_version(facts: Rke2Facts, control_plane: str) -> ItemResult:
    name = "rke2-version"
    raw = facts.version
    if isinstance(raw, Unknown):
        return unknown_result(name, raw)
    if raw is None:
        seen = f"no RKE2 found (no {BIN_LINK}, no rke2 command)"
        return ItemResult(name, Status.FAIL, seen, "install RKE2")
    node = parse_version(raw)
    if node is None:
        return ItemResult(name, Status.UNKNOWN, f"no version in {raw!r} ({facts.version_source})")
    want = parse_version(control_plane)
    if want is None:
        return ItemResult(name, Status.UNKNOWN, f"no version in {control_plane!r} (control plane)")
    seen = f"node {node}, control plane {want}"
    pin = f"reinstall RKE2 pinned to {want} (INSTALL_RKE2_VERSION); unpinned installs take latest"
    if (node.major, node.minor) != (want.major, want.minor):
        return ItemResult(name, Status.FAIL, f"{seen}: minor differs", pin)
    same_release = node.release is None or want.release is None or node.release == want.release
    if node.patch != want.patch or not same_release:
        return ItemResult(name, Status.WARN, f"{seen}: patch differs", "align at the next upgrade")
    return ItemResult(name, Status.PASS, seen)
