"""Isolation check: hardware-Xid nodes whose GPU loss held → at most one cordon per cycle.

Case list, for each node Prometheus names (query: hardware Xid AND loss held AND not cordoned):
  node unknown to the API             → skip not-in-api
  node the guard cannot read          → nothing here (reported once by the unreadable check)
  node already unschedulable          → skip already-cordoned   (Prometheus lags the API)
  node carries hold                   → skip hold
  node carries the guard's annotation → skip already-guarded
  every faulted GPU is an incident a person cancelled (same boot, GPU UUID and Xid)
                                      → skip cancelled; a new boot, GPU or Xid re-arms
  breaker open (guarded ≥ limit)      → WARN skip breaker-open + Warning Event for EVERY
                                        candidate, no cordon
  otherwise the first by (fast-path Xid, longest held, name) is cordoned; the rest wait a cycle.
"""

from __future__ import annotations

import math
from itertools import groupby

from guard import ledger
from guard.actions import Action, Cordon, EmitEvent, Skip
from guard.jobs import JobTemplates
from guard.model import CancelRecord, GpuSample, NodeInfo, Snapshot, rebooted
from guard.plan.common import (
    Incident,
    evidence_job,
    guarded_nodes,
    keys,
    ledger_append,
    present,
)
from guard.settings import Settings

NOTHING = "nothing to do for this node"


def plan_isolation(
    snap: Snapshot, s: Settings, t: JobTemplates, released: frozenset[str] = frozenset()
) -> tuple[Action, ...]:
    """`released`: nodes the return check uncordons or lets go of in this same cycle."""
    actions, eligible = _screen(snap, s)
    if not eligible:
        return tuple(actions)
    eligible.sort(
        key=lambda ns: (
            ns[1].value not in s.fast_path_xids,
            -snap.prom.held_s(ns[0].name),
            ns[0].name,
        )
    )
    limit = breaker_limit(snap, s)
    guarded = len(set(guarded_nodes(snap, s)) - released)
    if guarded >= limit:
        return (*actions, *_breaker_open(eligible, guarded, limit))
    node, sample = eligible[0]
    actions.extend(_cordon(snap, s, t, node, sample))
    actions.extend(
        Skip(
            n.name,
            "one-per-cycle",
            f"xid-{g.value} waits behind {node.name}",
            "considered again next cycle",
        )
        for n, g in eligible[1:]
    )
    return tuple(actions)


def _screen(snap: Snapshot, s: Settings) -> tuple[list[Action], list[tuple[NodeInfo, GpuSample]]]:
    """Skips for candidates that are not eligible, and (node, primary GPU) for those that are."""
    actions: list[Action] = []
    eligible: list[tuple[NodeInfo, GpuSample]] = []
    for node_name, group in groupby(snap.prom.candidates, key=lambda g: g.node):
        samples = tuple(group)
        node = snap.node(node_name)
        if node is not None and node.unreadable:
            continue
        reason = _ineligible(node, s)
        if node is None or reason:
            detail = _detail(reason or "not-in-api", _primary(samples, s))
            actions.append(Skip(node_name, reason or "not-in-api", detail, NOTHING))
            continue
        armed = tuple(g for g in samples if not _cancelled(node, node.cancelled, g))
        if not armed:
            actions.append(_skip_cancelled(node, _primary(samples, s)))
            continue
        eligible.append((node, _primary(armed, s)))
    return actions, eligible


def breaker_limit(snap: Snapshot, s: Settings) -> int:
    """Absolute limit, lowered by the optional fraction of GPU nodes (never below one)."""
    if s.breaker_max_fraction <= 0:
        return s.breaker_max_nodes
    gpu_nodes = sum(1 for n in snap.nodes if n.gpu_capacity > 0)
    return min(s.breaker_max_nodes, max(1, math.floor(s.breaker_max_fraction * gpu_nodes)))


def _primary(samples: tuple[GpuSample, ...], s: Settings) -> GpuSample:
    """The GPU that names the cordon: a fast-path Xid first, then the lowest GPU index."""
    return min(samples, key=lambda g: (g.value not in s.fast_path_xids, g.gpu.zfill(4), g.uuid))


def _ineligible(node: NodeInfo | None, s: Settings) -> str:
    k = keys(s)
    if node is None:
        return "not-in-api"
    if node.unschedulable:
        return "already-cordoned"
    if node.hold is not None:
        return "hold"
    if node.has(k.reason):
        return "already-guarded"
    return ""


def _cancelled(node: NodeInfo, cancel: CancelRecord | None, g: GpuSample) -> bool:
    """The same incident a person cancelled: same boot (no proven reboot), GPU UUID and Xid."""
    if cancel is None or rebooted(cancel.boot_id, node.boot_id):
        return False
    return cancel.uuid.lower() == g.uuid.lower() and cancel.xid == g.value


def _skip_cancelled(node: NodeInfo, g: GpuSample) -> Skip:
    assert node.cancelled is not None
    when = ledger.format_time(node.cancelled.at)
    return Skip(
        node.name,
        "cancelled",
        f"xid-{g.value} on {g.uuid}: a person uncordoned this incident at {when}",
        "re-arms on a new boot, another GPU or another Xid",
    )


def _detail(reason: str, sample: GpuSample) -> str:
    return f"xid-{sample.value} gpu={sample.pci} uuid={sample.uuid} ({reason})"


def _breaker_open(
    eligible: list[tuple[NodeInfo, GpuSample]], guarded: int, limit: int
) -> tuple[Action, ...]:
    """Every blocked candidate, each named in its own WARN line and Event."""
    out: list[Action] = []
    for node, sample in eligible:
        detail = (
            f"{guarded} nodes carry the guard's cordon (limit {limit}); xid-{sample.value} waits"
        )
        out.append(
            Skip(
                node.name,
                "breaker-open",
                detail,
                "cordon by hand if the fault is real; the breaker closes when nodes return",
                "WARN",
            )
        )
        out.append(
            EmitEvent(
                node.name,
                "breaker-open",
                "Warning",
                "GuardBreakerOpen",
                f"gpu-node-guard did not cordon: {detail}",
            )
        )
    return tuple(out)


def _cordon(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, g: GpuSample
) -> tuple[Action, ...]:
    k, reason, at = keys(s), f"xid-{g.value}", ledger.format_time(snap.now)
    incident = Incident(node.name, snap.now, g.value, g.pci, g.uuid)
    job = evidence_job(snap, s, t, incident, reason)
    annotations = (
        (k.reason, reason), (k.at, at), (k.boot_id, node.boot_id),
        (k.gpu_capacity, str(node.gpu_capacity)), (k.gpu, f"{g.pci} {g.uuid}"),
    )  # fmt: skip
    held = snap.prom.held_s(node.name)
    message = (
        f"cordoned by gpu-node-guard: Xid {g.value} on GPU {g.gpu} ({g.pci} {g.uuid}), "
        f"GPU loss held {held}s; evidence job/{job.name}"
    )
    return (
        Cordon(node.name, reason, node.resource_version, annotations, g.pci, held,
               f"job/{job.name}", present(node, k.record_keys)),
        EmitEvent(node.name, reason, "Warning", "GuardCordoned", message, incident=at),
        ledger_append(s, incident, reason),
        job,
    )  # fmt: skip
