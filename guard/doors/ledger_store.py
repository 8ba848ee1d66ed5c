"""Where the fault ledger lives: one ConfigMap, plus archives that keep it below the object limit.

Appends are read-modify-write with the read ``resourceVersion`` (409: again). Before a write would
pass `Settings.ledger_archive_bytes` the oldest lines move to ``<ledger>-archive-<n>``, written
first: a line may be in both places, never in neither; readers count it once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from guard import ledger
from guard.doors.kube import AlreadyExists, Conflict, Kube, KubeError, Refused
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    LEDGER_ARCHIVE_COMPONENT,
    ledger_archive_pattern,
)

ARCHIVE_SELECTOR = f"{APP_LABEL}={APP_NAME},{COMPONENT_LABEL}={LEDGER_ARCHIVE_COMPONENT}"
_OLDEST = datetime.min.replace(tzinfo=UTC)


class LedgerWriteError(KubeError):
    """The ledger could not take the line (refused or still conflicting); one line."""


def archive_name(ledger_name: str, n: int) -> str:
    return f"{ledger_name}-archive-{n}"


def archive_index(ledger_name: str, name: str) -> int | None:
    """n of ``<ledger>-archive-<n>``, else None."""
    if not re.fullmatch(ledger_archive_pattern(ledger_name), name):
        return None
    return int(name.rsplit("-", 1)[1])


def size_of(data: Mapping[str, str]) -> int:
    """Bytes the API counts against the object limit, keys included to be safe."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


@dataclass(frozen=True, slots=True)
class Split:
    keep: dict[str, str]
    moved: dict[str, str]
    lines: int


def split_oldest(data: Mapping[str, str], target_bytes: int) -> Split:
    """Move the oldest lines out until what stays is at most `target_bytes`; a line without a
    time (a person's note) moves with the line before it. Order within a node is kept."""
    rows: list[tuple[datetime, str, int, str]] = []
    for node, text in data.items():
        age = _OLDEST
        for i, raw in enumerate(text.splitlines()):
            entry = ledger.parse_line(node, raw).entry
            age = entry.at if entry is not None else age
            rows.append((age, node, i, raw))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    size = size_of(data)
    moving: set[tuple[str, int]] = set()
    for _, node, i, raw in rows:
        if size <= target_bytes:
            break
        moving.add((node, i))
        size -= len(raw.encode()) + 1
    keep: dict[str, str] = {}
    moved: dict[str, str] = {}
    for node, text in data.items():
        for i, raw in enumerate(text.splitlines()):
            side = moved if (node, i) in moving else keep
            side[node] = side.get(node, "") + raw + "\n"
    return Split(keep, moved, len(moving))


def ledger_lines(
    ledger_data: Mapping[str, object], archives: Iterable[Mapping[str, Any]]
) -> tuple[ledger.LedgerLine, ...]:
    """The ledger's lines after its archives' (oldest first, a line stored twice counted once),
    by node, file order within a node. A value that is not text (a hand-made file's) stays one
    unreadable line of its key."""
    text = {str(k): v for k, v in ledger_data.items() if isinstance(v, str)}
    odd = {k: v for k, v in ledger_data.items() if not isinstance(v, str)}
    kept: dict[str, dict[str, str]] = {}  # node → its lines, stripped → as stored
    for data in [*(_text_data(cm) for cm in sorted(archives, key=_index_of)), text]:
        for node in sorted(data):
            for raw in data[node].splitlines():
                if raw.strip():
                    kept.setdefault(node, {}).setdefault(raw.strip(), raw)
    merged = {node: "".join(f"{raw}\n" for raw in found.values()) for node, found in kept.items()}
    lines = ledger.parse_ledger(merged) + ledger.parse_ledger(odd)
    return tuple(sorted(lines, key=lambda ln: ln.node))  # stable: file order within a node


def is_archive(cm: Mapping[str, Any], ledger_name: str) -> bool:
    """Both labels of `ARCHIVE_SELECTOR` and the name ``<ledger>-archive-<n>``, not one alone."""
    meta = cm.get("metadata")
    labels = (meta.get("labels") if isinstance(meta, Mapping) else None) or {}
    return (
        labels.get(APP_LABEL) == APP_NAME
        and labels.get(COMPONENT_LABEL) == LEDGER_ARCHIVE_COMPONENT
        and archive_index(ledger_name, _name(cm)) is not None
    )


def _text_data(cm: Mapping[str, object]) -> dict[str, str]:
    data = cm.get("data")
    if not isinstance(data, Mapping):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


def _index_of(cm: Mapping[str, object]) -> int:
    found = re.search(r"-archive-([0-9]+)\Z", _name(cm))
    return int(found[1]) if found else 0


def read_archives(kube: Kube, namespace: str, ledger_name: str) -> list[dict[str, Any]]:
    """The ledger's archive ConfigMaps (by label, then by name), oldest first."""
    found = kube.configmaps(namespace, ARCHIVE_SELECTOR)
    mine = [cm for cm in found if is_archive(cm, ledger_name)]
    return sorted(mine, key=_index_of)


def _name(cm: Mapping[str, object]) -> str:
    meta = cm.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append did: `already` when the line was there; `archive` names a new archive."""

    already: bool = False
    archive: str = ""
    moved_lines: int = 0
    tries: int = 1


@dataclass(frozen=True, slots=True)
class LedgerTarget:
    namespace: str
    name: str
    archive_at_bytes: int


def append(kube: Kube, target: LedgerTarget, node: str, line: str) -> Appended:
    """Append `line` to `node`'s text; idempotent (a line already there is not added again)."""
    archived: set[tuple[str, str]] = set()  # lines this call already copied to an archive
    archive, moved, attempt = "", 0, 0
    while True:
        attempt += 1
        cm = kube.configmap(target.namespace, target.name)
        try:
            if cm is None:
                body = _configmap(target, target.name, {node: ledger.append_to_text("", line)})
                kube.create_configmap(target.namespace, body)
                return Appended(archive=archive, moved_lines=moved, tries=attempt)
            data = _text_data(cm)
            text = data.get(node, "")
            if line in text.splitlines():
                return Appended(True, archive, moved, attempt)
            data = {n: _without(t, archived, n) for n, t in data.items()}
            data[node] = ledger.append_to_text(data.get(node, ""), line)
            if size_of(data) > target.archive_at_bytes:
                split = split_oldest(data, target.archive_at_bytes // 2)
                archive = _write_archive(kube, target, split.moved)
                moved += split.lines
                archived |= {(n, r) for n, t in split.moved.items() for r in t.splitlines()}
                data = split.keep
            cm["data"] = data
            kube.replace_configmap(target.namespace, target.name, cm)
            return Appended(archive=archive, moved_lines=moved, tries=attempt)
        except Conflict:  # someone wrote in between (AlreadyExists: created in between)
            if not kube.backoff.wait(attempt):
                raise LedgerWriteError(
                    f"ledger {target.namespace}/{target.name}: still conflicting after "
                    f"{attempt} tries; the line waits for the next cycle: {line}"
                ) from None
        except Refused as exc:
            raise LedgerWriteError(f"{exc}{_hint(cm, node)}") from None


def _without(text: str, archived: set[tuple[str, str]], node: str) -> str:
    if not archived:
        return text
    kept = [raw for raw in text.splitlines() if (node, raw) not in archived]
    return "".join(f"{raw}\n" for raw in kept)


def _configmap(target: LedgerTarget, name: str, data: dict[str, str]) -> dict[str, object]:
    """The ledger (`name` is the target's) or one of its archives, as created."""
    labels = {APP_LABEL: APP_NAME}
    if name != target.name:
        labels[COMPONENT_LABEL] = LEDGER_ARCHIVE_COMPONENT
    meta = {"name": name, "namespace": target.namespace, "labels": labels}
    return {"metadata": meta, "data": data}


def archive_text(text: str) -> str:
    """`text` with every character that is not printable (but a tab) as its Python escape: no
    archive carries escape bytes to a terminal. Such a line never parsed: counts are unchanged."""
    return "".join(
        "".join(c if c.isprintable() or c == "\t" else ascii(c)[1:-1] for c in raw) + "\n"
        for raw in text.splitlines()
    )


def _write_archive(kube: Kube, target: LedgerTarget, moved: dict[str, str]) -> str:
    """Create the next archive (n = highest found + 1; a name taken meanwhile: the next n), its
    lines escaped: the one place archives are written."""
    taken = read_archives(kube, target.namespace, target.name)
    n = max(map(_index_of, taken), default=0) + 1
    for _ in range(100):
        name = archive_name(target.name, n)
        body = _configmap(target, name, {n: archive_text(t) for n, t in moved.items()})
        try:
            kube.create_configmap(target.namespace, body)
            return name
        except AlreadyExists:
            n += 1
    raise LedgerWriteError(f"ledger {target.name}: no free archive name after {n}")


def _hint(cm: Mapping[str, object] | None, node: str) -> str:
    """What a person does about a ledger the API refuses to change."""
    binary = (cm or {}).get("binaryData")
    binary = binary if isinstance(binary, Mapping) else {}
    if cm is not None and cm.get("immutable") is True:
        why = "the ledger ConfigMap is immutable: recreate it without `immutable` (keep its data)"
    elif node in binary:
        why = f"binaryData already holds key {node}: move it into data (the ledger is text only)"
    elif binary:  # policies/ledger.yaml refuses every change then
        keys = ", ".join(sorted(map(str, binary)))
        why = (
            f"the ledger carries binaryData (keys {keys}), which the ledger policy refuses on "
            "every change: move it into data"
        )
    else:
        return ""
    return f"; {why}; while the node stays cordoned the guard adds the line again"
