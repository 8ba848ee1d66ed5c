"""The status report from a Snapshot: the planners' own decisions, read, never a second copy.
Which nodes get a row (first case wins) and what the candidates are: docs/status.md."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, assert_never

from guard import ledger
from guard.actions import (
    Action,
    Annotate,
    AppendLedgerLine,
    ClearGuardAnnotations,
    Cordon,
    CreateClaim,
    CreateJob,
    EmitEvent,
    RecordBoot,
    RemoveTaint,
    SetHold,
    Skip,
    TaintDevice,
    Uncordon,
    UntaintDevice,
    hold_next,
)
from guard.figures import budget_of
from guard.jobs import JobTemplates
from guard.log import format_line
from guard.model import NodeInfo, Snapshot, rebooted
from guard.plan import (
    budget,
    device_taint,
    fence_audit,
    hold,
    mismatch,
    released,
    return_rule,
    triggers,
    units,
)
from guard.plan.checks import plan_checks
from guard.plan.common import keys
from guard.plan.isolation import breaker_limit, plan_isolation
from guard.plan.pending import PendingNode, Waiting, pending
from guard.plan.return_rule import is_repeat_fault_hold
from guard.plan.returning import decision
from guard.plan.unreadable import plan_unreadable
from guard.runbook import Section, url
from guard.settings import Settings
from guard.states import LIFECYCLE_ROWS, STATES, Decision, Reason, job_stage
from guard.status.model import Blocked, Breaker, Candidate, Gpu, NodeRow, Report, Sight

RETURNED_SHOWN = timedelta(hours=24)
NOT_SEEN = Blocked(
    "not-seen", "hardware Xid, row remap and GPU pods need Prometheus (no --prometheus-url)"
)


def report(snap: Snapshot, s: Settings, t: JobTemplates, sight: Sight) -> Report:
    foreign = {w.node: w for w, _ in fence_audit.foreign_fence_jobs(snap, s)}
    ctx = _Context(
        snap,
        s,
        t,
        sight,
        _decisions(snap, s, t),
        _unreadable(snap, s),
        _lifecycle(snap, s, t),
        foreign,
    )
    rows = tuple(row for n in snap.nodes if (row := _row(ctx, n)))
    freed = released(a for acts in ctx.decisions.values() for a in acts)
    return Report(
        snap.now,
        s.namespace,
        sight,
        Breaker(
            units.breaker_count(snap, s),
            breaker_limit(snap, s),
            url(s.runbook_base_url, Section.BREAKER_OPEN),
        ),
        _candidates(snap, s, t, freed) if sight.seen else None,
        rows,
    )


def decision_word(action: Action) -> Reason:
    """The word `guard.states` maps to a state: a Skip's reason, ``<kind>-starting`` for the Job
    the return check would create, else the action's reason."""
    if isinstance(action, CreateJob):
        kind = "onboarding" if action.reason == Decision.ONBOARDING else action.job_kind
        return job_stage(kind, "starting")
    return action.reason


@dataclass(frozen=True, slots=True)
class _Context:
    snap: Snapshot
    s: Settings
    t: JobTemplates
    sight: Sight
    decisions: dict[str, tuple[Action, ...]]  # the return check's, per guard-cordoned node
    unreadable: dict[str, Skip]  # the unreadable check's skip, per node
    lifecycle: dict[str, Action]  # the lifecycle checks' first decision, per node with a row
    foreign_fence: dict[str, Skip]  # a fence Job no record explains: the row of a node with none


def _decisions(snap: Snapshot, s: Settings, t: JobTemplates) -> dict[str, tuple[Action, ...]]:
    return {
        n.name: decision(snap, s, t, n)
        for n in snap.nodes
        if n.cordon is not None and not n.unreadable
    }


def _lifecycle(snap: Snapshot, s: Settings, t: JobTemplates) -> dict[str, Action]:
    first: dict[str, Action] = {}
    for action in plan_checks(snap, s, t)[0]:
        first.setdefault(action.node, action)
    return {n: a for n, a in first.items() if n and decision_word(a) in LIFECYCLE_ROWS}


def _unreadable(snap: Snapshot, s: Settings) -> dict[str, Skip]:
    skips = (a for a in plan_unreadable(snap, s) if isinstance(a, Skip))
    return {a.node: a for a in skips if a.reason == "unreadable"}


def _row(ctx: _Context, node: NodeInfo) -> NodeRow | None:
    snap, s = ctx.snap, ctx.s
    if node.unreadable:
        return _decided(
            snap, node, ctx.unreadable[node.name], node.annotation(keys(s).reason) or "", s
        )
    if node.cordon is not None:
        decided = ctx.decisions[node.name]
        # A fence lifted behind the guard's back outranks what the return waits for: the record
        # says fenced, the host may not be (guard.plan.fence.lifted_behind).
        first = next((a for a in decided if a.reason == Decision.FENCE_LIFTED_FOREIGN), decided[0])
        row = _decided(snap, node, first, node.cordon.reason, s)
        case = return_rule.Case(snap, s, node, node.cordon)
        if not ctx.sight.seen and node.unschedulable and return_rule.reaches_prometheus(case):
            row = replace(row, blocked=NOT_SEEN)
        return _past_budget(row, snap, s, node)
    if node.has(keys(s).device_taint):  # a DRA node whose GPU the guard tainted
        rec = device_taint.record_of(node, s)
        plan = device_taint.decision(snap, s, ctx.t, node)
        if plan:
            row = _decided(snap, node, plan[0], rec.reason if rec else "", s)
            return replace(row, since=rec.at, gpu=Gpu(rec.pci, rec.uuid)) if rec else row
    recorded = _record_row(snap, s, node)
    if recorded is None and node.name in ctx.lifecycle:
        action = ctx.lifecycle[node.name]
        why = "onboarding" if decision_word(action).startswith("onboarding") else "boot-check"
        return _decided(snap, node, action, why, s)
    if recorded is None and (found := ctx.foreign_fence.get(node.name)) is not None:
        return _decided(snap, node, found, Decision.FENCE_JOB_FOREIGN.value, s)
    return recorded


def _past_budget(row: NodeRow, snap: Snapshot, s: Settings, node: NodeInfo) -> NodeRow:
    """The row of an isolation past its quarantine budget (guard.plan.budget): that state, and
    what the return waits for as its observed value."""
    past = budget.past_budget(node, s, snap.now)
    if past is None:
        return row
    found, age = past
    waits = f"{row.state}: {row.blocked.observed}" if row.blocked else row.state
    observed = (
        f"verdict {found.value}, isolated {_days(age)} (budget {_days(budget_of(s).of(found))});"
        f" {waits}"
    )
    state = Section.PAST_ITS_BUDGET
    return replace(
        row,
        state=state.value,
        runbook=url(s.runbook_base_url, state),
        blocked=Blocked(Decision.PAST_BUDGET.value, observed),
    )


def _days(d: timedelta) -> str:
    hours = d.total_seconds() / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


@dataclass(frozen=True, slots=True)
class _Seen:
    """What a row says before the ledger's counts are added."""

    word: str  # the decision word (guard.states)
    reason: str
    since: datetime | None
    gpu: Gpu | None
    blocked: Blocked | None
    next: str


def _decided(snap: Snapshot, node: NodeInfo, action: Action, reason: str, s: Settings) -> NodeRow:
    """A row from the planner's decision about the node (the first action it plans)."""
    blocked, step = _meaning(action, s.runbook_base_url)
    c = node.cordon
    gpu = c.gpu if c is not None else None
    seen = _Seen(decision_word(action), reason, c.at if c else None, gpu, blocked, step)
    return _with_history(snap, node.name, seen, s.runbook_base_url)


def _meaning(action: Action, runbook_base: str) -> tuple[Blocked | None, str]:
    """What blocks the node (with the value seen) and what comes next, as the planner said it
    (a log line's runbook link: the site's)."""
    match action:
        case Skip():
            return Blocked(action.reason, action.detail), action.next
        case SetHold():
            step = hold_next(action.key, action.node, repeat_fault=True)
            return Blocked(action.reason, action.text), f"the next cycle sets hold; then {step}"
        case Annotate():
            return Blocked(action.reason, " ".join(v for _, v in action.annotations)), action.next
        case CreateJob():
            return None, f"the next cycle creates job/{action.name}"
        case Uncordon():
            return None, f"{action.detail}; the next cycle uncordons the node"
        case ClearGuardAnnotations():
            observed = "the node is schedulable: a person uncordoned it"
            return Blocked(action.reason, observed), "the next cycle records the cancel"
        case (
            Cordon()
            | AppendLedgerLine()
            | EmitEvent()
            | RecordBoot()
            | RemoveTaint()
            | TaintDevice()
            | UntaintDevice()
            | CreateClaim()
        ):
            return None, format_line(*action.log_line(), runbook_base)
        case _:
            assert_never(action)


def _record_row(snap: Snapshot, s: Settings, node: NodeInfo) -> NodeRow | None:
    """A node without the guard's cordon whose annotations still say something."""
    seen = _record(snap, s, node)
    return _with_history(snap, node.name, seen, s.runbook_base_url) if seen else None


def _record(snap: Snapshot, s: Settings, node: NodeInfo) -> _Seen | None:
    if node.hold is not None:
        word = "repeat-fault-hold" if is_repeat_fault_hold(node.hold) else "hold"
        blocked = Blocked(word, f"hold={node.hold!r}")
        step = hold_next(keys(s).hold, node.name, is_repeat_fault_hold(node.hold))
        return _Seen(word, "", None, _gpu(_last(snap, node.name)), blocked, step)
    cancel = node.cancelled
    if cancel is not None and not rebooted(cancel.boot_id, node.boot_id):
        if not cancel.uuid:  # a cordon without a GPU (nvml-mismatch): the incident is the boot
            return _Seen("cancelled", cancel.reason, cancel.at, None, None, "re-arms on a new boot")
        last = _last(snap, node.name, cancel.uuid)
        gpu = Gpu(last.pci if last else ledger.UNKNOWN_PCI, cancel.uuid)
        step = "re-arms on a new boot, another GPU or another Xid"
        return _Seen("cancelled", f"xid-{cancel.xid}", cancel.at, gpu, None, step)
    back = node.returned
    if back is not None and snap.now - back.at <= RETURNED_SHOWN:
        last = _last(snap, node.name)
        step = f"nothing: {back.job} passed; the node serves again"
        return _Seen("returned", last.word if last else "", back.at, _gpu(last), None, step)
    return None


def _with_history(snap: Snapshot, node: str, seen: _Seen, runbook_base: str) -> NodeRow:
    """The row, with the ledger's incidents of the card and of the slot (archives included)."""
    state = STATES.get(seen.word)
    card = slot = None
    if seen.gpu is not None:
        counts = ledger.count(snap.ledger, seen.gpu.uuid, node, seen.gpu.pci)
        card, slot = counts.same_card, counts.same_slot
    return NodeRow(
        node=node,
        state=state.value if state is not None else seen.word,
        runbook=url(runbook_base, state) if state is not None else "",
        reason=seen.reason,
        since=seen.since,
        gpu=seen.gpu,
        card_incidents=card,
        slot_incidents=slot,
        blocked=seen.blocked,
        next=seen.next,
    )


def _last(snap: Snapshot, node: str, uuid: str = "") -> ledger.LedgerEntry | None:
    """The node's last ledger incident (of the card `uuid` when given)."""
    found = [
        e
        for e in ledger.entries(snap.ledger)
        if e.node == node and (not uuid or e.uuid.lower() == uuid.lower())
    ]
    return max(found, key=lambda e: e.at, default=None)


def _gpu(last: ledger.LedgerEntry | None) -> Gpu | None:
    return Gpu(last.pci, last.uuid) if last else None


def _candidates(
    snap: Snapshot, s: Settings, t: JobTemplates, freed: frozenset[str]
) -> tuple[Candidate, ...]:
    waiting = [_waiting(p) for p in pending(snap, s)]
    decided: dict[str, str] = {}
    for a in plan_isolation(snap, s, t, freed):
        if not isinstance(a, EmitEvent):
            decided.setdefault(a.node, decision_word(a) if isinstance(a, Skip) else "cordon")
    xids = hold.candidates(snap.prom, snap.now, s)
    xid_nodes = {g.node for g in xids}  # the Xid path decides those

    def held(node: str, reason: str, held_s: int, needs_s: int, **more: Any) -> Candidate:
        return Candidate(node, reason, held_s, needs_s, decided.get(node, "unreadable"), **more)

    found = [
        held(
            g.node,
            f"xid-{g.value}",
            hold.loss_held_s(snap.prom, g.node, snap.now),
            hold.hold_window_s(g.value, s),
            xid=g.value,
            gpu=g.gpu,
            pci=g.pci,
            uuid=g.uuid,
        )
        for g in xids
    ]
    if s.nvml_mismatch_cordon:
        found += [
            held(
                n,
                mismatch.NVML_MISMATCH,
                hold.nvml_held_s(snap.prom, n, snap.now),
                s.nvml_hold_s,
                detail=mismatch.seen(snap, n),
            )
            for n in hold.nvml_candidates(snap.prom, snap.now, s)
            if n not in xid_nodes
        ]
    found += [
        held(h.node, h.reason, h.held_s, h.needs_s, detail=h.detail)
        for h in triggers.hits(snap, s)
        if h.held and h.node not in xid_nodes
    ]
    return tuple(sorted([*waiting, *found], key=_order))


def _waiting(p: Waiting) -> Candidate:
    more: dict[str, Any] = {"decides_at": ledger.format_time(p.decides_at)}
    if isinstance(p, PendingNode):
        more["detail"] = p.detail
    else:
        more.update(xid=p.xid, gpu=p.gpu, pci=p.pci, uuid=p.uuid)
    return Candidate(p.node, p.reason, p.held_s, p.needs_s, "pending", **more)


def _order(c: Candidate) -> tuple[str, int, str, int]:
    """By node, then GPU and Xid; a node's mismatch after its GPUs (as `pending` sorts)."""
    if c.xid is None:
        return c.node, 1, "", 0
    return c.node, 0, (c.gpu or "").zfill(4), c.xid
