"""A small reader of APT's configuration language (apt.conf(5)), enough for APT::Periodic::*
scalars and the Unattended-Upgrade::Package-Blacklist list; keys are case-insensitive, files
are read in APT's order (docs/conformance.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from guard.conformance.hostfs import HostFS

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


def _cleared(entry: AptEntry, key: str) -> bool:
    return entry.op == "clear" and (key == entry.key or key.startswith(entry.key + "::"))


def scalar(entries: Iterable[AptEntry], key: str) -> AptEntry | None:
    """The last assignment of `key` (case-insensitive), or None when unset or cleared."""
    key = key.lower()
    last: AptEntry | None = None
    for e in entries:
        if _cleared(e, key):
            last = None
        elif e.op == "set" and e.key == key:
            last = e
    return last


def items(entries: Iterable[AptEntry], key: str) -> tuple[AptEntry, ...]:
    """The list `key` after every file: items appended in order, emptied by #clear."""
    key = key.lower()
    found: list[AptEntry] = []
    for e in entries:
        if _cleared(e, key):
            found = []
        elif e.op == "item" and e.key == key:
            found.append(e)
    return tuple(found)


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
