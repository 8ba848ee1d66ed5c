"""The fault ledger: one ConfigMap key per node, one line per incident.

Line format (from the incident write-up)::

    <UTC time> xid-<code> <PCI 0000:bb:dd.f> <GPU UUID> <recorder>

A node incident without an Xid names its reason word instead, and no card (``-``): the node
triggers of guard/plan/triggers (`NODE_REASONS`)::

    <UTC time> gpu-short unknown - <recorder>

They never count as a card's or a slot's incident (`count`): no card or slot is known.
The guard's recorder is ``gpu-node-guard``; hand-copied lines say ``manual``. Lines the guard
cannot parse are kept verbatim and reported, never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from guard.names import PRINTABLE_WORD
from guard.pci import PciAddressError, normalize_pci
from guard.states import Decision, Reason, xid_reason

UNKNOWN_PCI = "unknown"  # older dcgm-exporters carry no pci_bus_id label
NO_CARD = "-"  # the GPU UUID field of a node incident
# The reason words of node incidents without an Xid (guard/plan/triggers, docs/triggers.md).
GPU_SHORT = Decision.GPU_SHORT
ADMISSION_REJECTED = Decision.ADMISSION_REJECTED
FABRIC = Decision.FABRIC
NODE_REASONS = (GPU_SHORT, ADMISSION_REJECTED, FABRIC)

# The shape of an incident line; each field is then checked on its own, ASCII only (`\d` and
# str.isdigit() also accept other scripts' digits and superscripts).
_LINE = re.compile(
    r"^(?P<at>\S+)\s+(?:xid-(?P<xid>\S+)|(?P<word>"
    + "|".join(NODE_REASONS)
    + r"))\s+(?P<pci>\S+)\s+(?P<uuid>\S+)\s+(?P<rec>\S+)\s*\Z"
)
_XID = re.compile(r"^[0-9]{1,6}\Z", re.ASCII)
_UUID = re.compile(r"^GPU-[0-9A-Fa-f-]+\Z", re.ASCII)
_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})\Z",
    re.ASCII,
)
# Times outside these years are typing errors, and near year 1 or 9999 a zone offset overflows.
_YEARS = range(1970, 9999)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    node: str
    at: datetime
    xid: int
    pci: str
    uuid: str
    recorder: str
    reason: Decision | Literal[""] = ""  # a `NODE_REASONS` word; "" for xid-<code>

    @property
    def word(self) -> Reason:
        """The line's reason word: ``xid-79`` or a node reason."""
        return self.reason or xid_reason(self.xid)

    def format(self) -> str:
        """The ledger line for this entry; ValueError unless each text is one printable word
        and the ledger reads the line back (`parse_line`): no value adds a line, a field or
        escape bytes, whatever its source (the read checks Prometheus' labels too)."""
        line = f"{format_time(self.at)} {self.word} {self.pci} {self.uuid} {self.recorder}"
        texts = (("PCI address", self.pci), ("GPU UUID", self.uuid), ("recorder", self.recorder))
        for what, value in texts:
            if not PRINTABLE_WORD.match(value):
                raise ValueError(f"not a ledger line: {value!r} as the {what} of node {self.node}")
        back = parse_line(self.node, line)
        if back.entry is None:
            raise ValueError(f"not a ledger line: {back.problem} (node {self.node})")
        return line


NOT_A_LINE = "not a ledger line"  # the `problem` of a hand note: kept, never counted


@dataclass(frozen=True, slots=True)
class LedgerLine:
    """One non-blank line of a node's ledger text; `entry` is None when it did not parse, and
    `problem` then says why (`NOT_A_LINE` for text that does not look like an incident)."""

    node: str
    raw: str
    entry: LedgerEntry | None
    problem: str = ""


def format_time(at: datetime) -> str:
    """RFC 3339 UTC with a Z, seconds precision."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """RFC 3339 (``Z`` or an offset) in UTC; ValueError (never OverflowError) for anything else,
    without repeating `text`: callers name the value and where it came from."""
    if not _RFC3339.match(text):
        raise ValueError("not RFC 3339 (e.g. 2026-09-21T05:55:00Z)")
    iso = text[:10] + "T" + text[11:]
    iso = iso[:-1] + "+00:00" if iso[-1] in "Zz" else iso
    out_of_range = f"time out of range (years {_YEARS.start}-{_YEARS.stop - 1})"
    try:
        parsed = datetime.fromisoformat(iso).astimezone(UTC)
    except OverflowError:
        raise ValueError(out_of_range) from None
    except ValueError as exc:
        raise ValueError(f"not a valid time ({exc})") from None
    if parsed.year not in _YEARS:
        raise ValueError(out_of_range)
    return parsed


def parse_line(node: str, raw: str) -> LedgerLine:
    """Parse one line; anything that does not match is kept with ``entry=None``."""
    match = _LINE.match(raw.strip())
    if match is None:
        return LedgerLine(node, raw, None, NOT_A_LINE)
    word = match["word"] or ""
    if not word and not _XID.match(match["xid"]):
        return LedgerLine(node, raw, None, f"Xid {match['xid']!r} is not an ASCII number")
    if not _UUID.match(match["uuid"]) and not (word and match["uuid"] == NO_CARD):
        return LedgerLine(node, raw, None, f"{match['uuid']!r} is not a GPU UUID")
    try:
        entry = LedgerEntry(
            node=node,
            at=parse_time(match["at"]),
            xid=0 if word else int(match["xid"]),
            pci=match["pci"] if match["pci"] == UNKNOWN_PCI else normalize_pci(match["pci"]),
            uuid=match["uuid"],
            recorder=match["rec"],
            reason=Decision(word) if word else "",
        )
    except ValueError as exc:  # PciAddressError is one
        return LedgerLine(node, raw, None, str(exc))
    return LedgerLine(node, raw, entry)


def parse_ledger(data: Mapping[str, object]) -> tuple[LedgerLine, ...]:
    """All lines of a ledger ConfigMap's `data`, node keys in sorted order, file order within; a
    value that is not text (only a hand-made file has one) is one unreadable line of its key."""
    out: list[LedgerLine] = []
    for node in sorted(data, key=str):
        text = data[node]
        if not isinstance(text, str):
            out.append(LedgerLine(str(node), repr(text), None, "value is not text"))
            continue
        out.extend(parse_line(str(node), raw) for raw in text.splitlines() if raw.strip())
    return tuple(out)


def entries(lines: Iterable[LedgerLine]) -> tuple[LedgerEntry, ...]:
    return tuple(line.entry for line in lines if line.entry is not None)


def unparsed(lines: Iterable[LedgerLine]) -> tuple[LedgerLine, ...]:
    return tuple(line for line in lines if line.entry is None)


def append_to_text(text: str, line: str) -> str:
    """`text` with `line` appended; existing content (parseable or not) is kept byte for byte."""
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}{line}\n"


@dataclass(frozen=True, slots=True)
class Counts:
    """Incidents on one card (by UUID, any node) and in one slot (by PCI, that node)."""

    same_card: int
    same_slot: int
    last_card_incident: datetime | None


def count(lines: Iterable[LedgerLine], uuid: str | None, node: str, pci: str | None) -> Counts:
    """Incidents of a card (by UUID: its history follows it to another slot or node) and of a
    slot."""
    found = tuple(e for e in entries(lines) if not e.reason)  # node incidents name no card
    try:
        slot = normalize_pci(pci) if pci and pci != UNKNOWN_PCI else None
    except PciAddressError:
        slot = None
    card_hits = [e for e in found if uuid and e.uuid.lower() == uuid.lower()]
    slot_hits = [e for e in found if slot and e.node == node and e.pci == slot]
    last = max((e.at for e in card_hits), default=None)
    return Counts(same_card=len(card_hits), same_slot=len(slot_hits), last_card_incident=last)


class History(StrEnum):
    FIRST = "first"
    INSPECT_CARD = "inspect-card"
    REPLACE_CARD = "replace-card"
    CHECK_SLOT = "check-slot"


def history(counts: Counts) -> History:
    """What the request asks for, from counts that INCLUDE the incident being reported; a new
    card in a slot of repeated incidents points at the slot, not the card."""
    if counts.same_card >= 3:
        return History.REPLACE_CARD
    if counts.same_card == 2:
        return History.INSPECT_CARD
    if counts.same_slot >= 2:
        return History.CHECK_SLOT
    return History.FIRST


_SENTENCES = {
    History.FIRST: "First recorded incident for this card and slot.",
    History.INSPECT_CARD: (
        "This is the 2nd incident on this card ({uuid}); please inspect the card, "
        "its slot and the power connector while the node is down."
    ),
    History.REPLACE_CARD: (
        "This is incident #{card} on this card ({uuid}); please replace the card."
    ),
    History.CHECK_SLOT: (
        "The card is new, but slot {pci} on {node} has had {slot} incidents; please check "
        "the riser, the slot and its power."
    ),
}


def history_sentence(counts: Counts, uuid: str, node: str, pci: str) -> str:
    """The sentence the request draft carries about this card's and slot's history."""
    kind = history(counts)
    return _SENTENCES[kind].format(
        uuid=uuid, node=node, pci=pci, card=counts.same_card, slot=counts.same_slot
    )
