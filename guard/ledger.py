"""The fault ledger: one ConfigMap key per node, one line per incident.

Line format (from the incident write-up)::

    <UTC time> xid-<code> <PCI 0000:bb:dd.f> <GPU UUID> <recorder>

The guard's recorder is ``gpu-node-guard``; hand-copied lines say ``manual``. Lines the guard
cannot parse are kept verbatim and reported, never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from guard.pci import PciAddressError, normalize_pci

UNKNOWN_PCI = "unknown"  # older dcgm-exporters carry no pci_bus_id label

_LINE = re.compile(
    r"^(?P<at>\S+)\s+xid-(?P<xid>\d+)\s+(?P<pci>\S+)\s+(?P<uuid>GPU-[0-9A-Fa-f-]+)\s+(?P<rec>\S+)\s*$"
)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    node: str
    at: datetime
    xid: int
    pci: str
    uuid: str
    recorder: str

    def format(self) -> str:
        """The ledger line for this entry.

        >>> LedgerEntry("n", datetime(2026, 9, 21, 5, 52, 44, tzinfo=UTC), 79, "0000:99:00.0",
        ...             "GPU-1a2b", "manual").format()
        '2026-09-21T05:52:44Z xid-79 0000:99:00.0 GPU-1a2b manual'
        """
        return f"{format_time(self.at)} xid-{self.xid} {self.pci} {self.uuid} {self.recorder}"


@dataclass(frozen=True, slots=True)
class LedgerLine:
    """One non-blank line of a node's ledger text; `entry` is None when it did not parse."""

    node: str
    raw: str
    entry: LedgerEntry | None


def format_time(at: datetime) -> str:
    """RFC 3339 UTC with a Z, seconds precision."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """Parse RFC 3339 (``Z`` or offset); raises ValueError otherwise."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time without a zone: {text!r}")
    return parsed.astimezone(UTC)


def parse_line(node: str, raw: str) -> LedgerLine:
    """Parse one line; anything that does not match is kept with ``entry=None``.

    >>> parse_line("b", "2026-09-10T13:03:59Z xid-79 0000:99:00.0 GPU-1a2b manual").entry.xid
    79
    >>> parse_line("b", "power cycled by infra 9/22").entry is None
    True
    """
    match = _LINE.match(raw.strip())
    if match is None:
        return LedgerLine(node, raw, None)
    try:
        entry = LedgerEntry(
            node=node,
            at=parse_time(match["at"]),
            xid=int(match["xid"]),
            pci=match["pci"] if match["pci"] == UNKNOWN_PCI else normalize_pci(match["pci"]),
            uuid=match["uuid"],
            recorder=match["rec"],
        )
    except (ValueError, PciAddressError):
        return LedgerLine(node, raw, None)
    return LedgerLine(node, raw, entry)


def parse_ledger(data: Mapping[str, str]) -> tuple[LedgerLine, ...]:
    """All lines of a ledger ConfigMap's `data`, node keys in sorted order, file order within."""
    return tuple(
        parse_line(node, raw)
        for node in sorted(data)
        for raw in data[node].splitlines()
        if raw.strip()
    )


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
    """Count incidents of a card and of a slot.

    The card count is the primary key so a card's history follows it to another slot or node.
    """
    found = entries(lines)
    slot = normalize_pci(pci) if pci and pci != UNKNOWN_PCI else None
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
    """What the request asks for, from counts that INCLUDE the incident being reported.

    Case list:
      card seen 3+ times           → replace the card
      card seen twice              → inspect card, slot and power connector
      new card, slot seen 2+ times → check riser, slot and power (the card is not the pattern)
      otherwise                    → first incident

    >>> history(Counts(3, 3, None)).value
    'replace-card'
    >>> history(Counts(1, 3, None)).value
    'check-slot'
    """
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
