"""The ledger's archive Event, planned with the append that makes the ledger pass its size bound
(docs/writes.md, "The fault ledger's storage"): the dry run shows it, and the executor writes
nothing the plan did not name.

Case list, per cycle (the ledger's size as read, each planned append added in plan order):
  the size stays at most `Settings.ledger_archive_bytes`  → no Event
  an append takes it past                                  → an `EmitEvent` right after that
                                                             append (one; the archive halves it)
The executor emits it only when that append did move lines (the ledger may have changed since
the read: then a `skip reason=changed-under-us` line, and the append's own line says what moved).
"""

from __future__ import annotations

from collections.abc import Iterable

from guard.actions import Action, AppendLedgerLine, EmitEvent
from guard.model import Snapshot
from guard.settings import Settings

LEDGER_ARCHIVED = "ledger-archived"


def with_archive_events(
    snap: Snapshot, s: Settings, actions: Iterable[Action]
) -> tuple[Action, ...]:
    """`actions` with the archive Event after the append that passes the bound."""
    size = snap.ledger_bytes
    out: list[Action] = []
    for action in actions:
        out.append(action)
        if not isinstance(action, AppendLedgerLine):
            continue
        size += len(action.line.encode()) + 1 + len(action.node.encode())  # the key, to be safe
        if size > s.ledger_archive_bytes:
            out.append(archive_event(action, s.ledger_archive_bytes))
            size = s.ledger_archive_bytes // 2  # what the archive leaves (ledger_store.append)
    return tuple(out)


def archive_event(action: AppendLedgerLine, bound: int) -> EmitEvent:
    return EmitEvent(
        action.node,
        LEDGER_ARCHIVED,
        "Normal",
        "GuardLedgerArchived",
        f"gpu-node-guard moves the oldest lines of ledger {action.configmap} to an archive "
        f"ConfigMap (its size passes {bound} bytes); card and slot counts still read the archive",
        incident=action.line,
    )
