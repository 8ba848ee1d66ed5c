"""guard.plan.return_loop: which nodes the run's return turns follow, and when a node's return
inputs moved (its Node, its Jobs and their results; never its resourceVersion alone)."""

from __future__ import annotations

from dataclasses import replace

from guard.model import JobInfo, NodeInfo, Unreadable
from guard.plan.return_loop import ReturnInputs, inputs, moved, of_snapshot
from guard.plan.return_loop import followed as followed_nodes
from tests.builders import PASSED, S, back_node, node, snapshot


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
