"""Isolation check: every held candidate (hardware Xid, driver/NVML mismatch, node trigger, then
a failed after-reboot conformance Job) through one screen, one breaker and one pick: at most one
isolation per cycle, the next ones named as fallbacks (docs/isolation.md, "One pick per cycle";
the fallback: docs/writes.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from guard.actions import Action, Skip
from guard.jobs import JobTemplates
from guard.ledger import format_time
from guard.model import GpuSample, NodeInfo, Snapshot, rebooted
from guard.names import GPU_RESOURCE
from guard.plan import boot_check, device_taint, domain, hold, mismatch, triggers, units, workload
from guard.plan.common import breaker_open, keys, skip_cancelled
from guard.settings import Settings
from guard.states import Decision, Reason, xid_reason

NOTHING = "nothing to do for this node"
# Cordons one cycle may send: the first pick and two fallbacks after refusals. Bounded so that a
# fleet the API refuses wholesale (a site policy on every node) costs three requests, not N.
MAX_CORDON_TRIES = 3
NO_GPU_RESOURCE = Decision.NO_GPU_RESOURCE
XID_REARMS = "re-arms on a new boot, another GPU or another Xid"


@dataclass(frozen=True, slots=True)
class Pick:
    """An eligible candidate: ordered by (rank, longest held, name); `gpu` names an Xid's GPU."""

    node: NodeInfo
    reason: Reason  # xid-79, nvml-mismatch
    rank: int  # 0 fast-path Xid, 1 other hardware Xid, 2 mismatch, 3 trigger, 4 conformance
    held_s: int
    gpu: GpuSample | None = None
    hit: triggers.Hit | None = None  # a node trigger's finding (guard.plan.triggers)
    failed: boot_check.Failed | None = None  # a failed after-reboot conformance Job

    def waits(self, shared: tuple[domain.Incident, ...]) -> str:
        """What the breaker's line says waits."""
        if self.failed is not None:
            return self.failed.what
        return f"{self.reason} waits{domain.breaker_note(shared, self.node.name)}"


# After every node trigger: hardware first, a conformance failure last (docs/isolation.md).
CONFORMANCE_RANK = triggers.RANK + 1


def plan_isolation(
    snap: Snapshot,
    s: Settings,
    t: JobTemplates,
    released: frozenset[str] = frozenset(),
    refused: frozenset[str] = frozenset(),
    conformance: tuple[boot_check.Failed, ...] = (),
) -> tuple[Action, ...]:
    """`released`: nodes the return check lets go of this cycle; `refused`: nodes whose cordon
    the API refused this cycle (left out: `plan_fallback`); `conformance`: the after-reboot
    check's failures, candidates after every other and never a fallback."""
    actions, eligible = _candidates(snap, s)
    # Before the refused leave: a fallback's pick keeps the membership of the first plan.
    shared = domain.incidents(snap, s, ((p.node.name, p.reason) for p in eligible))
    actions.extend(domain.announce(shared))
    eligible.extend(Pick(f.node, f.reason, CONFORMANCE_RANK, 0, failed=f) for f in conformance)
    eligible = [p for p in eligible if p.node.name not in refused]
    if not eligible:
        return tuple(actions)
    eligible.sort(key=lambda p: (p.rank, -p.held_s, p.node.name))
    limit = breaker_limit(snap, s)
    guarded = units.breaker_count(snap, s, released)
    if guarded >= limit:
        return (*actions, *_breaker_open(eligible, guarded, limit, shared))
    first = eligible[0]
    if first.failed is not None:
        actions.extend(boot_check.conformance_cordon(snap, s, first.failed))
    elif first.hit is not None:
        actions.extend(triggers.cordon(snap, s, t, first.node, first.hit))
    elif first.gpu is None:
        actions.extend(mismatch.cordon(snap, s, first.node))
    else:
        unit = units.unit_for(snap, first.node, first.gpu)
        actions.extend(unit.isolate(snap, s, t, first.node, first.gpu, first.held_s))
    if first.failed is None and first.reason != Decision.GPU_SHORT:  # docs/isolation.md
        actions.extend(_tell_workload(snap, s, first))
    tries_left = MAX_CORDON_TRIES - 1 - len(refused)
    actions.extend(_waiting(p, first, i, tries_left) for i, p in enumerate(eligible[1:], 1))
    return tuple(actions)


def _waiting(p: Pick, first: Pick, place: int, tries_left: int) -> Skip:
    """A candidate behind the pick: the dry run shows the fallback order."""
    detail = f"{p.reason} waits behind {first.node.name}"
    then = "considered again next cycle"
    if p.failed is not None:
        behind = first.node.name if first.failed is not None else "the isolation check's cordon"
        detail = f"{p.failed.what}; waits behind {behind}"
    elif place <= tries_left:
        refused = f"if the API refuses the cordon of {first.node.name}"
        then = f"cordoned in this cycle {refused} (fallback {place})"
    return Skip(p.node.name, Decision.ONE_PER_CYCLE, detail, then)


def held_candidates(snap: Snapshot, s: Settings) -> tuple[tuple[str, str], ...]:
    """(node, reason) of every eligible candidate of the cycle, as `plan_isolation` screens
    them (the domain incidents the push counts)."""
    return tuple((p.node.name, p.reason) for p in _candidates(snap, s)[1])


def _candidates(snap: Snapshot, s: Settings) -> tuple[list[Action], list[Pick]]:
    """Every screen's skips and picks: hardware Xids, then mismatches, then node triggers."""
    actions, eligible = _screen(snap, s)
    taken = {g.node for g in hold.candidates(snap.prom, snap.now, s)}
    more, nvml = _screen_whole(snap, s, _mismatches(snap, s), taken)
    after, node_triggers = _screen_whole(snap, s, _trigger_findings(snap, s), taken)
    told = list(triggers.fabric.not_applicable(snap))  # one line per run
    return actions + more + told + after, eligible + nvml + node_triggers


def _tell_workload(snap: Snapshot, s: Settings, p: Pick) -> tuple[Action, ...]:
    """The pods on the GPU this cycle isolates, after the isolating write (a write that does not
    land skips them: the executor's node block)."""
    unit = units.CORDON if p.gpu is None else units.unit_for(snap, p.node, p.gpu)
    fault = p.reason if p.hit is None else f"{p.reason} ({p.hit.detail})"
    incident = f"{p.reason} {p.gpu.uuid if p.gpu else ''} {format_time(snap.now)}"
    return workload.notify(snap, s, p.node, p.gpu, fault, DECISIONS[unit.name], incident)


# What the guard did, as a pod's Event says it (guard.plan.workload).
DECISIONS = {
    "cordon": "cordoned the node (no new pod is scheduled here)",
    "device-taint": "tainted this GPU NoSchedule (no new claim gets it)",
}


def _screen(snap: Snapshot, s: Settings) -> tuple[list[Action], list[Pick]]:
    """Skips for Xid candidates that are not eligible, and a `Pick` for each that is."""
    actions: list[Action] = []
    eligible: list[Pick] = []
    for node_name, samples in by_node(hold.candidates(snap.prom, snap.now, s)).items():
        node = snap.node(node_name)
        first = _primary(samples, s)
        if node is not None and node.unreadable:
            continue
        reason = _ineligible(node, s)
        if node is not None:  # DRA nodes: the device taint's own screen
            reason = device_taint.eligibility(snap, s, node, reason, (first, *samples))
        if node is not None and reason == Decision.DEVICE_ISOLATED:
            new = _primary(device_taint.others(node, s, samples), s)
            actions.extend(device_taint.isolated_skip(node_name, _detail(reason, new)))
            continue
        if node is not None and reason == NO_GPU_RESOURCE and device_taint.dra_node(snap, node):
            actions.extend(device_taint.unpublished(snap, s, node, first))
            continue
        if node is None or reason:
            reason = reason or Decision.NOT_IN_API
            actions.append(_ineligible_skip(node_name, reason, _detail(reason, first)))
            continue
        armed = tuple(g for g in samples if not _cancelled(node, g))
        if not armed:
            actions.append(skip_cancelled(node, f"xid-{first.value} on {first.uuid}", XID_REARMS))
            continue
        g = _primary(armed, s)
        rank = 0 if g.value in s.fast_path_xids else 1
        held = hold.loss_held_s(snap.prom, node_name, snap.now)
        eligible.append(Pick(node, xid_reason(g.value), rank, held, g))
    return actions, eligible


Finding = tuple[str, Reason, int, str, triggers.Hit | None]  # node, reason, held_s, what, hit


def _mismatches(snap: Snapshot, s: Settings) -> Iterator[Finding]:
    """Held driver/NVML mismatches (guard.plan.mismatch)."""
    for name in hold.nvml_candidates(snap.prom, snap.now, s) if s.nvml_mismatch_cordon else ():
        held = hold.nvml_held_s(snap.prom, name, snap.now)
        yield name, mismatch.NVML_MISMATCH, held, f"{mismatch.NVML_MISMATCH} held {held}s", None


def _trigger_findings(snap: Snapshot, s: Settings) -> Iterator[Finding]:
    """The node triggers' held findings; a node's first held trigger names it."""
    for h in triggers.hits(snap, s):
        if h.held and not h.onboarding:  # never admitted: the onboarding gate checks the count
            yield h.node, h.reason, h.held_s, f"{h.reason} held {h.held_s}s: {h.detail}", h


def _screen_whole(
    snap: Snapshot, s: Settings, found: Iterable[Finding], taken: set[str]
) -> tuple[list[Action], list[Pick]]:
    """The same screen for whole nodes' findings; a node in `taken` (a hardware Xid's, an
    eligible mismatch's, an earlier trigger's) is decided there."""
    actions: list[Action] = []
    eligible: list[Pick] = []
    for name, reason, held, what, hit in found:
        node = snap.node(name)
        if name in taken or (node is not None and node.unreadable):
            continue
        if hit is not None:
            taken.add(name)
        if skip := _finding_skip(snap, s, name, node, what, reason):
            actions.extend(skip)
        elif node is not None:
            taken.add(name)
            eligible.append(Pick(node, reason, 2 if hit is None else triggers.RANK, held, hit=hit))
    return actions, eligible


def _finding_skip(
    snap: Snapshot, s: Settings, name: str, node: NodeInfo | None, what: str, reason: Reason
) -> tuple[Action, ...]:
    """A whole node's finding (a mismatch, a node trigger) whose node is not eligible (a DRA
    node: device_taint.whole_node), or whose cordon a person cancelled in this boot; () if not."""
    why = _ineligible(node, s)  # NOT_IN_API where node is None
    if node is not None and why == NO_GPU_RESOURCE and device_taint.dra_node(snap, node):
        return device_taint.whole_node(name, f"{what} ({why})")
    if node is None or why:
        return (_ineligible_skip(name, why or Decision.NOT_IN_API, f"{what} ({why})"),)
    if _cancelled(node, reason):
        return (skip_cancelled(node, what, "re-arms on a new boot"),)
    return ()


def by_node(samples: tuple[GpuSample, ...]) -> dict[str, tuple[GpuSample, ...]]:
    """The samples of each node, in first-seen order (a node seen twice apart is one group)."""
    out: dict[str, list[GpuSample]] = {}
    for g in samples:
        out.setdefault(g.node, []).append(g)
    return {node: tuple(group) for node, group in out.items()}


def breaker_limit(snap: Snapshot, s: Settings) -> int:
    """Absolute limit, lowered by the optional fraction of GPU nodes (never below one)."""
    if s.breaker_max_fraction <= 0:
        return s.breaker_max_nodes
    gpu_nodes = sum(1 for n in snap.nodes if n.gpu_capacity > 0)
    return min(s.breaker_max_nodes, max(1, math.floor(s.breaker_max_fraction * gpu_nodes)))


def _primary(samples: tuple[GpuSample, ...], s: Settings) -> GpuSample:
    """The GPU that names the cordon: a fast-path Xid first, then the lowest GPU index."""
    return min(samples, key=lambda g: (g.value not in s.fast_path_xids, g.gpu.zfill(4), g.uuid))


def _ineligible(node: NodeInfo | None, s: Settings) -> device_taint.Screened:
    if node is None:
        return Decision.NOT_IN_API
    if node.unschedulable:
        return Decision.ALREADY_CORDONED
    if node.hold is not None:
        return Decision.HOLD
    if node.has(keys(s).reason):
        return Decision.ALREADY_GUARDED
    if node.gpu_capacity <= 0:  # what the node-scope policy checks (guard.generate.policies.nodes)
        return NO_GPU_RESOURCE
    return ""


def _ineligible_skip(node: str, reason: Reason, detail: str) -> Skip:
    """A person should look at a faulted node the API would not let the guard cordon."""
    if reason == NO_GPU_RESOURCE:
        fix = (
            "the API refuses the guard's cordon of a node without a GPU resource; "
            "check the device plugin, cordon by hand if the fault is real"
        )
        return Skip(node, reason, f"{detail}: status.capacity has no {GPU_RESOURCE}", fix, "WARN")
    return Skip(node, reason, detail, NOTHING)


def _cancelled(node: NodeInfo, what: GpuSample | Reason) -> bool:
    """The same incident a person cancelled in this boot (no proven reboot): an Xid's GPU UUID
    and Xid, or the reason of a cordon without a GPU (a trigger's, nvml-mismatch)."""
    c = node.cancelled
    if c is None or rebooted(c.boot_id, node.boot_id):
        return False
    if isinstance(what, str):
        return c.reason == what
    return c.uuid.lower() == what.uuid.lower() and c.xid == what.value


def _detail(reason: str, sample: GpuSample) -> str:
    return f"xid-{sample.value} gpu={sample.pci} uuid={sample.uuid} ({reason})"


def _breaker_open(
    eligible: list[Pick], guarded: int, limit: int, shared: tuple[domain.Incident, ...]
) -> tuple[Action, ...]:
    """Every blocked candidate in its own WARN line and Event (with its domain incident)."""
    return tuple(
        a for p in eligible for a in breaker_open(p.node.name, guarded, limit, p.waits(shared))
    )
