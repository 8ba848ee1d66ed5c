"""A driver/NVML mismatch end to end: a real kube-apiserver with the guard's RBAC and admission
policies, a real Prometheus with the node agent's and kube-state-metrics' series, the guard run
as its own ServiceAccount. The node is isolated without a reboot, comes back only after one,
with its kube-proxy and CNI pods Ready and a passed load test; a lost cordon Event is written
again; a person's uncordon sticks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from guard.ledger import parse_time
from guard.settings import Settings
from tests.apiserver.guard_run import (
    KEYS,
    NO_CF,
    NS,
    ONSET_S,
    T0,
    finish,
    guard_jobs,
    mine,
    node_events,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import JOBS_NS, MERGE_PATCH
from tests.apiserver.test_guard_e2e import LOADTEST_PASS
from tests.scenario_build import (
    AGENT_DETAIL,
    AGENT_FAIL,
    AGENT_PASS,
    NodeTimeline,
    PodTimeline,
)

pytestmark = pytest.mark.apiserver

NODE, CANCEL = "e2e-mismatch", "e2e-mismatch-cancel"
ONSET = T0 + timedelta(seconds=ONSET_S)
HELD_AT = ONSET + timedelta(minutes=10)  # the default hold window after the driver changed
CORDONED_S = ONSET_S + 10 * 60 + 15  # kube-state-metrics' first scrape after the cordon
REBOOTED_S = ONSET_S + 20 * 60  # the agent reports the match from the new boot
PROXY_READY_S = ONSET_S + 35 * 60  # kube-proxy came up late after the reboot
RETURN_AT = ONSET + timedelta(minutes=40)
FAILED = AGENT_DETAIL[AGENT_FAIL][1]
CHECKED = {KEYS.checked_boot: "boot-1 2026-09-20T00:00:00Z job/gng-cf-mismatch-00000000"}


def pods() -> tuple[PodTimeline, ...]:
    proxy = PodTimeline(
        "kube-system",
        f"kube-proxy-{NODE}",
        NODE,
        created_by=("Node", NODE),
        ready=((0, 1), (REBOOTED_S, 0), (PROXY_READY_S, 1)),
    )
    canal = PodTimeline(
        "kube-system",
        "rke2-canal-m4x7q",
        NODE,
        created_by=("DaemonSet", "rke2-canal"),
        ready=((0, 1),),
    )
    return proxy, canal


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    mismatched = NodeTimeline(
        NODE,
        agent=((0, AGENT_PASS), (ONSET_S, AGENT_FAIL), (REBOOTED_S, AGENT_PASS)),
        unschedulable=((CORDONED_S, 1),),
    )
    # kube-state-metrics sees the cordon, then the person's uncordon five minutes later
    cancelled = NodeTimeline(
        CANCEL,
        agent=((0, AGENT_PASS), (ONSET_S, AGENT_FAIL)),
        unschedulable=((CORDONED_S, 1), (CORDONED_S + 300, 0)),
    )
    with scenario_prometheus(mismatched, cancelled, pods=pods()) as server:
        yield server


@pytest.fixture
def checked_gpu_node(gpu_node: Callable[..., str], core: client.CoreV1Api) -> Callable[..., str]:
    """A GPU node whose boot passed the after-reboot check: the plan is the mismatch's alone."""

    def make(name: str, **kw: Any) -> str:
        gpu_node(name, **kw)
        core.patch_node(name, {"metadata": {"annotations": CHECKED}}, _content_type=MERGE_PATCH)
        return name

    return make


def ledger_keys(core: client.CoreV1Api) -> set[str]:
    ledgers = core.list_namespaced_config_map(NS, field_selector="metadata.name=gpu-fault-ledger")
    return {key for cm in ledgers.items for key in (cm.data or {})}


def guard_notes(found: Any) -> dict[str, str]:
    notes = found.metadata.annotations or {}
    return {k: v for k, v in notes.items() if k.startswith(KEYS.prefix)}


def test_a_held_mismatch_isolates_without_a_reboot_and_returns_after_one(
    prom, guard_kubeconfig, checked_gpu_node, core, admin, deployed
):
    node = checked_gpu_node(NODE, allocatable=8)
    early = run_guard(prom, guard_kubeconfig, HELD_AT - timedelta(minutes=1)).plan
    assert mine(early, node) == []  # failing for 9 minutes: not held yet
    plan = run_guard(prom, guard_kubeconfig, HELD_AT).plan
    assert mine(plan, node) == [("cordon", "nvml-mismatch"), ("event", "nvml-mismatch")]
    found = core.read_node(node)
    assert found.spec.unschedulable is True
    assert guard_notes(found) == {
        **CHECKED,
        KEYS.reason: "nvml-mismatch",
        KEYS.at: f"{HELD_AT:%Y-%m-%dT%H:%M:%SZ}",
        KEYS.boot_id: "boot-1",  # the boot it had: isolated without a reboot
        KEYS.gpu_capacity: "8",
    }
    (event,) = [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
    assert event["type"] == "Warning" and FAILED in event["note"]
    assert ledger_keys(core) == set() and guard_jobs(admin, node) == []  # no card fault

    again = run_guard(prom, guard_kubeconfig, HELD_AT).plan
    assert mine(again, node) == [
        ("skip", "same-boot"),
        ("event", "same-boot"),
        ("skip", "already-cordoned"),
    ]
    # The cordon Event lost (the API server went away right after the cordon): the next cycle
    # writes it again under the same name, though the cordon names no GPU.
    client.EventsV1Api(admin).delete_namespaced_event(event["metadata"]["name"], "default")
    repaired = run_guard(prom, guard_kubeconfig, HELD_AT + timedelta(minutes=5)).plan
    assert ("event", "repair-event") in mine(repaired, node)
    (back,) = [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]
    assert back["metadata"]["name"] == event["metadata"]["name"]
    assert back["type"] == "Warning" and "written late" in back["note"]

    set_status(core, node, boot="boot-2", allocatable=8)  # rebooted into the installed driver
    waiting = run_guard(prom, guard_kubeconfig, RETURN_AT - timedelta(minutes=8)).plan
    assert mine(waiting, node) == [("skip", "service-network-not-ready")]
    first = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan  # the load-test step alone
    assert mine(first, node) == [
        ("create-job", "conditions-met")
    ]  # the loadtest-job policy took it
    (loadtest,) = guard_jobs(admin, node)
    assert "--xid" not in loadtest.spec.template.spec.containers[0].command
    stored = client.BatchV1Api(admin).read_namespaced_job(
        loadtest.metadata.name, JOBS_NS, _preload_content=False
    )
    finish(deployed, admin, json.loads(stored.data), LOADTEST_PASS, ok=True)  # its Pod's pass
    done = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert mine(done, node) == [("uncordon", "loadtest-passed"), ("event", "returned")]
    found = core.read_node(node)
    assert not found.spec.unschedulable
    made = guard_notes(found).pop(KEYS.loadtest_job)
    assert made.startswith(f"{loadtest.metadata.name} {loadtest.metadata.uid} ")
    assert {k: v for k, v in guard_notes(found).items() if k != KEYS.loadtest_job} == {
        **CHECKED,
        KEYS.returned: f"{RETURN_AT:%Y-%m-%dT%H:%M:%SZ} job/{loadtest.metadata.name}",
    }


def test_a_mismatch_hold_that_completes_during_the_watch_is_cordoned_by_that_run(
    prom, guard_kubeconfig, checked_gpu_node, core, deployed
):
    """Pending a minute before its hold completes: the run's watch re-reads that node's
    nvidia-match history on the scrape grid and cordons when the hold completes, not the next
    run five minutes later."""
    node = checked_gpu_node(NODE, allocatable=8)
    run = run_guard(prom, guard_kubeconfig, HELD_AT - timedelta(minutes=1), "--watch")
    (pending,) = [line for line in run.lines("pending") if line["node"] == node]
    assert pending["reason"] == "nvml-mismatch"
    assert [line["node"] for line in run.lines("cordon")] == [node]
    assert mine(run.plan, node) == [("cordon", "nvml-mismatch"), ("event", "nvml-mismatch")]
    (end,) = run.lines("watch-end")
    assert (end["why"], end["cordoned"]) == ("cordon-landed", node)
    at = parse_time(guard_notes(core.read_node(node))[KEYS.at])
    assert HELD_AT <= at <= HELD_AT + timedelta(seconds=Settings().scrape_interval_s)


def test_a_persons_uncordon_of_a_mismatch_cordon_sticks_in_that_boot(
    prom, guard_kubeconfig, checked_gpu_node, core
):
    node = checked_gpu_node(CANCEL, allocatable=8)
    assert mine(run_guard(prom, guard_kubeconfig, HELD_AT).plan, node)[0] == (
        "cordon",
        "nvml-mismatch",
    )
    core.patch_node(node, {"spec": {"unschedulable": False}}, _content_type=MERGE_PATCH)
    later = HELD_AT + timedelta(minutes=10)
    cleared = run_guard(prom, guard_kubeconfig, later).plan
    assert mine(cleared, node) == [
        ("clear-annotations", "human-uncordon"),
        ("event", "human-uncordon"),
        ("skip", "already-guarded"),  # this cycle's snapshot still has the cordon's reason
    ]
    assert guard_notes(core.read_node(node)) == {
        **CHECKED,
        KEYS.cancelled: f"boot-1 - nvml-mismatch {later:%Y-%m-%dT%H:%M:%SZ}",
    }
    still = run_guard(prom, guard_kubeconfig, later + timedelta(minutes=5)).plan
    assert mine(still, node) == [("skip", "cancelled")]
    assert not core.read_node(node).spec.unschedulable
