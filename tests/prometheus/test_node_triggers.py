"""The node triggers without an Xid on a real Prometheus, with kube-state-metrics- and
dcgm-exporter-shaped series: `gpu-short` (a node below its class's GPU count) and
`admission-rejected` (GPU pods refused at kubelet admission). Each is a candidate once held,
never before; the shapes that must not trigger do not (OutOfcpu and node-affinity storms,
rejected pods without GPUs, a node never admitted, a node the exporter does not cover).

The rejection storm is the incident write-up's first Xid 79 episode, without the Xid: the node
advertised its GPUs, every GPU pod was refused with UnexpectedAdmissionError, and a Deployment
re-created its Failed pods every 5 minutes (about 1,000 a time there; 6 a time here, the same
shape above the minimum of 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from guard.actions import AppendLedgerLine, Cordon, Skip
from guard.doors.prom import PromClient
from guard.example.promserver import LocalPrometheus
from guard.ledger import parse_line
from guard.model import NodeInfo, Snapshot
from guard.plan import onboarding, triggers
from guard.plan.isolation import plan_isolation
from guard.plan.pending import PendingNode, pending
from guard.read.prom_view import read_prom
from guard.settings import Settings
from tests.builders import KEYS, TEMPLATES, node
from tests.engines import scenario_server
from tests.scenario_build import KSM_POD, NodeTimeline, PodTimeline, Scenario
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus

T0 = datetime(2026, 9, 21, 0, 0, 0, tzinfo=UTC)
ONSET_S = 30 * 60
ONSET = T0 + timedelta(seconds=ONSET_S)
HOLD_S = 600
CLASS = "gpu-pool=interactive"
S = Settings(prometheus_url="http://unused", gpu_classes=f"{CLASS}:8;gpu-pool=auto-pool:auto")
GATE = "gpu-node-guard.io/onboarding=pending:NoSchedule"


def at(minutes: float) -> datetime:
    return ONSET + timedelta(seconds=round(minutes * 60))


def storm(node_name: str, reason: str, gpus: int = 1, batches: int = 12, size: int = 6):
    """A Deployment re-creating `size` pods every 5 minutes from the onset, each refused."""
    return tuple(
        PodTimeline(
            "ml-workspace",
            f"{node_name}-{reason.lower()}-{b}-{i}",
            node_name,
            gpus=gpus,
            created_by=("ReplicaSet", f"{node_name}-workspace"),
            reason=reason,
            first_s=ONSET_S + b * 300,
        )
        for b in range(batches)
        for i in range(size)
    )


NODES = (
    # A GPU fell off after a power cycle: capacity and the exporter show 7 from the onset.
    NodeTimeline("short-b", capacity=((ONSET_S, 7),), exported=((ONSET_S, 7),)),
    # Capacity still says 8 (the device plugin counts the lost GPU); the exporter sees 7.
    NodeTimeline("short-dcgm", exported=((ONSET_S, 7),)),
    # Short from the start and never admitted: the onboarding gate's taint is on it.
    NodeTimeline("new-7", gpus=7),
    # dcgm-exporter does not run there: the capacity alone decides, and it is whole.
    NodeTimeline("no-exporter", xid_gauge=False),
    NodeTimeline("whole"),
    # A learned class: three 8-GPU peers, one short from the onset.
    NodeTimeline("auto-1"),
    NodeTimeline("auto-2"),
    NodeTimeline("auto-3"),
    NodeTimeline("auto-short", capacity=((ONSET_S, 6),), exported=((ONSET_S, 6),)),
    # The rejection storms.
    NodeTimeline("reject-b"),
    NodeTimeline("cpu-storm"),
    NodeTimeline("affinity-storm"),
    NodeTimeline("nic-storm"),
    NodeTimeline("few-rejected"),
    NodeTimeline("old-storm"),
)
PODS = (
    KSM_POD,
    *storm("reject-b", "UnexpectedAdmissionError"),
    *storm("cpu-storm", "OutOfcpu"),
    *storm("affinity-storm", "NodeAffinity"),
    *storm("nic-storm", "UnexpectedAdmissionError", gpus=0),  # another device's pods
    *storm("few-rejected", "UnexpectedAdmissionError", batches=1, size=4),
    *storm("old-storm", "UnexpectedAdmissionError", batches=2),  # stopped after 10 minutes
)
NAMES = tuple(n.name for n in NODES)


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    require_engine("prometheus2")
    scenario = Scenario(start=T0, duration_s=90 * 60, nodes=NODES, pods=PODS, scrape_s=30)
    with scenario_server(scenario) as server:
        yield server


def api_node(name: str) -> NodeInfo:
    """The Node as the API shows it: its class label, capacity, and the gate's taint on new-7."""
    pool = "auto-pool" if name.startswith("auto-") else "interactive"
    gpus = 7 if name == "new-7" else 8
    spec = {"taints": [{"key": GATE.split("=")[0], "value": "pending", "effect": "NoSchedule"}]}
    found = node(name, gpus=gpus, patch={"spec": spec} if name == "new-7" else None)
    return replace(found, labels=(("gpu-pool", pool),))


def snap(prom: LocalPrometheus, when: datetime, s: Settings = S) -> Snapshot:
    view = read_prom(PromClient(prom.url), s, when, NAMES)
    return Snapshot(when, tuple(api_node(n) for n in NAMES), (), (), (), view)


def held(prom: LocalPrometheus, when: datetime, s: Settings = S) -> dict[str, str]:
    return {h.node: h.reason for h in triggers.hits(snap(prom, when, s), s) if h.held}


# The exporter's lost GPU stays visible for Prometheus' 5-minute lookback: loaded data carries
# no staleness marker, so its count drops 5 minutes after the onset (a live scrape marks it at
# once; either way the hold starts when Prometheus shows the drop).
STALE_S = 5 * 60


def test_gpu_short_is_a_candidate_after_the_hold_never_before(prom):
    assert held(prom, at(9.5)).keys().isdisjoint({"short-b", "auto-short"})
    found = held(prom, at(10))
    assert {n: found[n] for n in ("short-b", "auto-short")} == {
        "short-b": "gpu-short",
        "auto-short": "gpu-short",
    }
    for name in ("whole", "no-exporter", "auto-1", "auto-2", "auto-3"):
        assert name not in found
    assert "short-dcgm" not in held(prom, at(9.5 + STALE_S / 60))
    assert held(prom, at(10 + STALE_S / 60))["short-dcgm"] == "gpu-short"


def test_gpu_short_says_what_it_saw_and_records_the_class_count(prom):
    (h,) = [h for h in triggers.hits(snap(prom, at(12)), S) if h.node == "short-b"]
    assert h.held_s == 12 * 60 and h.gpu_capacity == 8
    assert h.detail == f"7 GPUs (capacity 8), class {CLASS} expects 8"
    (learned,) = [h for h in triggers.hits(snap(prom, at(12)), S) if h.node == "auto-short"]
    assert learned.gpu_capacity == 8  # the peers' majority, never its own 6


def test_a_node_never_admitted_is_the_onboarding_gates(prom):
    s = Settings(prometheus_url="http://unused", gpu_classes=S.gpu_classes, onboarding_taint=GATE)
    plan = plan_isolation(snap(prom, at(40), s), s, TEMPLATES)
    assert [a for a in plan if a.node == "new-7"] == []  # left to the gate (below)
    off = replace(S, onboarding_taint="")  # no gate: the taint means nothing, a candidate
    without_gate = plan_isolation(snap(prom, at(40), off), off, TEMPLATES)
    assert any(a.node == "new-7" and a.reason == "one-per-cycle" for a in without_gate)


def test_the_onboarding_gate_checks_the_same_count(prom):
    s = Settings(prometheus_url="http://unused", gpu_classes=S.gpu_classes, onboarding_taint=GATE)
    (skip,) = onboarding.scan(snap(prom, at(40), s), s, TEMPLATES, frozenset()).actions["new-7"]
    assert isinstance(skip, Skip) and (skip.reason, skip.level) == ("onboarding-gpu-short", "WARN")
    assert skip.detail == f"7 GPUs, class {CLASS} expects 8"


def test_no_classes_no_gpu_short(prom):
    s = Settings(prometheus_url="http://unused")
    assert not any(r == "gpu-short" for r in held(prom, at(40), s).values())


def test_the_rejection_storm_is_a_candidate_after_the_hold_never_before(prom):
    assert "reject-b" not in held(prom, at(9.5))
    assert held(prom, at(10))["reject-b"] == "admission-rejected"
    (h,) = [h for h in triggers.hits(snap(prom, at(10)), S) if h.node == "reject-b"]
    assert h.detail.startswith("12 GPU pods created in the last 600s rejected at admission")


@pytest.mark.parametrize(
    "name",
    ["cpu-storm", "affinity-storm", "nic-storm", "few-rejected"],
)
def test_rejections_the_node_does_not_own_never_count(prom, name):
    for minute in (5, 10, 30, 55):
        assert name not in held(prom, at(minute))


def test_old_rejections_stop_counting_once_the_window_passed(prom):
    assert held(prom, at(10))["old-storm"] == "admission-rejected"
    assert "old-storm" not in held(prom, at(25))  # the last batch was created at 5 minutes


def test_one_cordon_per_cycle_with_its_ledger_line_and_event(prom):
    plan = plan_isolation(snap(prom, at(40)), S, TEMPLATES)
    (cordon,) = [a for a in plan if isinstance(a, Cordon)]
    assert cordon.reason in ("gpu-short", "admission-rejected")
    (line,) = [a for a in plan if isinstance(a, AppendLedgerLine)]
    entry = parse_line(cordon.node, line.line).entry
    assert entry is not None and entry.word == cordon.reason and entry.uuid == "-"
    waiting = {a.node for a in plan if isinstance(a, Skip) and a.reason == "one-per-cycle"}
    assert waiting >= {"short-b", "short-dcgm", "auto-short", "reject-b"} - {cordon.node}


def test_pending_lines_and_status_before_and_after_the_hold(prom):
    early = {
        p.node: p for p in pending(snap(prom, at(5)), S) if isinstance(p, PendingNode) and p.trigger
    }
    assert early["reject-b"].reason == "admission-rejected"
    assert (early["reject-b"].held_s, early["reject-b"].needs_s) == (300, 600)
    assert early["short-b"].decides_at == at(10)
    late = {
        p.node for p in pending(snap(prom, at(12)), S) if isinstance(p, PendingNode) and p.trigger
    }
    assert not late & {"reject-b", "short-b"}  # held: candidates now, no longer pending


def with_nodes(found: Snapshot, *more: NodeInfo) -> Snapshot:
    """The snapshot with `more` in place of the nodes of the same names."""
    names = {n.name for n in more}
    kept = tuple(n for n in found.nodes if n.name not in names)
    return replace(found, nodes=tuple(sorted((*kept, *more), key=lambda n: n.name)))


def test_the_breaker_holds_every_trigger_candidate(prom):
    s = replace(S, breaker_max_nodes=1)
    guarded = node("guarded", guarded_xid=79, cordoned=True)
    plan = plan_isolation(with_nodes(snap(prom, at(40)), guarded), s, TEMPLATES)
    assert not any(isinstance(a, Cordon) for a in plan)
    blocked = {a.node for a in plan if isinstance(a, Skip) and a.reason == "breaker-open"}
    assert blocked >= {"short-b", "short-dcgm", "auto-short", "reject-b"}


def test_a_persons_uncordon_sticks_in_that_boot(prom):
    cancel = {KEYS.cancelled: "boot-1 - admission-rejected 2026-09-21T00:45:00Z"}
    cancelled = node("reject-b", extra=cancel)
    plan = plan_isolation(with_nodes(snap(prom, at(40)), cancelled), S, TEMPLATES)
    assert [a.reason for a in plan if a.node == "reject-b"] == ["cancelled"]
    rebooted = node("reject-b", extra=cancel, boot="boot-2")
    plan = plan_isolation(with_nodes(snap(prom, at(40)), rebooted), S, TEMPLATES)
    assert "cancelled" not in [a.reason for a in plan if a.node == "reject-b"]


def test_the_return_waits_while_gpu_pods_are_still_rejected(prom):
    notes = {
        KEYS.reason: "admission-rejected",
        KEYS.at: "2026-09-21T00:40:00Z",
        KEYS.boot_id: "boot-1",
        KEYS.gpu_capacity: "8",
    }
    for name, minute, waits in (("reject-b", 40, True), ("old-storm", 25, False)):
        cordoned = node(name, cordoned=True, boot="boot-2", extra=notes)
        assert cordoned.cordon is not None
        found = triggers.return_gate(snap(prom, at(minute)), S, cordoned, cordoned.cordon)
        assert [(a.reason, a.level) for a in found if isinstance(a, Skip)] == (
            [("admission-rejected", "WARN")] if waits else []
        )


def test_an_exporter_without_the_fabric_field_is_one_line_per_run_not_per_node(prom):
    plan = plan_isolation(snap(prom, at(40)), S, TEMPLATES)
    lines = [a for a in plan if isinstance(a, Skip) and a.reason == "fabric-not-applicable"]
    assert [(a.node, a.level) for a in lines] == [("", "INFO")]
    assert not any(h.reason == "fabric" for h in triggers.hits(snap(prom, at(40)), S))
