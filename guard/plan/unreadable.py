"""What the guard could not read this cycle: reported once, then left alone.

Case list (one cycle; the blast radius of a bad value is its object):
  node with an unreadable guard annotation or status field
        → one WARN skip `unreadable` naming each key, its value and the fix; both checks leave
          the node alone (it still counts for the breaker)
        → and a Warning Event `GuardUnreadable` (`unreadable_events`), written after every other
          write of the cycle and for at most `EVENTS_PER_CYCLE` nodes, those without one first;
          the rest in one INFO skip `unreadable-events-later` (5,000 such Events took 41-201 s
          of the cycle's 200 s deadline, before the cordon)
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

# Events about unreadable nodes one cycle writes: a constant, not a setting (the skip lines
# name every node; the Events are for `kubectl describe node`, and reach all nodes in turn).
EVENTS_PER_CYCLE = 20
EVENT_REASON = "GuardUnreadable"


def plan_unreadable(snap: Snapshot, s: Settings) -> tuple[Action, ...]:
    """The skip lines; the Events come from `unreadable_events`, at the end of the plan."""
    actions: list[Action] = [_skip(node) for node in snap.nodes if node.unreadable]
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


def unreadable_events(snap: Snapshot) -> tuple[Action, ...]:
    """A Warning Event for at most EVENTS_PER_CYCLE unreadable nodes: first those that have no
    such Event yet (so every node gets one within a few cycles), then by name."""
    seen = {e.node for e in snap.events if e.reason == EVENT_REASON}
    bad = sorted((n for n in snap.nodes if n.unreadable), key=lambda n: (n.name in seen, n.name))
    out: list[Action] = [_event(node) for node in bad[:EVENTS_PER_CYCLE]]
    if len(bad) > EVENTS_PER_CYCLE:
        rest = bad[EVENTS_PER_CYCLE:]
        out.append(
            Skip(
                "",  # about the cycle, not a node's state
                "unreadable-events-later",
                f"{len(rest)} more unreadable nodes get no {EVENT_REASON} Event this cycle "
                f"({EVENTS_PER_CYCLE} per cycle; first not written: {rest[0].name})",
                "their unreadable skip lines above name them; their Events follow in later cycles",
            )
        )
    return tuple(out)


def _skip(node: NodeInfo) -> Skip:
    bad = node.unreadable
    detail = "; ".join(f"{u.where}={u.value!r}: {u.why}" for u in bad)
    fixes = "; ".join(dict.fromkeys(u.fix for u in bad))
    return Skip(node.name, "unreadable", detail, fixes, "WARN")


def _event(node: NodeInfo) -> EmitEvent:
    bad = node.unreadable
    first = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return EmitEvent(
        node.name,
        "unreadable",
        "Warning",
        EVENT_REASON,
        f"gpu-node-guard cannot read {first.where}={first.value!r} ({first.why}){more} and "
        f"leaves this node alone: {first.fix}",
    )
