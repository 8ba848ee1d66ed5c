"""A Snapshot as JSON and back: the tests' proof that a Snapshot is plain data (frozen
dataclasses, tuples, datetimes), nothing the guard itself needs."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from datetime import datetime
from typing import Any

from guard.model import Snapshot


def to_json(snap: Snapshot) -> str:
    return json.dumps(_plain(snap), sort_keys=True)


def from_json(text: str) -> Snapshot:
    return typing.cast(Snapshot, _build(Snapshot, json.loads(text)))


def round_trips(snap: Snapshot) -> bool:
    return from_json(to_json(snap)) == snap


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _build(kind: Any, value: Any) -> Any:
    """Inverse of `_plain` driven by the type hints (enough for the types in this module)."""
    if value is None:
        return None
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        return _build(options[0], value)
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in value)
        return tuple(_build(a, v) for a, v in zip(args, value, strict=True))
    if kind is datetime:
        return datetime.fromisoformat(value)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return typing.cast(Any, kind)(
            **{f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(kind)}
        )
    return value
