"""A shared cause: isolations and candidates in one failure domain (the site's topology label)
are one domain incident, said once with a request draft; each node keeps its own isolation and
return. docs/triggers.md, "Domain incidents".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from guard.actions import Action, EmitEvent, Skip
from guard.ledger import format_time
from guard.model import Snapshot
from guard.plan import units
from guard.settings import Settings
from guard.states import Decision

# Fixed: one hour, the Event TTL (a domain whose last isolation is older has no Event left to
# join), and longer than the one-per-cycle cordons of a handful of nodes take.
DOMAIN_WINDOW_S = 3600
DOMAIN_INCIDENT = Decision.DOMAIN_INCIDENT
EVENT_REASON = "GuardDomainIncident"
REQUEST = (
    "check what these nodes share (power feed, PCIe or NVLink switch, NVSwitch tray, cooling, "
    "cables) before repairing them one by one"
)


@dataclass(frozen=True, slots=True)
class Member:
    node: str
    what: str  # "cordon xid-79 at 2026-…" or "candidate fabric"


@dataclass(frozen=True, slots=True)
class Incident:
    key: str  # the topology label
    value: str
    members: tuple[Member, ...]  # by node name

    @property
    def domain(self) -> str:
        return f"{self.key}={self.value}"

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(m.node for m in self.members)

    def others(self, node: str) -> tuple[str, ...]:
        return tuple(n for n in self.nodes if n != node)


def incidents(
    snap: Snapshot, s: Settings, candidates: Iterable[tuple[str, str]]
) -> tuple[Incident, ...]:
    """The domain incidents of the cycle; `candidates`: (node, reason) of this cycle's held,
    eligible candidates."""
    key = s.topology_label
    if not key:
        return ()
    since = snap.now - timedelta(seconds=DOMAIN_WINDOW_S)
    seen: dict[str, str] = {}
    for i in units.all_isolations(snap, s):
        if i.at is not None and i.at >= since and i.node not in seen:
            seen[i.node] = f"{i.unit} {i.reason or 'unreadable'} at {format_time(i.at)}"
    for node, reason in candidates:
        seen.setdefault(node, f"candidate {reason}")
    domains: dict[str, list[Member]] = {}
    for node, what in sorted(seen.items()):
        info = snap.node(node)
        value = dict(info.labels).get(key, "") if info is not None else ""
        if value:
            domains.setdefault(value, []).append(Member(node, what))
    found = sorted(domains.items())
    return tuple(Incident(key, value, tuple(m)) for value, m in found if len(m) >= 2)


def request(i: Incident) -> str:
    """The request draft on-call sends the infrastructure team: the domain and every node."""
    listed = ", ".join(f"{m.node} ({m.what})" for m in i.members)
    return (
        f"domain incident {i.domain}: {len(i.members)} nodes within "
        f"{DOMAIN_WINDOW_S // 60} min: {listed}; request: {REQUEST}; "
        f"nodes: {' '.join(i.nodes)}"
    )


def announce(found: Iterable[Incident]) -> tuple[Action, ...]:
    """Per incident: its WARN line with the request draft, and one Event on each node."""
    out: list[Action] = []
    fix = "send the request once for the domain; each node keeps its own repair and return"
    for i in found:
        out.append(Skip(i.nodes[0], DOMAIN_INCIDENT, request(i), fix, "WARN"))
        membership = f"{i.domain} {','.join(i.nodes)}"
        for m in i.members:
            message = (
                f"gpu-node-guard: domain incident {i.domain}: this node ({m.what}) and "
                f"{', '.join(i.others(m.node))} fail within {DOMAIN_WINDOW_S // 60} min; "
                f"likely a shared cause: {REQUEST}"
            )
            out.append(
                EmitEvent(m.node, DOMAIN_INCIDENT, "Warning", EVENT_REASON, message, membership)
            )
    return tuple(out)


def breaker_note(found: Iterable[Incident], node: str) -> str:
    """What the breaker's line adds for a node of a domain incident."""
    i = next((i for i in found if node in i.nodes), None)
    return "" if i is None else f"; domain incident {i.domain} with {', '.join(i.others(node))}"
