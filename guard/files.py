"""Reading files a person or a cluster hands the guard, with the bounds of docs/security.md
("Hostile input files"): every file through `read_bounded` (the size checked before and while
reading), YAML through `load_yaml_all`; each failure a one-line `FileInputError`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

import yaml

KIB = 1024
MIB = 1024 * KIB

# Limits per kind of file: far above any real one, far below what hurts a 384 Mi container.
TOKEN_MAX_BYTES = 64 * KIB  # a bearer token or password file
KUBECONFIG_MAX_BYTES = 4 * MIB  # embedded CA and client certificates of many clusters
SNAPSHOT_MAX_BYTES = 32 * MIB  # `kubectl get nodes,jobs,… -o yaml` of a few thousand nodes
# `… -o json` is read item by item (guard.read.json_stream), never held: 65,000 nodes are ~4 GB.
SNAPSHOT_JSON_MAX_BYTES = 64 * 1024 * MIB
LEDGER_FILE_MAX_BYTES = 16 * MIB  # the ledger and its archives (a ConfigMap holds 1 MiB)
KERNEL_LOG_MAX_BYTES = 512 * MIB  # streamed line by line, never held whole
SMALL_TEXT_MAX_BYTES = 4 * MIB  # lspci -vvv, AER counters

MAX_DEPTH = 100  # Kubernetes objects nest about 20 deep (managedFields included)
MAX_ALIASES = 1_000
MAX_EXPANDED_NODES = 2_000_000  # YAML nodes after following every alias


class FileInputError(ValueError):
    """A file the guard refuses to read or parse; the message is one line naming it."""


class FileSyntaxError(FileInputError):
    """Not YAML or JSON at all (as opposed to valid but over a bound)."""


def _size(n: int) -> str:
    value, unit = (n / MIB, "MiB") if n >= MIB else (n / KIB, "KiB")
    return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"


def open_regular(path: str | os.PathLike[str], limit: int, what: str) -> int:
    """An fd of `path` opened for reading; refuses what is not a regular file of at most
    `limit` bytes. O_NONBLOCK: opening a FIFO with no writer would otherwise block here."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileInputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileInputError(f"{what} {path} is not a regular file")
        if info.st_size > limit:
            raise FileInputError(
                f"{what} {path} is {info.st_size:,} bytes, larger than the limit of {_size(limit)}"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; else one `FileInputError` line."""
    fd = open_regular(path, limit, what)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(MIB, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise FileInputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if got > limit:  # it grew while read
        raise FileInputError(f"{what} {path} is larger than the limit of {_size(limit)}")
    return b"".join(chunks)


def read_text_bounded(path: str | os.PathLike[str], limit: int, what: str) -> str:
    """`read_bounded` decoded as UTF-8; a NUL byte or invalid UTF-8 is refused (one line)."""
    data = read_bounded(path, limit, what)
    if b"\0" in data:
        raise FileInputError(f"{what} {path} is not a text file (it has NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileInputError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None


def iter_lines(path: Path | str, limit: int, what: str, max_line: int = 64 * KIB) -> Iterator[str]:
    """The lines of a text file, one at a time, each cut at `max_line` characters (the rest of
    a longer line is dropped): a 100 MB one-line file costs one line's memory."""
    fd = open_regular(path, limit, what)
    with os.fdopen(fd, "rb") as fh:
        read = 0
        while True:
            raw = fh.readline(max_line)
            if not raw:
                return
            read += len(raw)
            if not raw.endswith(b"\n"):  # cut: skip to the end of this line
                while (rest := fh.readline(max_line)) and not rest.endswith(b"\n"):
                    read += len(rest)
                read += len(rest)
            if read > limit:
                raise FileInputError(f"{what} {path} is larger than the limit of {_size(limit)}")
            yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


# ---- YAML and JSON ------------------------------------------------------------------------


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses deep nesting and many aliases before it builds them."""

    def __init__(self, stream: str, max_depth: int) -> None:
        super().__init__(stream)
        self.max_depth = max_depth
        self.depth = 0
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise FileInputError(f"more than {MAX_ALIASES} YAML aliases")
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > self.max_depth:
            raise FileInputError(f"nested deeper than {self.max_depth} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded(root: yaml.Node) -> int:
    """How many nodes `root` stands for once every alias is followed (shared nodes counted each
    time they are reached); FileInputError past MAX_EXPANDED_NODES or on a recursive alias."""
    graph: dict[int, list[int]] = {}  # node → its children (an alias: the node it names)
    stack = [root]
    while stack:
        node = stack.pop()
        children = _children(node)
        graph[id(node)] = [id(c) for c in children]
        stack.extend(c for c in children if id(c) not in graph)
    sizes: dict[int, int] = {}
    try:
        for key in TopologicalSorter(graph).static_order():  # children first
            sizes[key] = min(1 + sum(sizes[c] for c in graph[key]), MAX_EXPANDED_NODES + 1)
            if sizes[key] > MAX_EXPANDED_NODES:
                raise FileInputError(f"YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes")
    except CycleError:
        raise FileInputError("a YAML alias refers to a node that contains it") from None
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml_all(text: str, what: str, max_depth: int = MAX_DEPTH) -> list[Any]:
    """Every document of a YAML stream, safely; one `FileInputError` line when it is not YAML,
    nests deeper than `max_depth`, or its aliases expand too far."""
    loader = _BoundedLoader(text, max_depth)
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _expanded(node)
            docs.append(loader.construct_document(node))
    except FileInputError as exc:
        raise FileInputError(f"{what}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
        raise FileSyntaxError(f"{what} is not YAML{at}: {problem}") from None
    except (ValueError, RecursionError, OverflowError) as exc:  # e.g. an int of 20,000 digits
        raise FileInputError(f"{what}: a value cannot be read: {first_line(exc)}") from None
    finally:
        loader.dispose()
    return docs


def load_yaml(text: str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """The one document of `text` (None when empty); more than one is refused."""
    docs = load_yaml_all(text, what, max_depth)
    if len(docs) > 1:
        raise FileInputError(f"{what} has {len(docs)} YAML documents, expected one")
    return docs[0] if docs else None


def depth(doc: Any) -> int:
    """Nesting depth of plain data, without recursion (a scalar is 0)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            values: Any = item.values()
        elif isinstance(item, list):
            values = item
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((v, level + 1) for v in values if isinstance(v, (dict, list)))
    return deepest


def first_line(
    value: object, limit: int | None = None, cut: str = "", blank: str | None = None
) -> str:
    """The first line of `value`'s text (an exception's message): at most `limit` characters,
    `cut` added when it was longer; `blank` (its type's name by default) when it has none."""
    lines = str(value).strip().splitlines()
    if not lines:
        return type(value).__name__ if blank is None else blank
    return lines[0] if limit is None or len(lines[0]) <= limit else lines[0][:limit] + cut
