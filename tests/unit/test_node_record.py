"""What the guard keeps of a Node is bounded: the typed fields its planners read, never the raw
object; of the annotations only the guard's own keys."""

from __future__ import annotations

import dataclasses
import json
import pickle
from datetime import datetime

from bench.objects import node_object
from bench.synthetic import ClusterSpec
from guard.model import NodeInfo
from guard.names import Annotations
from guard.read import parse_nodes
from tests.builders import S

KEYS = Annotations(S.annotation_prefix)
ALLOWED = (str, int, bool, datetime, type(None), tuple)


def _big_node(role: str | None = "guarded-a") -> dict:
    node = node_object(ClusterSpec(100), 3, role, S)  # type: ignore[arg-type]
    node["metadata"]["annotations"]["example.com/notes"] = "x" * 2000  # someone else's key
    return node


def test_a_14_kb_node_becomes_a_record_without_its_raw_object():
    raw = _big_node()
    assert len(json.dumps(raw)) > 13_000
    (info,), ignored = parse_nodes([raw], KEYS, "test")
    assert ignored == ()
    for f in dataclasses.fields(NodeInfo):  # typed values only: no dict, no list of the object
        value = getattr(info, f.name)
        assert isinstance(value, ALLOWED) or dataclasses.is_dataclass(value), f.name
    assert all(k.startswith(KEYS.prefix) for k, _ in info.annotations)
    assert "example.com/notes" not in dict(info.annotations)
    assert {k for k, _ in info.annotations} == {
        k for k in raw["metadata"]["annotations"] if k.startswith(KEYS.prefix)
    }
    assert info.cordon is not None and info.checked_boot is not None  # the guard's keys, read
    # Bounded: the record is a small fraction of the Node (labels, images, conditions are gone).
    assert len(pickle.dumps(info)) < len(json.dumps(raw)) // 8


def test_the_record_does_not_grow_with_what_the_guard_does_not_read():
    small, big = _big_node(None), _big_node(None)
    big["metadata"]["labels"].update({f"l{i}": "v" * 50 for i in range(200)})
    big["metadata"]["annotations"].update({f"other/{i}": "v" * 500 for i in range(50)})
    big["status"]["images"] *= 20
    (a,), _ = parse_nodes([small], KEYS, "test")
    (b,), _ = parse_nodes([big], KEYS, "test")
    assert a == b
