"""What the guard could not read this cycle: reported once, then left alone.

Case list (one cycle; the blast radius of a bad value is its object):
  node with an unreadable guard annotation or status field
        → one WARN skip `unreadable` naming each key, its value and the fix, plus a Warning Event
          `GuardUnreadable`; both checks leave the node alone (it still counts for the breaker)
  ledger key with lines that are not counted
        → one skip `ledger-unreadable` per key: WARN when a line has the shape of an incident
          (its time, Xid, PCI address or UUID is bad), INFO when every such line is a hand note
  object without a name (only a hand-made snapshot file has one)
        → one WARN skip `object-unreadable`
"""

from __future__ import annotations

from itertools import groupby

from guard.actions import Action, EmitEvent, Skip
from guard.ledger import NOT_A_LINE
from guard.model import NodeInfo, Snapshot
from guard.settings import Settings


def plan_unreadable(snap: Snapshot, s: Settings) -> tuple[Action, ...]:
    actions: list[Action] = []
    for node in snap.nodes:
        if node.unreadable:
            actions.extend(_node(node))
    unread = (line for line in snap.ledger if line.entry is None)
    for key, group in groupby(unread, key=lambda line: line.node):
        lines = tuple(group)
        broken = [line for line in lines if line.problem != NOT_A_LINE]
        first = (broken or list(lines))[0]
        actions.append(
            Skip(
                key,
                "ledger-unreadable",
                f"{len(lines)} line(s) of configmap/{s.ledger_configmap} not counted, "
                f"first {first.raw.strip()!r}: {first.problem}",
                f"correct or remove the line under key {key} if it records an incident; "
                "hand notes may stay",
                "WARN" if broken else "INFO",
            )
        )
    actions.extend(
        Skip("", "object-unreadable", text, "fix or remove it in the snapshot file", "WARN")
        for text in snap.ignored
    )
    return tuple(actions)


def _node(node: NodeInfo) -> tuple[Action, ...]:
    bad = node.unreadable
    detail = "; ".join(f"{u.where}={u.value!r}: {u.why}" for u in bad)
    fixes = "; ".join(dict.fromkeys(u.fix for u in bad))
    first = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return (
        Skip(node.name, "unreadable", detail, fixes, "WARN"),
        EmitEvent(
            node.name,
            "unreadable",
            "Warning",
            "GuardUnreadable",
            f"gpu-node-guard cannot read {first.where}={first.value!r} ({first.why}){more} and "
            f"leaves this node alone: {first.fix}",
        ),
    )
