"""A JSON List read item by item (guard.read.json_stream) gives what the whole-file parse gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.files import FileInputError, FileSyntaxError
from guard.read import json_stream

LIMIT = 1 << 30


def _items(path: Path) -> list[dict]:
    return list(json_stream.list_items(path, LIMIT, "cluster snapshot"))


def _write(tmp_path: Path, doc: object, indent: int | None = None) -> Path:
    path = tmp_path / "list.json"
    path.write_text(json.dumps(doc, indent=indent), encoding="utf-8")
    return path


ITEMS = [{"kind": "Node", "metadata": {"name": f"n-{i}", "n": i * 10**12}} for i in range(50)]


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
@pytest.mark.parametrize("indent", [None, 4])
def test_items_across_chunks_are_those_of_json_loads(monkeypatch, tmp_path, chunk, indent):
    monkeypatch.setattr(json_stream, "CHUNK", chunk)  # an item and a number split between reads
    doc = {"apiVersion": "v1", "items": [*ITEMS, 7, "x"], "kind": "List", "metadata": {}}
    assert _items(_write(tmp_path, doc, indent)) == ITEMS  # items that are not objects skipped


def test_an_object_that_is_not_a_list_is_the_one_item(tmp_path):
    node = {"kind": "Node", "metadata": {"name": "n"}}
    assert _items(_write(tmp_path, node)) == [node]
    assert _items(_write(tmp_path, {"kind": "Node", "items": [1]})) == [
        {"kind": "Node", "items": [1]}
    ]


def test_a_list_whose_kind_follows_its_items_is_a_list_and_one_that_is_not_is_refused(tmp_path):
    assert _items(_write(tmp_path, {"items": ITEMS[:2], "kind": "NodeList"})) == ITEMS[:2]
    with pytest.raises(FileInputError, match="with `items` is not a List"):
        _items(_write(tmp_path, {"items": ITEMS[:2], "kind": "Node"}))


def test_items_that_are_not_a_list_are_refused(tmp_path):
    with pytest.raises(FileInputError, match="`items` of a List is not a list"):
        _items(_write(tmp_path, {"kind": "List", "items": "nodes"}))


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"kind": "List",\n "items": [{"a": 1},\n {"a" 2}]}', 3),
        ('{"items": [{"a": 1}', 1),
        ('{"items": []} {}', 1),
        ('{"items": [], 5: 1}', 1),
    ],
)
def test_text_that_is_not_json_is_one_line_with_its_line(monkeypatch, tmp_path, text, line):
    monkeypatch.setattr(json_stream, "CHUNK", 5)
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FileSyntaxError, match=rf"is not JSON \(line {line}\)"):
        _items(path)


def test_an_item_over_the_bound_is_refused_without_reading_on(tmp_path):
    path = _write(tmp_path, {"kind": "List", "items": [{"a": "x" * 5000}]})
    with pytest.raises(FileInputError, match="an item is larger than"):
        list(json_stream.list_items(path, LIMIT, "cluster snapshot", max_item=1000))


def test_a_list_read_item_by_item_never_holds_the_whole_text(monkeypatch, tmp_path):
    monkeypatch.setattr(json_stream, "CHUNK", 256)
    path = _write(tmp_path, {"kind": "List", "items": ITEMS * 20})
    longest = 0
    original = json_stream._Reader.fill

    def fill(self: json_stream._Reader) -> bool:
        nonlocal longest
        more = original(self)
        longest = max(longest, len(self.text))
        return more

    monkeypatch.setattr(json_stream._Reader, "fill", fill)
    assert len(_items(path)) == 1000
    assert longest < 1024 < path.stat().st_size // 10  # a chunk and an item, not the file
