"""CEL text from Python values (literals, quoting) and the validation record policies are built
of: no value from the settings can break out of a CEL string (escaped; control characters refused).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# CEL reserved words cannot follow a dot (`spec.in` is a syntax error): use an index instead.
_RESERVED_WORDS = (
    "in as break const continue else for function if import let loop package namespace return"
    " var void while true false null"
)
_RESERVED = frozenset(_RESERVED_WORDS.split())


def quote(text: str) -> str:
    """A single-quoted CEL string.

    >>> quote("it's")
    "'it\\\\'s'"
    """
    if any(ord(ch) < 0x20 for ch in text):
        raise ValueError(f"control character in CEL string {text!r}")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def regex(pattern: str) -> str:
    """A raw CEL string for an RE2 pattern (read as written; no quote inside).

    >>> regex(r"^[0-9]+\\.[0-9]+$")
    "r'^[0-9]+\\\\.[0-9]+$'"
    """
    if "'" in pattern or not (pattern.startswith("^") and pattern.endswith("$")):
        raise ValueError(f"pattern must be anchored and quote-free: {pattern!r}")
    return f"r'{pattern}'"


def lit(value: Any) -> str:
    """A CEL literal for a JSON value (maps keep their order; mixed members are wrapped in dyn(),
    as CEL type-checks literals).

    >>> lit({"drop": ["ALL"], "n": 0, "on": False})
    "{'drop': dyn(['ALL']), 'n': dyn(0), 'on': dyn(false)}"
    >>> lit({"a": "x", "b": "y"})
    "{'a': 'x', 'b': 'y'}"
    """
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list | tuple):
        wrap = _mixed(value)
        return "[" + ", ".join(_member(v, wrap) for v in value) + "]"
    if isinstance(value, Mapping):
        wrap = _mixed(value.values())
        return "{" + ", ".join(f"{quote(k)}: {_member(v, wrap)}" for k, v in value.items()) + "}"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def _member(value: Any, wrap: bool) -> str:
    return f"dyn({lit(value)})" if wrap else lit(value)


def _mixed(values: Any) -> bool:
    return len({_cel_type(v) for v in values}) > 1


def _cel_type(value: Any) -> str:
    if isinstance(value, list | tuple):
        inner = {_cel_type(v) for v in value}
        return f"list({inner.pop() if len(inner) == 1 else 'dyn'})"
    if isinstance(value, Mapping):
        inner = {_cel_type(v) for v in value.values()}
        return f"map({inner.pop() if len(inner) == 1 else 'dyn'})"
    return type(value).__name__


def field(base: str, name: str) -> str:
    """`base.name`, or `base['name']` for keys that are not plain identifiers.

    >>> field("c", "image"), field("labels", "app.kubernetes.io/name"), field("p", "in")
    ('c.image', "labels['app.kubernetes.io/name']", "p['in']")
    """
    if _IDENT.match(name) and name not in _RESERVED:
        return f"{base}.{name}"
    return f"{base}[{quote(name)}]"


def shown(value: Any) -> str:
    """A value as the refusal message shows it (compact JSON)."""
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Validation:
    """One CEL validation: `expression` must hold, else the request is refused with `message`
    and `detail` (a CEL string expression: what was found)."""

    expression: str
    message: str
    detail: str | None = None

    def guarded(self, condition: str | None) -> Validation:
        """Applies only when `condition` holds (a field is present, a list has one item…)."""
        if not condition:
            return self
        return Validation(f"!({condition}) || ({self.expression})", self.message, self.detail)

    def as_dict(self, who: str) -> dict[str, str]:
        """The policy's validation entry; `who` is a CEL string naming the object."""
        said = f"{who} + {quote(': refused: ' + self.message)}"
        if self.detail:
            said += f" + {self.detail}"
        return {
            "expression": self.expression,
            "message": f"refused: {self.message}",
            "messageExpression": said,
        }
