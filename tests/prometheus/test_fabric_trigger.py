"""The `fabric` node trigger on a real Prometheus with dcgm-exporter-shaped series of
DCGM_FI_DEV_FABRIC_MANAGER_STATUS (DCGM's dcgmFabricManagerStatus_t: 0 NotSupported,
1 NotStarted, 2 InProgress, 3 Success, 4 Failure): a node with a GPU in Failure is a candidate
once held, never before; Success, training, NotSupported and a node whose exporter lacks the field
never trigger; the return waits until every GPU is in Success again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from guard.actions import AppendLedgerLine, Cordon, Skip
from guard.doors.prom import PromClient
from guard.example.promserver import LocalPrometheus
from guard.example.scenario import KSM_POD, NodeTimeline, Scenario
from guard.ledger import parse_line
from guard.model import Snapshot
from guard.plan import triggers
from guard.plan.isolation import plan_isolation
from guard.read.prom_view import read_prom
from guard.settings import Settings
from tests.builders import KEYS, TEMPLATES, node
from tests.engines import scenario_server
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus

T0 = datetime(2026, 9, 21, 0, 0, 0, tzinfo=UTC)
ONSET_S = 30 * 60
ONSET = T0 + timedelta(seconds=ONSET_S)
S = Settings(prometheus_url="http://unused")
FAIL, SUCCESS, IN_PROGRESS, NOT_SUPPORTED, NOT_STARTED = 4, 3, 2, 0, 1

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
)
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
    assert held(prom, at(10)) == {"fabric-failed": "fabric", "fabric-back": "fabric"}
    (h,) = [h for h in triggers.hits(snap(prom, at(12)), S) if h.node == "fabric-failed"]
    assert (h.held_s, h.needs_s) == (12 * 60, S.hold_window_s)
    assert "Failure" in h.detail


@pytest.mark.parametrize("name", ["fabric-ok", "fabric-training", "no-nvswitch", "no-field"])
def test_success_training_no_nvswitch_and_an_absent_field_never_trigger(prom, name):
    for minute in (-20, 5, 10, 30, 55):
        assert name not in {h.node for h in triggers.hits(snap(prom, at(minute)), S)}


def test_a_fabric_trained_again_stops_the_trigger(prom):
    assert "fabric-back" not in held(prom, at(25))


def test_one_cordon_per_cycle_with_its_ledger_line_and_event(prom):
    plan = plan_isolation(snap(prom, at(12)), S, TEMPLATES)
    (cordon,) = [a for a in plan if isinstance(a, Cordon)]
    assert cordon.reason == "fabric"
    (line,) = [a for a in plan if isinstance(a, AppendLedgerLine)]
    entry = parse_line(cordon.node, line.line).entry
    assert entry is not None and entry.word == "fabric" and entry.uuid == "-"
    waiting = [a.node for a in plan if isinstance(a, Skip) and a.reason == "one-per-cycle"]
    assert waiting == [({"fabric-failed", "fabric-back"} - {cordon.node}).pop()]
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
    ):
        cordoned = node(name, cordoned=True, boot="boot-2", extra=notes)
        assert cordoned.cordon is not None
        found = triggers.fabric_gate(snap(prom, at(minute)), cordoned, cordoned.cordon)
        assert [(a.reason, a.level) for a in found if isinstance(a, Skip)] == (
            [("fabric", "WARN")] if waits else []
        )
