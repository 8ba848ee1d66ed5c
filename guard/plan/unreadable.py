"""What the guard could not read this cycle: reported once, then left alone.

Case list (one cycle; the blast radius of a bad value is its object):
  node with an unreadable guard annotation or status field
        → one WARN skip `unreadable` naming each key, its value and the fix, plus a Warning Event
          `GuardUnreadable`; both checks leave the node alone (it still counts for the breaker)
  node with a Prometheus series refused at the snapshot boundary (guard.prom_view: a label or
  value not of its format, NaN, a duplicate)
        → the same WARN skip naming the query, label and value (escaped, shortened); no Event
          and nothing on the node: the value came from outside and is never written
  such a series of a node the API does not know, or naming no node in a valid form
        → one WARN skip `unreadable` for that name ("" when none)
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
from guard.model import NodeInfo, Snapshot, Unreadable
from guard.prom_view import PROM_FIX, shown
from guard.settings import Settings


def plan_unreadable(snap: Snapshot, s: Settings) -> tuple[Action, ...]:
    actions: list[Action] = []
    for node in snap.nodes:
        if node.unreadable:
            actions.extend(_node(node))
    known = {n.name for n in snap.nodes}
    elsewhere = sorted((p for p in snap.prom.unreadable if p.node not in known),
                       key=lambda p: p.node)  # fmt: skip
    for name, refused in groupby(elsewhere, key=lambda p: p.node):
        found = tuple(
            Unreadable(f"prometheus {p.query} {p.label}", p.value, p.why, PROM_FIX, "prometheus")
            for p in refused
        )
        actions.append(Skip(name, "unreadable", _detail(found), PROM_FIX, "WARN"))
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
    fixes = "; ".join(dict.fromkeys(u.fix for u in bad))
    skip = Skip(node.name, "unreadable", _detail(bad), fixes, "WARN")
    # A refused Prometheus value came from outside: the log shows it escaped, the API never.
    own = [u for u in bad if u.source == "node"]
    if not own:
        return (skip,)
    first = own[0]
    more = f" (and {len(own) - 1} more)" if len(own) > 1 else ""
    return (
        skip,
        EmitEvent(
            node.name,
            "unreadable",
            "Warning",
            "GuardUnreadable",
            f"gpu-node-guard cannot read {first.where}={first.value!r} ({first.why}){more} and "
            f"leaves this node alone: {first.fix}",
        ),
    )


def _detail(bad: tuple[Unreadable, ...]) -> str:
    """Each value with where it sits and why; a Prometheus value escaped and shortened."""
    return "; ".join(
        f"{u.where}={shown(u.value) if u.source == 'prometheus' else repr(u.value)}: {u.why}"
        for u in bad
    )
