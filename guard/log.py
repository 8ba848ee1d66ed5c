"""On-call log lines: ``<UTC time> <LEVEL> <event> key=value …`` or the same fields as JSON.

Both formats are built from one list of fields (JSON keeps the values' types). Decision lines
are bounded per kind in a cycle: past `DECISION_LINES` they are counted, then summarised.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TextIO, get_args

from guard.runbook import PUBLISHED_URL, Hint

LogFormat = Literal["text", "json"]
Level = Literal["INFO", "WARN", "ERROR"]  # every program's lines: one word each, never WARNING
LEVELS: frozenset[str] = frozenset(get_args(Level))
Value = str | int | float | bool | None
Fields = Mapping[str, Value]

# Keys every line has (or may have) of its own; no field may reuse one.
RESERVED = frozenset({"time", "level", "event", "dry_run"})
DECISION_LINES = 20


# C0 and C1 controls, DEL and the Unicode line and paragraph separators: what would start a
# line of its own or move a terminal's cursor.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` on one line, each control character as its escape: a value read from the cluster can
    forge neither a line of its own nor a row of a table."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def format_value(value: Value) -> str:
    """A value as the text line shows it: quoted when it holds spaces, quotes or control
    characters, which are escaped (`printable`): one value, one line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if not text or any(ch.isspace() for ch in text) or '"' in text or _CONTROL.search(text):
        text = '"' + printable(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'
    return text


def shown(fields: Fields) -> dict[str, Value]:
    """The fields a line carries: empty values (None, "") are left out of both formats; text
    values with credentials in them are redacted (`redact` below)."""
    return {
        k: redact(v) if isinstance(v, str) else v
        for k, v in fields.items()
        if v is not None and v != ""
    }


def rebased(fields: Fields, runbook_base: str) -> dict[str, Value]:
    """The fields with each `Hint` linking the runbook at `runbook_base` (the site's)."""
    return {k: v.at(runbook_base) if isinstance(v, Hint) else v for k, v in fields.items()}


def format_line(event: str, fields: Fields, runbook_base: str = PUBLISHED_URL) -> str:
    """``event key=value …``, the text form of one line (without time and level)."""
    fields = rebased(fields, runbook_base)
    return " ".join([event, *(f"{k}={format_value(v)}" for k, v in shown(fields).items())])


@dataclass
class Log:
    fmt: LogFormat = "text"
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: datetime | None = None  # tests pass a fixed instant; None means the wall clock
    runbook_base_url: str = PUBLISHED_URL  # the site's runbook, which each `next=` Hint links
    _seen: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    _examples: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    def _now(self) -> str:
        now = self.clock or datetime.now(UTC)
        return now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def emit(
        self, event: str, fields: Fields, level: Level = "INFO", *, dry_run: bool = False
    ) -> None:
        """Write one line. A dry run's write lines read ``dry-run would <event> …`` in text and
        carry ``"dry_run": true`` in JSON."""
        clash = RESERVED & set(fields)
        if clash:
            raise ValueError(f"log field {sorted(clash)} is reserved (event {event})")
        if level not in LEVELS:  # a caller without types (or with Any) still gets one word
            raise ValueError(f"log level {level!r} is not one of {', '.join(sorted(LEVELS))}")
        fields = rebased(fields, self.runbook_base_url)
        if self.fmt == "json":
            record: dict[str, Value] = {"time": self._now(), "level": level, "event": event}
            if dry_run:
                record["dry_run"] = True
            record.update(shown(fields))
            self.stream.write(json.dumps(record) + "\n")
        else:
            prefix = "dry-run would " if dry_run else ""
            self.stream.write(f"{self._now()} {level} {prefix}{format_line(event, fields)}\n")
        self.stream.flush()

    def event(self, event: str, level: Level = "INFO", /, **fields: Value) -> None:
        self.emit(event, fields, level)

    def decision(self, event: str, fields: Fields, level: Level = "INFO") -> None:
        """A decision line (skip, pending): the first `DECISION_LINES` of each (event, reason)
        are written, the rest counted for `summarise()`. WARN and ERROR lines always print."""
        if level in ("WARN", "ERROR"):
            self.emit(event, fields, level)
            return
        kind = (event, str(fields.get("reason", "")))
        seen = self._seen.get(kind, 0) + 1
        self._seen[kind] = seen
        if seen <= DECISION_LINES:
            self.emit(event, fields, level)
        elif seen == DECISION_LINES + 1:
            self._examples[kind] = str(fields.get("node", ""))

    def summarise(self) -> None:
        """One line per kind of decision that had more lines than were written."""
        for (event, reason), seen in sorted(self._seen.items()):
            if seen > DECISION_LINES:
                self.emit(
                    "summary",
                    {
                        "of": event,
                        "reason": reason,
                        "shown": DECISION_LINES,
                        "more": seen - DECISION_LINES,
                        "first_not_shown": self._examples.get((event, reason), ""),
                        "next": "--output json lists every decision",
                    },
                )
        self._seen.clear()
        self._examples.clear()


# Redaction (every log line and every "bad setting" line passes through `redact`).
# Secrets never reach a log line: header values whose name says they are credentials.

REDACTED = "<redacted>"
# A part of a header name that makes it a credential ("key" covers api-key and apikey).
_SECRET_WORD = re.compile("authorization|cookie|token|key|secret|password|passwd|credential")
# ``Name=value`` (the headers setting) and ``Name: value`` (an echoed request header).
_PAIR = re.compile(r"(?P<name>[!#$%&'*+.^_`|~0-9A-Za-z-]+)(?P<sep>=|:[ \t]*)(?P<value>[^,\s]+)")
_SCHEME = re.compile(r"(?i)\b(bearer|basic)[ \t]+[^,\s]+")


def redact(text: str) -> str:
    """`text` with the value of every secret-named pair, and every Bearer/Basic credential,
    replaced by ``<redacted>``."""
    if "=" not in text and ":" not in text and " " not in text:
        return text

    def pair(m: re.Match[str]) -> str:
        if not _SECRET_WORD.search(m["name"].lower()) or m["value"] == REDACTED:
            return m[0]
        return f"{m['name']}{m['sep']}{REDACTED}"

    text = _SCHEME.sub(REDACTED, text)
    return _PAIR.sub(pair, text)
