"""Counts of the out-of-shape tries per identity, printed at the end of the apiserver tier."""

from __future__ import annotations

from collections import Counter

TRIES: Counter[tuple[str, str, str]] = Counter()


def record(identity: str, what: str, refused: bool) -> None:
    TRIES[(identity, what, "refused" if refused else "ACCEPTED")] += 1


def lines() -> list[str]:
    out = []
    for who, what in sorted({(who, what) for who, what, _ in TRIES}):
        refused, accepted = TRIES[(who, what, "refused")], TRIES[(who, what, "ACCEPTED")]
        out.append(
            f"out-of-shape {what} as {who}: {refused + accepted} tried, {refused} refused, "
            f"{accepted} accepted"
        )
    return out
