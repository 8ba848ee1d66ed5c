"""A ``kubectl get -o json`` List read one item at a time, never held whole: at most one chunk
plus one item (`json.JSONDecoder.raw_decode`) is alive; the bounds of `guard.files` hold."""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from typing import Any

from guard.files import MAX_DEPTH, MIB, FileInputError, FileSyntaxError, depth, open_regular

CHUNK = MIB
ITEM_MAX_CHARS = 8 * MIB  # the API server stores objects of at most 1.5 MiB (etcd's limit)
_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


class _Reader:
    """The file's text from `pos` on, refilled a chunk at a time; consumed text is dropped."""

    def __init__(self, fd: int, path: str, limit: int, what: str) -> None:
        self.fd, self.path, self.limit, self.what = fd, path, limit, what
        self.text, self.pos, self.eof = "", 0, False
        self.read_bytes = 0
        self.lines_before = 0  # newlines in the dropped text, for the line of a syntax error
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def fill(self) -> bool:
        """Read one more chunk; False at the end of the file."""
        if self.eof:
            return False
        try:
            chunk = os.read(self.fd, CHUNK)
        except OSError as exc:
            raise FileInputError(f"cannot read {self.what} {self.path}: {exc.strerror}") from None
        self.read_bytes += len(chunk)
        if self.read_bytes > self.limit:  # it grew while read
            limit = f"{self.limit:,} bytes"
            raise FileInputError(f"{self.what} {self.path} is larger than the limit of {limit}")
        if b"\0" in chunk:
            raise FileInputError(f"{self.what} {self.path} is not a text file (it has NUL bytes)")
        try:
            added = self._utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            at = self.read_bytes - len(chunk) + exc.start
            raise FileInputError(f"{self.what} {self.path} is not UTF-8 text (byte {at})") from None
        self.eof = not chunk
        self.lines_before += self.text.count("\n", 0, self.pos)
        self.text, self.pos = self.text[self.pos :] + added, 0
        return bool(chunk)

    def peek(self) -> str:
        """The next character that is not white space ("" at the end); `pos` points at it."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.fill():
                return ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            self.syntax(f"expected {char!r}")
        self.pos += 1

    def value(self, max_chars: int) -> Any:
        """The JSON value at `pos`, decoded; reads on until it is complete."""
        self.peek()
        while True:
            try:
                found, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:
                    self.syntax(exc.msg, exc.pos)
                found, end = None, -1  # incomplete so far, or not JSON: read on, within bounds
            except RecursionError:
                where = self._where()
                raise FileInputError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
            except ValueError as exc:  # an integer of more than 4,300 digits
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise FileInputError(f"{self._where()}: a value cannot be read: {first}") from None
            if (end if end != -1 else len(self.text)) - self.pos > max_chars:
                too_big = f"an item is larger than {max_chars:,} characters"
                raise FileInputError(f"{self._where()}: {too_big}")
            # A value that ends where the text does may go on in the next chunk (a number).
            if end != -1 and (end < len(self.text) or self.eof):
                self.pos = end
                return found
            self.fill()

    def syntax(self, msg: str, at: int | None = None) -> None:
        line = self.lines_before + self.text.count("\n", 0, self.pos if at is None else at) + 1
        raise FileSyntaxError(f"{self._where()} is not JSON (line {line}): {msg}")

    def _where(self) -> str:
        return f"{self.what} {self.path}"


def list_items(
    path: str | os.PathLike[str], limit: int, what: str, max_item: int = ITEM_MAX_CHARS
) -> Iterator[dict[str, Any]]:
    """The objects of a JSON document that is one object: a List's ``items`` one by one (items
    that are not objects skipped), or the object itself when it is not a List. An object whose
    ``items`` is an array is a List unless a ``kind`` before it says otherwise."""
    fd = open_regular(path, limit, what)
    try:
        reader = _Reader(fd, str(path), limit, what)
        yield from _document(reader, max_item)
    finally:
        os.close(fd)


def _members(reader: _Reader, opening: str, closing: str) -> Iterator[None]:
    """Once at each member of an object or array: its commas read, `pos` at the member."""
    reader.expect(opening)
    first = True
    while reader.peek() != closing:
        if not first:
            reader.expect(",")
        first = False
        yield
    reader.pos += 1


def _document(reader: _Reader, max_item: int) -> Iterator[dict[str, Any]]:
    head: dict[str, Any] = {}
    streamed = False
    for _ in _members(reader, "{", "}"):
        if reader.peek() != '"':
            reader.syntax("expected a key")
        key = reader.value(max_item)
        reader.expect(":")
        not_a_list = "kind" in head and not str(head["kind"]).endswith("List")
        if key == "items" and reader.peek() == "[" and not not_a_list:
            streamed = True
            yield from _items(reader, max_item)
        else:
            value = reader.value(max_item)
            if depth(value) + 1 > MAX_DEPTH:
                raise FileInputError(f"{reader._where()}: nested deeper than {MAX_DEPTH} levels")
            head[str(key)] = value
    if reader.peek():
        reader.syntax("extra data after the document")
    if streamed and not str(head.get("kind", "List")).endswith("List"):
        raise FileInputError(f"{reader._where()}: an object with `items` is not a List")
    if not streamed and not str(head.get("kind", "")).endswith("List"):
        yield head
    elif not streamed and not isinstance(head.get("items") or [], list):
        raise FileInputError(f"{reader._where()}: `items` of a List is not a list")


def item_too_deep(item: object) -> bool:
    """Whether an item nests deeper than MAX_DEPTH counted from the List (its two levels
    above); checked only on the objects a caller keeps (a walk costs more than the decoding)."""
    return depth(item) + 2 > MAX_DEPTH


def _items(reader: _Reader, max_item: int) -> Iterator[dict[str, Any]]:
    for _ in _members(reader, "[", "]"):
        item = reader.value(max_item)
        if isinstance(item, dict):
            yield item  # its depth: `item_too_deep`, for what the caller keeps
        elif item_too_deep(item):
            raise FileInputError(f"{reader._where()}: nested deeper than {MAX_DEPTH} levels")
