"""Telling the workload (guard/plan/workload.py) and domain incidents (guard/plan/domain.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import Cordon, CreateJob, EmitEvent, PodRef, Skip, to_json
from guard.apply.events import NodeRef, Reporter, body
from guard.generate.policies import argv as layouts
from guard.jobs import job_name
from guard.ledger import format_time
from guard.model import GpuHolder, GpuPod, NodeInfo, Snapshot
from guard.plan import domain, plan_fallback
from guard.plan.isolation import plan_isolation
from guard.plan.return_jobs import evidence_job_name
from guard.plan.returning import plan_return
from guard.settings import Settings
from tests.argv_layouts import matches
from tests.builders import KEYS, NOW, TEMPLATES, UUID, gpu, node, settings, snapshot

RACK = "example.com/rack"
OTHER_UUID = "GPU-99999999-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
POD_UID = "0b0e1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"


def pod_events(actions: tuple[object, ...]) -> list[EmitEvent]:
    return [a for a in actions if isinstance(a, EmitEvent) and a.pod is not None]


def with_holders(snap: Snapshot, *holders: GpuHolder) -> Snapshot:
    return replace(snap, prom=replace(snap.prom, gpu_holders=holders))


def racked(n: NodeInfo, rack: str) -> NodeInfo:
    return replace(n, labels=((RACK, rack),))


# ── Telling the workload ──────────────────────────────────────────────────────────────────


def test_the_pods_dcgm_exporter_names_on_the_faulted_gpu_are_told_after_the_cordon():
    snap = with_holders(
        snapshot(
            node("b", allocatable=7),
            candidates=(gpu("b", 79),),
            pods=(
                GpuPod("team-a", "train-0", "b", 1, POD_UID),
                GpuPod("team-c", "infer-0", "b", 1),  # on another GPU of the node
            ),
        ),
        GpuHolder("b", UUID, "team-a", "train-0"),
        GpuHolder("b", UUID, "team-b", "train-1"),
        GpuHolder("b", OTHER_UUID, "team-c", "infer-0"),  # another GPU: not told
    )
    actions = plan_isolation(snap, settings(), TEMPLATES)
    told = pod_events(actions)
    assert [a.pod for a in told] == [
        PodRef("team-a", "train-0", POD_UID),  # its uid from kube-state-metrics
        PodRef("team-b", "train-1", ""),
    ]
    cordon = next(i for i, a in enumerate(actions) if isinstance(a, Cordon))
    assert all(actions.index(a) > cordon for a in told)  # a cordon that fails skips them
    e = told[0]
    assert (e.event_type, e.event_reason, e.node) == ("Warning", "GuardGpuIsolated", "b")
    assert f"GPU 4 {UUID}" in e.message and "xid-79" in e.message
    assert "cordoned the node" in e.message and "not evicted" in e.message
    assert "this pod holds the GPU (dcgm-exporter)" in e.message
    assert to_json(e)["pod"] == "team-a/train-0"  # --output json
    assert "pod" not in to_json(actions[cordon + 1])  # the cordon's own Event: as before
    made = body(e, NodeRef("b", "uid-b", "1"), Reporter("guard-1", NOW))
    assert made["metadata"]["namespace"] == "team-a"
    assert made["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "train-0",
        "uid": POD_UID,
    }
    # One per isolation: a second plan of the same cycle names the same Events.
    again = pod_events(plan_isolation(snap, settings(), TEMPLATES))
    assert [a.name for a in again] == [a.name for a in told]
    assert len({a.name for a in told}) == 2


def test_without_the_exporters_pod_labels_the_nodes_gpu_pods_are_told_but_not_the_guards():
    s = settings()
    snap = snapshot(
        node("b", allocatable=7),
        node("c"),
        candidates=(gpu("b", 79),),
        pods=(
            GpuPod("team-a", "train-0", "b", 8),
            GpuPod(s.jobs_namespace, "gpu-node-guard-loadtest-x", "b", 8),
            GpuPod("team-a", "elsewhere", "c", 8),
        ),
    )
    told = pod_events(plan_isolation(snap, s, TEMPLATES))
    assert [(a.pod.namespace, a.pod.name) for a in told if a.pod] == [("team-a", "train-0")]
    assert "holds GPUs of the node" in told[0].message


def test_no_pod_no_event_and_a_waiting_candidate_tells_nobody():
    snap = snapshot(
        node("a", allocatable=7),
        node("b", allocatable=7),
        candidates=(gpu("a", 79), gpu("b", 48)),
        pods=(GpuPod("team-a", "train-0", "b", 8),),  # b waits behind a this cycle
    )
    assert pod_events(plan_isolation(snap, settings(), TEMPLATES)) == []


def test_an_open_breaker_tells_no_pod():
    guarded = tuple(node(f"g{i}", cordoned=True, guarded_xid=79) for i in range(5))
    snap = snapshot(
        node("b", allocatable=7),
        *guarded,
        candidates=(gpu("b", 79),),
        pods=(GpuPod("team-a", "train-0", "b", 8),),
    )
    assert pod_events(plan_isolation(snap, settings(), TEMPLATES)) == []


def trigger_snapshot(*, fabric: bool) -> Snapshot:
    """Node b with GPU pods and GPU loss, held as a fabric fault or as short of its class
    (gpu-pool=a:8, 7 GPUs for the last hour)."""
    n = replace(node("b", allocatable=7), labels=(("gpu-pool", "a"),))
    snap = snapshot(n, pods=(GpuPod("team-a", "train-0", "b", 7),))
    hour = tuple((NOW - timedelta(minutes=m), 7) for m in range(60, -1, -1))
    facts = {"fabric_since": (("b", NOW - timedelta(hours=1)),)} if fabric else {}
    counts = {} if fabric else {"gpu_counts": (("b", hour),)}
    return replace(snap, prom=replace(snap.prom, **facts, **counts))


def test_a_fabric_isolation_tells_the_nodes_gpu_pods():
    actions = plan_isolation(trigger_snapshot(fabric=True), settings(), TEMPLATES)
    assert [a.reason for a in actions if isinstance(a, Cordon)] == ["fabric"]
    (told,) = pod_events(actions)
    assert told.pod == PodRef("team-a", "train-0", "")
    assert "its GPUs on node b: fabric (" in told.message
    assert "holds GPUs of the node" in told.message


def test_a_gpu_short_isolation_tells_no_pod():
    s = settings(gpu_classes="gpu-pool=a:8")
    actions = plan_isolation(trigger_snapshot(fabric=False), s, TEMPLATES)
    assert [a.reason for a in actions if isinstance(a, Cordon)] == ["gpu-short"]
    assert pod_events(actions) == []  # no pod holds the GPU the node lacks


@pytest.mark.parametrize(
    ("fabric", "trigger"),
    [(True, ["--trigger", "fabric"]), (False, ["--trigger", "gpu-short", "--expected-gpus", "8"])],
)
def test_a_node_triggers_cordon_carries_its_node_wide_evidence_job(fabric, trigger):
    s = settings(gpu_classes="gpu-pool=a:8")
    snap = trigger_snapshot(fabric=fabric)
    actions = plan_isolation(snap, s, TEMPLATES)
    (job,) = [a for a in actions if isinstance(a, CreateJob)]
    (cordon,) = [a for a in actions if isinstance(a, Cordon)]
    assert job.name == job_name("evidence", "b", format_time(NOW)) and job.job_kind == "evidence"
    command = job.manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["gpu-node-guard", "evidence", "collect", "--node", "b", *trigger]
    assert matches(layouts.evidence(), command, "b")
    assert job.record[0] == KEYS.evidence_job  # recorded on the node, as the Xid cordon's
    (event,) = [a for a in actions if isinstance(a, EmitEvent) and a.reason == cordon.reason]
    assert f"evidence job/{job.name} (its log: the verdict and the request)" in event.message
    # The return reads it back by the same name (its links go to the load test).
    notes = {KEYS.reason: cordon.reason, KEYS.at: format_time(NOW), KEYS.boot_id: "boot-1"}
    assert evidence_job_name(node("b", cordoned=True, extra=notes)) == job.name


# ── Domain incidents ──────────────────────────────────────────────────────────────────────


def rack_snapshot() -> Snapshot:
    """r7: a (cordoned 55 min ago), b and c candidates; d in r8 alone; e without the label."""
    return snapshot(
        racked(node("a", cordoned=True, guarded_xid=79), "r7"),
        racked(node("b", allocatable=7), "r7"),
        racked(node("c", allocatable=7), "r7"),
        racked(node("d", allocatable=7), "r8"),
        node("e", allocatable=7),
        candidates=(gpu("b", 79), gpu("c", 79), gpu("d", 79), gpu("e", 79)),
        held={"b": 900, "c": 600, "d": 300, "e": 200},
    )


def test_nodes_sharing_the_topology_label_are_one_incident_with_one_request():
    s = settings(topology_label=RACK)
    actions = plan_isolation(rack_snapshot(), s, TEMPLATES)
    lines = [a for a in actions if isinstance(a, Skip) and a.reason == "domain-incident"]
    assert len(lines) == 1 and lines[0].level == "WARN"
    draft = lines[0].detail
    assert draft.startswith(f"domain incident {RACK}=r7: 3 nodes within 60 min: a (cordon xid-79")
    assert "b (candidate xid-79), c (candidate xid-79)" in draft
    assert draft.endswith("nodes: a b c")
    events = [a for a in actions if isinstance(a, EmitEvent) and a.reason == "domain-incident"]
    assert [e.node for e in events] == ["a", "b", "c"]
    assert all(e.event_reason == "GuardDomainIncident" for e in events)
    assert "this node (candidate xid-79) and a, c fail" in events[1].message
    assert f"{RACK}=r7" in events[1].message
    # The isolation itself is unchanged: one cordon, the longest held.
    assert [a.node for a in actions if isinstance(a, Cordon)] == ["b"]


def test_no_label_key_no_incident_and_an_old_isolation_is_no_member():
    snap = rack_snapshot()
    assert domain.incidents(snap, Settings(), [("b", "xid-79"), ("c", "xid-79")]) == ()
    # a's cordon (55 min before NOW) is now older than the window
    later = replace(snap, now=NOW + timedelta(seconds=domain.DOMAIN_WINDOW_S, minutes=6))
    (only,) = domain.incidents(later, settings(topology_label=RACK), [("b", "x"), ("c", "x")])
    assert only.nodes == ("b", "c")
    assert domain.incidents(later, settings(topology_label=RACK), [("b", "x"), ("d", "x")]) == ()


def test_the_breaker_names_the_domain_of_each_candidate_it_holds():
    guarded = tuple(racked(node(f"g{i}", cordoned=True, guarded_xid=79), "r9") for i in range(5))
    snap = snapshot(
        racked(node("b", allocatable=7), "r7"),
        racked(node("c", allocatable=7), "r7"),
        node("e", allocatable=7),
        *guarded,
        candidates=(gpu("b", 79), gpu("c", 79), gpu("e", 79)),
    )
    actions = plan_isolation(snap, settings(topology_label=RACK), TEMPLATES)
    held = {a.node: a.detail for a in actions if isinstance(a, Skip) and a.reason == "breaker-open"}
    assert held["b"].endswith(f"xid-79 waits; domain incident {RACK}=r7 with c")
    assert held["e"].endswith("xid-79 waits")
    # The five guarded nodes of r9 are their own incident, named in the request.
    drafts = [a.detail for a in actions if isinstance(a, Skip) and a.reason == "domain-incident"]
    assert [d.split(":")[0] for d in drafts] == [
        f"domain incident {RACK}=r7",
        f"domain incident {RACK}=r9",
    ]


def test_a_fallback_pick_keeps_the_incident_of_the_first_plan():
    s = settings(topology_label=RACK)
    snap = rack_snapshot()
    first = {a.name for a in plan_isolation(snap, s, TEMPLATES) if isinstance(a, EmitEvent)}
    again = plan_fallback(snap, s, TEMPLATES, frozenset({"b"}))
    assert [a.node for a in again if isinstance(a, Cordon)] == ["c"]
    shared = [a for a in again if isinstance(a, EmitEvent) and a.reason == "domain-incident"]
    assert len(shared) == 1 and shared[0].name in first


@pytest.mark.parametrize(
    ("minutes", "want"),
    [(5, "repair-evidence"), (30, "evidence-missing"), (90, None)],
    ids=["fresh-cordon-gets-it-again", "later-a-warn", "after-the-event-nothing"],
)
def test_a_node_triggers_lost_evidence_job_is_made_again_as_an_xid_cordons(minutes, want):
    """A node trigger's cordon whose evidence Job was lost after the cordon's write: the same
    node-wide Job (same name, same argv) within two cycles, then a WARN naming its node-wide
    command, as for an Xid cordon's."""
    s = settings(gpu_classes="gpu-pool=a:8")
    actions = plan_isolation(trigger_snapshot(fabric=False), s, TEMPLATES)
    (made,) = [a for a in actions if isinstance(a, CreateJob)]
    (cordon,) = [a for a in actions if isinstance(a, Cordon)]
    cordoned = node("b", cordoned=True, allocatable=7, extra=dict(cordon.annotations))
    later = replace(snapshot(cordoned), now=NOW + timedelta(minutes=minutes))
    again = [a for a in plan_return(later, s, TEMPLATES) if a.reason in (want or "-",)]
    if want is None:
        assert again == []
    elif want == "repair-evidence":
        (job,) = again
        assert isinstance(job, CreateJob) and job.name == made.name
        spec = [j.manifest["spec"]["template"]["spec"]["containers"][0] for j in (job, made)]
        assert spec[0]["command"] == spec[1]["command"]  # --trigger gpu-short --expected-gpus 8
    else:
        (warn,) = again
        assert warn.level == "WARN" and f"job/{made.name} does not exist" in warn.detail
        assert warn.next.endswith("evidence collect --node b --trigger gpu-short on the node")
