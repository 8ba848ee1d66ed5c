"""auto-upgrade and package-hold: unattended-upgrades installed a new NVIDIA driver and kernel on
its own. Both items only report (WARN at worst): the host package policy is the host owners'.
Read from the dpkg status and APT's configuration (apt.conf(5), as far as these items need); the
packages, the holds and the blacklist's traps: docs/conformance.md."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import ItemResult, Status, unknown_result
from guard.conformance.platform import DPKG_STATUS
from guard.doors.hostexec import Unknown

PARTS_DIR = "/etc/apt/apt.conf.d"
MAIN_FILE = "/etc/apt/apt.conf"
# As in APT, '#' outside quotes starts a comment unless it is a #clear or #include directive.
_TOKEN = re.compile(
    r'"(?P<str>[^"]*)"|(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<hash>#[^\n]*)'
    r'|(?P<punct>[{};])|(?P<word>[^\s{};"#]+)|\s+',
    re.S,
)
_PART_NAME = re.compile(r"^[A-Za-z0-9_.-]+\Z")


@dataclass(frozen=True, slots=True)
class AptEntry:
    """One assignment in file order: "set" a scalar, add an "item" to a list, "clear" a key."""

    op: Literal["set", "item", "clear"]
    key: str
    value: str
    source: str


def _tokens(text: str) -> Iterator[tuple[str, str]]:
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind is not None and kind != "comment":
            yield kind, m.group(kind)


def _key(parts: Iterable[str]) -> str:
    return "::".join(p for p in parts if p).lower()


def _assign(scopes: list[str], key: str | None, value: str, source: str) -> AptEntry:
    """`"v";` and `Key:: "v";` append to a list; `Key "v";` sets a scalar."""
    if key is None:
        return AptEntry("item", _key(scopes), value, source)
    if key.endswith("::"):
        return AptEntry("item", _key([*scopes, key[:-2]]), value, source)
    return AptEntry("set", _key([*scopes, key]), value, source)


def parse_apt_conf(text: str, source: str = "") -> tuple[AptEntry, ...]:
    scopes: list[str] = []
    key: str | None = None
    out: list[AptEntry] = []
    for kind, value in _tokens(text):
        if kind == "hash":
            m = re.match(r"#clear\s+([^;]+)", value)
            names = m.group(1).split() if m else []
            out.extend(AptEntry("clear", _key([*scopes, n]), "", source) for n in names)
        elif kind == "word" and key is None:
            key = value
        elif kind in ("str", "word"):
            out.append(_assign(scopes, key, value, source))
            key = None
        elif value == "{":
            scopes.append((key or "").removesuffix("::"))
            key = None
        elif value == "}":
            scopes = scopes[:-1]
        else:  # ";" ends a statement; a bare "Key;" sets an empty value
            if key is not None:
                out.append(_assign(scopes, key, "", source))
            key = None
    return tuple(out)


def _since_clear(entries: Iterable[AptEntry], key: str, op: str) -> list[AptEntry]:
    """The `op` entries of `key` (case-insensitive) in file order, after its last #clear."""
    key = key.lower()
    found: list[AptEntry] = []
    for e in entries:
        if e.op == "clear" and (key == e.key or key.startswith(e.key + "::")):
            found = []
        elif e.op == op and e.key == key:
            found.append(e)
    return found


def scalar(entries: Iterable[AptEntry], key: str) -> AptEntry | None:
    """The last assignment of `key`, or None when unset or cleared."""
    found = _since_clear(entries, key, "set")
    return found[-1] if found else None


def items(entries: Iterable[AptEntry], key: str) -> tuple[AptEntry, ...]:
    """The list `key` after every file: items appended in order, emptied by #clear."""
    return tuple(_since_clear(entries, key, "item"))


def is_part_name(name: str) -> bool:
    return bool(_PART_NAME.match(name)) and ("." not in name or name.endswith(".conf"))


def read_apt_conf(fs: HostFS) -> tuple[AptEntry, ...]:
    entries: list[AptEntry] = []
    paths = [f"{PARTS_DIR}/{n}" for n in fs.listdir(PARTS_DIR) if is_part_name(n)]
    for path in [*paths, MAIN_FILE]:
        text = fs.read_text(path)
        if text is not None:
            entries.extend(parse_apt_conf(text, path))
    return tuple(entries)


BLACKLIST_KEY = "Unattended-Upgrade::Package-Blacklist"
PERIODIC_KEY = "APT::Periodic::Unattended-Upgrade"
# Packages whose unattended upgrade changes the running kernel or the GPU driver.
KERNEL_PACKAGES = re.compile(
    r"^linux-(image|modules|headers|objects|signatures|generic|virtual|lowlatency|hwe|oem"
    r"|nvidia|restricted-modules)"
)
DRIVER_PACKAGES = re.compile(r"^(nvidia-|libnvidia-|xserver-xorg-video-nvidia-)")
NOT_DRIVER = re.compile(r"^(lib)?nvidia-container")  # the container toolkit has its own cadence
SHOWN = 6


@dataclass(frozen=True, slots=True)
class Package:
    name: str
    held: bool


@dataclass(frozen=True, slots=True)
class AptFacts:
    conf: tuple[AptEntry, ...] | Unknown
    packages: tuple[Package, ...] | Unknown | None  # None: no dpkg database


def parse_dpkg_status(text: str) -> tuple[Package, ...]:
    """Installed packages; `held` is dpkg's "hold" selection (what `apt-mark hold` sets)."""
    out: dict[str, Package] = {}
    for para in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", para, re.M))
        status = fields.get("Status", "").split()
        if "Package" not in fields or len(status) != 3:
            continue
        if status[2] in ("not-installed", "config-files"):
            continue
        name = fields["Package"]
        out[name] = Package(name, status[0] == "hold" or (name in out and out[name].held))
    return tuple(out[n] for n in sorted(out))


def is_critical(name: str) -> bool:
    driver = DRIVER_PACKAGES.match(name) and not NOT_DRIVER.match(name)
    return bool(KERNEL_PACKAGES.match(name) or driver)


def _read_packages(fs: HostFS) -> tuple[Package, ...] | None:
    text = fs.read_text(DPKG_STATUS)
    return None if text is None else parse_dpkg_status(text)


def read_apt(fs: HostFS) -> AptFacts:
    return AptFacts(
        conf=guarded(lambda: read_apt_conf(fs), "/etc/apt/apt.conf.d"),
        packages=guarded(lambda: _read_packages(fs), DPKG_STATUS),
    )


def _is_off(value: str) -> bool:
    try:
        return int(value.strip() or "0") == 0
    except ValueError:
        return False  # "always" and friends run it


def judge_auto_upgrade(facts: AptFacts) -> ItemResult:
    name = "auto-upgrade"
    if isinstance(facts.conf, Unknown):
        return unknown_result(name, facts.conf)
    pkgs = facts.packages
    if isinstance(pkgs, tuple) and not any(p.name == "unattended-upgrades" for p in pkgs):
        return ItemResult(name, Status.PASS, "unattended-upgrades not installed")
    enable = scalar(facts.conf, "APT::Periodic::Enable")
    if enable is not None and _is_off(enable.value):
        return ItemResult(name, Status.PASS, f'APT::Periodic::Enable "0" ({enable.source})')
    run = scalar(facts.conf, PERIODIC_KEY)
    if run is None:
        return ItemResult(name, Status.PASS, f'{PERIODIC_KEY} not set (default "0")')
    seen = f'{PERIODIC_KEY} "{run.value}" ({run.source})'
    if _is_off(run.value):
        return ItemResult(name, Status.PASS, seen)
    fix = f'report only; to stop it set "0" in {run.source}, or hold the packages (package-hold)'
    return ItemResult(name, Status.WARN, seen + ": packages are upgraded unattended", fix)


def _shown(names: list[str]) -> str:
    more = f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def _compile(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error:
            continue  # unattended-upgrades would fail on it too; it protects nothing
    return tuple(compiled)


def _trap_notes(unprotected: list[str], patterns: tuple[re.Pattern[str], ...]) -> list[str]:
    """Explain entries that look like they cover a package but cannot (anchored at the start)."""
    notes = []
    for pat in patterns:
        missed = [n for n in unprotected if pat.search(n) and not pat.match(n)]
        if missed:
            notes.append(f'"{pat.pattern}" is anchored at the start: it misses {_shown(missed)}')
    return notes


def _collateral(pkgs: tuple[Package, ...], patterns: tuple[re.Pattern[str], ...]) -> str:
    extra = [
        p.name for p in pkgs if not is_critical(p.name) and any(r.match(p.name) for r in patterns)
    ]
    return f"; the blacklist also holds back {_shown(extra)}" if extra else ""


def judge_package_hold(facts: AptFacts) -> ItemResult:
    name = "package-hold"
    conf, pkgs = facts.conf, facts.packages
    if isinstance(conf, Unknown):
        return unknown_result(name, conf)
    if isinstance(pkgs, Unknown):
        return unknown_result(name, pkgs)
    if pkgs is None:
        return ItemResult(name, Status.WARN, f"no {DPKG_STATUS}: not checked")
    patterns = _compile(tuple(e.value for e in items(conf, BLACKLIST_KEY)))
    critical = [p for p in pkgs if is_critical(p.name)]
    unprotected = [
        p.name for p in critical if not p.held and not any(r.match(p.name) for r in patterns)
    ]
    tail = _collateral(pkgs, patterns)
    if not critical:
        return ItemResult(name, Status.PASS, f"no kernel or driver packages installed{tail}")
    if not unprotected:
        seen = f"{len(critical)} kernel/driver packages held or blacklisted{tail}"
        return ItemResult(name, Status.PASS, seen)
    notes = "".join(f"; {n}" for n in _trap_notes(unprotected, patterns))
    seen = f"not held or blacklisted: {_shown(unprotected)}{notes}{tail}"
    fix = f"apt-mark hold them, or list their prefixes in {BLACKLIST_KEY} (libnvidia- apart)"
    return ItemResult(name, Status.WARN, seen, fix)
