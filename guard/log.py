"""On-call log lines: ``<UTC time> <LEVEL> <event> key=value …`` or the same keys as JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TextIO

from guard.actions import _kv

LogFormat = Literal["text", "json"]


@dataclass
class Log:
    fmt: LogFormat = "text"
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: object = None  # tests pass a fixed datetime; None means wall clock

    def _now(self) -> str:
        now = self.clock if isinstance(self.clock, datetime) else datetime.now(UTC)
        return now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def line(self, text: str, level: str = "INFO") -> None:
        """Write one preformatted ``event key=value`` line."""
        if self.fmt == "json":
            event, _, rest = text.partition(" ")
            record = {"time": self._now(), "level": level, "event": event, **_pairs(rest)}
            self.stream.write(json.dumps(record, sort_keys=False) + "\n")
        else:
            self.stream.write(f"{self._now()} {level} {text}\n")
        self.stream.flush()

    def event(self, event: str, level: str = "INFO", /, **pairs: object) -> None:
        self.line(_kv(event, **pairs), level)


def _pairs(rest: str) -> dict[str, str]:
    """Split ``k=v k2="quoted v"`` back into a dict (inverse of actions._kv)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i] == " ":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        key, i = rest[i:eq], eq + 1
        if i < len(rest) and rest[i] == '"':
            i += 1
            value = []
            while i < len(rest) and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < len(rest):
                    i += 1
                value.append(rest[i])
                i += 1
            out[key] = "".join(value)
            i += 1
        else:
            end = rest.find(" ", i)
            end = len(rest) if end < 0 else end
            out[key], i = rest[i:end], end
    return out
