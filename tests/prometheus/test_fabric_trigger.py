"""The `fabric` node trigger on a real Prometheus with dcgm-exporter-shaped series of
DCGM_FI_DEV_FABRIC_MANAGER_STATUS (DCGM's dcgmFabricManagerStatus_t: 0 NotSupported,
1 NotStarted, 2 InProgress, 3 Success, 4 Failure): a node with a GPU in Failure is a candidate
once held, never before; Success, training, NotSupported and a node whose exporter lacks the field
never trigger; the return waits until every GPU is in Success again. The other fabric fields
through the same trigger: an NVSwitch fatal SXid (DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS, per switch),
an NVSwitch port in ERROR (DCGM_FI_DEV_NVSWITCH_LINK_STATUS) and NVLink recovery errors that keep
rising (DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, a counter); a port OFF, a counter that
did not rise and the healthy switches of a node beside a faulted one never trigger."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from guard.actions import AppendLedgerLine, Cordon, Skip
from guard.doors.prom import PromClient
from guard.example.promserver import LocalPrometheus
from guard.ledger import parse_line
from guard.model import Snapshot
from guard.plan import triggers
from guard.plan.isolation import plan_isolation
from guard.read.prom_view import read_prom
from guard.settings import Settings
from tests.builders import KEYS, TEMPLATES, node
from tests.engines import ENGINES, scenario_server
from tests.scenario_build import KSM_POD, NodeTimeline, PodTimeline, Scenario
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus

T0 = datetime(2026, 9, 21, 0, 0, 0, tzinfo=UTC)
ONSET_S = 30 * 60
ONSET = T0 + timedelta(seconds=ONSET_S)
S = Settings(prometheus_url="http://unused")
FAIL, SUCCESS, IN_PROGRESS, NOT_SUPPORTED, NOT_STARTED = 4, 3, 2, 0, 1
LINK_OFF, LINK_ACTIVE, LINK_ERROR = 0, 2, 3
SXID = 12028  # any fatal SXid: the field's value is the SXid reported, 0 while none
ADMISSION = "UnexpectedAdmissionError"
RISING = ((0, 0), *((ONSET_S + 60 * i, i + 1) for i in range(60)))  # one more each minute

NODES = (
    # Fabric training of GPU 0 ended in Failure at the onset and stays so.
    NodeTimeline("fabric-failed", fabric=((0, SUCCESS), (ONSET_S, FAIL))),
    # Failed at the onset, trained again 20 minutes later (Fabric Manager restarted).
    NodeTimeline("fabric-back", fabric=((0, SUCCESS), (ONSET_S, FAIL), (ONSET_S + 1200, SUCCESS))),
    NodeTimeline("fabric-ok", fabric=((0, SUCCESS),)),
    # A boot's training: not started, then in progress for the whole run.
    NodeTimeline("fabric-training", fabric=((0, NOT_STARTED), (ONSET_S, IN_PROGRESS))),
    NodeTimeline("no-nvswitch", fabric=((0, NOT_SUPPORTED),)),
    # dcgm-exporter without the field in its counters: absent is not a fault.
    NodeTimeline("no-field"),
    NodeTimeline("switch-fatal", nvswitch_fatal=((0, 0), (ONSET_S, SXID))),
    # Its own four switches are healthy; its neighbour's switch 0 is not.
    NodeTimeline("switch-neighbour", nvswitch_fatal=((0, 0),)),
    NodeTimeline("link-error", nvswitch_link=((0, LINK_ACTIVE), (ONSET_S, LINK_ERROR))),
    NodeTimeline("link-off", nvswitch_link=((0, LINK_OFF),)),  # an uncabled port
    NodeTimeline("recovery-rising", nvlink_recovery=RISING),
    NodeTimeline("recovery-flat", nvlink_recovery=((0, 7),)),  # old errors, none new
    # One recovery error at the onset, none after: not a fabric that stays faulted.
    NodeTimeline("recovery-once", nvlink_recovery=((0, 0), (ONSET_S, 1))),
)
NEW_FAULTS = {"switch-fatal", "link-error", "recovery-rising"}
NAMES = tuple(n.name for n in NODES)


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    require_engine("prometheus2")
    scenario = Scenario(start=T0, duration_s=90 * 60, nodes=NODES, pods=(KSM_POD,), scrape_s=30)
    with scenario_server(scenario) as server:
        yield server


def at(minutes: float) -> datetime:
    return ONSET + timedelta(seconds=round(minutes * 60))


def snap(prom: LocalPrometheus, when: datetime, s: Settings = S) -> Snapshot:
    view = read_prom(PromClient(prom.url), s, when, NAMES)
    return Snapshot(when, tuple(node(n) for n in NAMES), (), (), (), view)


def held(prom: LocalPrometheus, when: datetime) -> dict[str, str]:
    return {h.node: h.reason for h in triggers.hits(snap(prom, when), S) if h.held}


def test_a_failed_fabric_is_a_candidate_after_the_hold_never_before(prom):
    assert held(prom, at(9.5)) == {}
    faulted = {"fabric-failed", "fabric-back", *NEW_FAULTS}
    assert held(prom, at(10)) == dict.fromkeys(faulted, "fabric")
    (h,) = [h for h in triggers.hits(snap(prom, at(12)), S) if h.node == "fabric-failed"]
    assert (h.held_s, h.needs_s) == (12 * 60, S.hold_window_s)
    assert "Failure" in h.detail


@pytest.mark.parametrize(
    "name",
    [
        "fabric-ok",
        "fabric-training",
        "no-nvswitch",
        "no-field",
        "switch-neighbour",
        "link-off",
        "recovery-flat",
    ],
)
def test_success_training_no_nvswitch_and_an_absent_field_never_trigger(prom, name):
    for minute in (-20, 5, 10, 30, 55):
        assert name not in {h.node for h in triggers.hits(snap(prom, at(minute)), S)}


def test_a_fabric_trained_again_stops_the_trigger(prom):
    assert "fabric-back" not in held(prom, at(25))


@pytest.mark.parametrize("name", sorted(NEW_FAULTS))
def test_each_other_fabric_field_is_a_candidate_after_the_hold_never_before(prom, name):
    for minute in (-20, 5, 9.5):
        assert name not in held(prom, at(minute))
    for minute in (10, 30, 55):
        assert held(prom, at(minute))[name] == "fabric"


def test_a_recovery_counter_that_rose_once_is_never_held(prom):
    for minute in (-20, 5, 20, 30, 55):
        assert "recovery-once" not in held(prom, at(minute))


def test_one_cordon_per_cycle_with_its_ledger_line_and_event(prom):
    plan = plan_isolation(snap(prom, at(12)), S, TEMPLATES)
    (cordon,) = [a for a in plan if isinstance(a, Cordon)]
    assert cordon.reason == "fabric"
    (line,) = [a for a in plan if isinstance(a, AppendLedgerLine)]
    entry = parse_line(cordon.node, line.line).entry
    assert entry is not None and entry.word == "fabric" and entry.uuid == "-"
    waiting = [a.node for a in plan if isinstance(a, Skip) and a.reason == "one-per-cycle"]
    assert sorted(waiting) == sorted({"fabric-failed", "fabric-back", *NEW_FAULTS} - {cordon.node})
    assert not [a for a in plan if isinstance(a, Skip) and a.reason == "fabric-not-applicable"]


def test_the_breaker_holds_a_fabric_candidate(prom):
    s = replace(S, breaker_max_nodes=1)
    guarded = node("guarded", guarded_xid=79, cordoned=True)
    found = snap(prom, at(12), s)
    plan = plan_isolation(replace(found, nodes=(*found.nodes, guarded)), s, TEMPLATES)
    assert not any(isinstance(a, Cordon) for a in plan)
    blocked = {a.node for a in plan if isinstance(a, Skip) and a.reason == "breaker-open"}
    assert blocked >= {"fabric-failed", "fabric-back"}


def test_the_return_waits_until_the_fabric_is_in_success_again(prom):
    notes = {
        KEYS.reason: "fabric",
        KEYS.at: "2026-09-21T00:40:00Z",
        KEYS.boot_id: "boot-1",
        KEYS.gpu_capacity: "8",
    }
    for name, minute, waits in (
        ("fabric-failed", 40, True),
        ("fabric-training", 40, True),  # still training after the reboot: not Success yet
        ("fabric-back", 40, False),
        ("switch-fatal", 40, True),  # the switch still reports its fatal SXid
        ("recovery-rising", 40, True),
        ("recovery-once", 55, False),
        ("switch-neighbour", 40, False),
    ):
        cordoned = node(name, cordoned=True, boot="boot-2", extra=notes)
        assert cordoned.cordon is not None
        found = triggers.fabric_gate(snap(prom, at(minute)), cordoned, cordoned.cordon)
        assert [(a.reason, a.level) for a in found if isinstance(a, Skip)] == (
            [("fabric", "WARN")] if waits else []
        )


@pytest.mark.parametrize(
    ("only", "lines"),
    [
        (NodeTimeline("switch-only", nvswitch_fatal=((0, 0),)), 0),
        (NodeTimeline("recovery-only", nvlink_recovery=((0, 0),)), 0),
        (NodeTimeline("none"), 1),
    ],
)
def test_the_trigger_applies_where_any_fabric_field_is_exported(only, lines):
    require_engine("prometheus2")
    scenario = Scenario(start=T0, duration_s=40 * 60, nodes=(only,), pods=(KSM_POD,), scrape_s=30)
    with scenario_server(scenario) as server:
        view = read_prom(PromClient(server.url), S, at(5), (only.name,))
    found = triggers.fabric.not_applicable(Snapshot(at(5), (node(only.name),), (), (), (), view))
    assert [a.reason for a in found if isinstance(a, Skip)] == ["fabric-not-applicable"] * lines


@pytest.mark.parametrize("engine", ENGINES)
def test_the_gpu_pods_of_a_fabric_or_rejecting_node_are_read_for_the_workload_events(engine):
    """Neither trigger sees GPU loss or a cordon: their nodes' running GPU pods are read as well
    (the pods a fabric or admission-rejected isolation tells, guard/plan/workload.py)."""
    require_engine(engine)
    fault = NodeTimeline("pods-fabric", nvswitch_fatal=((0, 0), (ONSET_S, SXID)))
    storm = tuple(
        PodTimeline("ml", f"ws-{i}", "pods-rejecting", gpus=1, reason=ADMISSION, first_s=ONSET_S)
        for i in range(6)
    )
    nodes = (fault, NodeTimeline("pods-rejecting"), NodeTimeline("pods-quiet"))
    pods = tuple(PodTimeline("team", f"train-{n.name}", n.name, gpus=8) for n in nodes)
    scenario = Scenario(
        start=T0, duration_s=60 * 60, nodes=nodes, pods=(KSM_POD, *pods, *storm), scrape_s=30
    )
    with scenario_server(scenario, engine) as server:
        names = tuple(n.name for n in nodes)

        def read(when: datetime) -> list[str]:
            view = read_prom(PromClient(server.url), S, when, names)
            return sorted(p.node for p in view.gpu_pods)

        assert read(at(-5)) == []
        assert read(at(5)) == ["pods-fabric", "pods-rejecting"]  # faults now, not yet held
