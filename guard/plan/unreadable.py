"""What the guard could not read this cycle (a node's annotation or status field, a Prometheus
series refused at the snapshot boundary, a ledger line, a nameless object): reported once, then
left alone; the blast radius of a bad value is its object (docs/writes.md, docs/node-signals.md).
"""

from __future__ import annotations

from itertools import groupby
from typing import Literal

from guard.actions import Action, EmitEvent, Skip
from guard.codec.series import PROM_FIX, shown
from guard.ledger import NOT_A_LINE
from guard.model import NodeInfo, Snapshot, Unreadable
from guard.settings import Settings
from guard.states import Decision

# Events about unreadable nodes one cycle writes: a constant, not a setting (the skip lines
# name every node; the Events are for `kubectl describe node`, and reach all nodes in turn).
EVENTS_PER_CYCLE = 20
EVENT_REASON = "GuardUnreadable"


def plan_unreadable(snap: Snapshot, s: Settings) -> tuple[Action, ...]:
    """The skip lines; the Events come from `unreadable_events`, at the end of the plan."""
    actions: list[Action] = [_skip(node) for node in snap.nodes if node.unreadable]
    known = {n.name for n in snap.nodes}
    elsewhere = sorted(
        (p for p in snap.prom.unreadable if p.node not in known), key=lambda p: p.node
    )
    for name, refused in groupby(elsewhere, key=lambda p: p.node):
        found = tuple(
            Unreadable(f"prometheus {p.query} {p.label}", p.value, p.why, PROM_FIX, "prometheus")
            for p in refused
        )
        actions.append(Skip(name, Decision.UNREADABLE, _detail(found), PROM_FIX, "WARN"))
    unread = (line for line in snap.ledger if line.entry is None)
    for key, group in groupby(unread, key=lambda line: line.node):
        lines = tuple(group)
        broken = [line for line in lines if line.problem != NOT_A_LINE]
        first = (broken or list(lines))[0]
        detail = (
            f"{len(lines)} line(s) of configmap/{s.ledger_configmap} not counted, "
            f"first {first.raw.strip()!r}: {first.problem}"
        )
        fix = (
            f"correct or remove the line under key {key} if it records an incident; "
            "hand notes may stay"
        )
        level: Literal["WARN", "INFO"] = "WARN" if broken else "INFO"
        actions.append(Skip(key, Decision.LEDGER_UNREADABLE, detail, fix, level))
    actions.extend(
        Skip("", Decision.OBJECT_UNREADABLE, text, "fix or remove it in the snapshot file", "WARN")
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
        detail = (
            f"{len(rest)} more unreadable nodes get no {EVENT_REASON} Event this cycle "
            f"({EVENTS_PER_CYCLE} per cycle; first not written: {rest[0].name})"
        )
        then = "their unreadable skip lines above name them; their Events follow in later cycles"
        out.append(Skip("", Decision.UNREADABLE_EVENTS_LATER, detail, then))  # about the cycle

    return tuple(out)


def _skip(node: NodeInfo) -> Skip:
    bad = node.unreadable
    fixes = "; ".join(dict.fromkeys(u.fix for u in bad))
    return Skip(node.name, Decision.UNREADABLE, _detail(bad), fixes, "WARN")


def _event(node: NodeInfo) -> EmitEvent:
    # A refused Prometheus value came from outside: the log shows it escaped, the API never.
    own = [u for u in node.unreadable if u.source == "node"] or list(node.unreadable)
    first, more = own[0], f" (and {len(own) - 1} more)" if len(own) > 1 else ""
    what = (
        f"{first.where}={first.value!r} ({first.why})"
        if first.source == "node"
        else f"the series {first.where} (refused: its value is in the guard's log)"
    )
    message = f"gpu-node-guard cannot read {what}{more} and leaves this node alone: {first.fix}"
    return EmitEvent(node.name, Decision.UNREADABLE, "Warning", EVENT_REASON, message)


def _detail(bad: tuple[Unreadable, ...]) -> str:
    """Each value with where it sits and why; a Prometheus value escaped and shortened."""
    return "; ".join(
        f"{u.where}={shown(u.value) if u.source == 'prometheus' else repr(u.value)}: {u.why}"
        for u in bad
    )
