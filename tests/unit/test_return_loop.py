"""guard.plan.return_loop: which nodes the run's return turns follow, and when a node's return
inputs moved (its Node, its Jobs and their results; never its resourceVersion alone; the
Prometheus row that holds it, re-read on the scrape grid)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs

import responses

from guard.doors.prom import PromClient
from guard.gpu_classes import kept_label_keys
from guard.model import GpuPod, JobInfo, NodeInfo, PromView, Snapshot, Unreadable
from guard.names import Annotations
from guard.plan.return_loop import ReturnInputs, cleared, held, inputs, moved, of_snapshot
from guard.plan.return_loop import followed as followed_nodes
from guard.plan.units import plan_return
from guard.read import parse_nodes
from guard.returns import Returns
from tests.builders import NOW, PASSED, TEMPLATES, S, back_node, node, snapshot
from tests.unit.test_prom_boundary import raw_node


def _inputs(*nodes: NodeInfo, jobs: tuple[JobInfo, ...] = ()) -> dict[str, ReturnInputs]:
    snap = snapshot(*nodes, jobs=tuple(jobs), own=False)
    return of_snapshot(snap, tuple(n.name for n in nodes))


def test_the_run_follows_the_nodes_it_isolates_and_readable_only():
    snap = snapshot(back_node("b"), back_node("c"), node("healthy"), own=False)
    assert followed_nodes(snap, S) == ("b", "c")
    hidden = replace(back_node("c"), unreadable=(Unreadable("annotation", "x", "bad", "fix"),))
    assert followed_nodes(snapshot(back_node("b"), hidden, own=False), S) == ("b",)


def test_a_new_resource_version_alone_is_no_move():
    before = _inputs(back_node("b"))
    after = _inputs(replace(back_node("b"), resource_version="999"))
    assert moved(before, after) == ()


def test_a_new_boot_or_ready_moves_the_node():
    before = _inputs(back_node("b", boot="boot-1"), back_node("c"))
    assert moved(before, _inputs(back_node("b", boot="boot-2"), back_node("c"))) == ("b",)
    assert moved(before, _inputs(back_node("b", boot="boot-1"), back_node("c", ready=False))) == (
        "c",
    )


def test_a_job_that_appears_finishes_or_gets_its_result_moves_its_node_only():
    running = JobInfo("gng-loadtest-b", "loadtest", "b", "running", uid="u1")
    done = replace(running, status="succeeded")
    read = replace(done, result=PASSED)
    nodes = (back_node("b"), back_node("c"))
    none, run_, fin, res = (_inputs(*nodes, jobs=j) for j in ((), (running,), (done,), (read,)))
    assert moved(none, run_) == ("b",)
    assert moved(run_, fin) == ("b",)
    assert moved(fin, res) == ("b",)
    assert moved(res, res) == ()


def test_a_replaced_job_moves_its_node():
    mine = JobInfo("gng-loadtest-b", "loadtest", "b", "succeeded", uid="u1", result=PASSED)
    theirs = replace(mine, uid="u2")
    assert moved(_inputs(back_node("b"), jobs=(mine,)), _inputs(back_node("b"), jobs=(theirs,)))


def test_a_deleted_node_moves_and_a_node_new_to_the_turn_moves():
    before = _inputs(back_node("b"))
    gone = {"b": inputs({}, (), "b")}
    assert moved(before, gone) == ("b",)
    assert moved({}, before) == ("b",)


# ---- a return held by a row that reads Prometheus: re-read on the scrape grid -----------------

BUSY = GpuPod("research", "train-0", "b", 1)


def _busy(*names: str) -> Snapshot:
    pods = tuple(replace(BUSY, node=n) for n in names)
    return snapshot(*(back_node(n) for n in names), pods=pods, own=False)


def test_a_node_held_by_a_prometheus_row_moves_on_the_grid_once_the_row_clears():
    snap = _busy("b")
    ((row, case),) = held(snap, S, ("b",))
    assert row.word == "gpu-pods-running" and row.reads == ("gpu-pods",)
    still = PromView(gpu_pods=(BUSY,))
    assert cleared(((row, case),), still, NOW) == ()  # the same pod: no turn, no line
    assert cleared(((row, case),), PromView(), NOW) == ("b",)
    # That node's turn, planned on what it re-reads, takes its next step: the load test.
    after = replace(snap, prom=PromView(), gpu_pods=())
    assert [a.reason for a in plan_return(after, S, TEMPLATES) if a.node] == ["conditions-met"]
    assert [a.reason for a in plan_return(snap, S, TEMPLATES) if a.node] == ["gpu-pods-running"]


def test_a_node_an_api_row_holds_is_not_read_on_the_grid():
    assert held(snapshot(back_node("b", ready=False), own=False), S, ("b",)) == ()
    assert held(_busy("b"), S, ()) == ()  # not followed


class _Grid(Returns):
    """The return's turns without the API: `turned` records the nodes each turn was for."""

    turned: list[tuple[str, ...]]

    def _turn(self, now: datetime, changed: tuple[str, ...]) -> None:
        self.turned.append(changed)


def _grid_wake(count: int, pods_stay: bool) -> tuple[int, list[tuple[str, ...]]]:
    """One scrape-grid wake-up with `count` nodes the gpu-pods row holds: (requests, turns)."""
    names = tuple(f"busy-{i:03d}.gpu" for i in range(count))
    sent: list[str] = []

    def reply(request):
        form = parse_qs(request.body)
        t, query = float(form["time"][0]), form["query"][0]
        sent.append(query)
        pods = [
            {"metric": {"namespace": "research", "pod": "train-0", "node": n}, "value": [t, "1"]}
            for n in names
        ]
        kind = "matrix" if query.endswith("s]") else "vector"
        result = pods if pods_stay and query.startswith("(sum by (namespace, pod") else []
        body = {"status": "success", "data": {"resultType": kind, "result": result}}
        return 200, {"Content-Type": "application/json"}, json.dumps(body)

    prom = PromClient("http://prom.test", timeout_s=1)
    snap = _busy(*names)
    run = SimpleNamespace(s=S, prom=prom)
    grid = _Grid(run, NOW, names, held=held(snap, S, names))  # type: ignore[arg-type]
    grid.turned = []
    with responses.RequestsMock() as mocked:
        mocked.add_callback(responses.POST, "http://prom.test/api/v1/query", callback=reply)
        grid.on_grid(NOW)
    named = [n.replace(".", "[.]") if count > 1 else n for n in names]
    assert all(any(n in q for q in sent) for n in named)  # each node in the one batch
    return prom.requests_made, grid.turned


def test_the_grid_re_read_sends_the_same_requests_whatever_the_number_of_held_nodes():
    one, turned = _grid_wake(1, pods_stay=True)
    many, turned_many = _grid_wake(40, pods_stay=True)
    assert one == many == 1 and turned == turned_many == []
    _, cleared_turns = _grid_wake(40, pods_stay=False)
    assert cleared_turns == [tuple(f"busy-{i:03d}.gpu" for i in range(40))]  # one turn for all


class _Kube:
    """The API as the return's poll reads it: one Node, no Jobs, no Pods."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj

    def node(self, name: str) -> dict[str, Any]:
        return self.obj

    def jobs(self, *_: object) -> list[dict[str, Any]]:
        return []

    def pods(self, *_: object) -> list[dict[str, Any]]:
        return []


def test_the_poll_reads_a_node_with_the_labels_the_cycle_keeps_so_a_topology_label_is_no_move():
    s = replace(S, topology_label="example.com/rack")
    obj = {
        **raw_node("b"),
        "metadata": {"name": "b", "uid": "u", "labels": {"example.com/rack": "r1"}},
    }
    keys, labels = (
        Annotations(s.annotation_prefix),
        kept_label_keys(s.gpu_classes, s.topology_label),
    )
    snap = snapshot(*parse_nodes([obj], keys, "the API server", labels)[0], own=False)
    poll = Returns(SimpleNamespace(s=s, kube=_Kube(obj)), NOW, ("b",), of_snapshot(snap, ("b",)))  # type: ignore[arg-type]
    assert moved(poll.seen, poll._light()) == ()
