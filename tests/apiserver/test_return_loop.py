"""The return in the run's later turns (guard/returns.py) on a real kube-apiserver and a real
Prometheus: a power-cycled node's conformance pass creates its load test in the same run, the
load test's pass uncordons it in the same run; a result that lands after the run's end is the next
run's; a replaced load-test Job is still no pass.

The run is `run --at T --watch --output json`, in this process, in the replayed time
(guard.watch.ReplayClock): each of its waits passes at once, and this test plays the Job
controller and the kubelet during those waits (`Playing`), at the replayed instants it names.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from kubernetes import client

from guard.cli import cli
from guard.example.promserver import LocalPrometheus
from guard.plan.return_loop import RETURN_POLL_S
from guard.watch import ReplayClock
from tests.apiserver.guard_run import (
    CYCLE,
    EVIDENCE,
    ISOLATE_AT,
    LOADTEST_PASS,
    PASS,
    RETURN_AT,
    T0,
    GuardRun,
    copy_of,
    faulted,
    finish,
    mine,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import JOBS_NS, ControlPlane, create
from tests.apiserver.test_lifecycle_e2e import lifecycle_node, the_job
from tests.scenario_build import PodTimeline

pytestmark = pytest.mark.apiserver
__all__ = ["lifecycle_node"]  # the fixture, shared with the lifecycle tests

LOOP, LATE, FOREIGN, HELD = "rl-loop", "rl-late", "rl-foreign", "rl-held"
CONFORMANCE_S = 10  # the conformance Job's run (docs/lifecycle.md: seconds)
LOADTEST_S = 90  # the load test's (docs/lifecycle.md)

Play = Callable[[datetime], None]
# A GPU pod on HELD that kube-state-metrics reports Running until 45 s into the return's run.
POD_END = RETURN_AT + timedelta(seconds=45)
TRAIN = PodTimeline(
    "research", "train-0", HELD, gpus=1, running=((0, 1), (int((POD_END - T0).total_seconds()), 0))
)


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    cordoned = ((int((ISOLATE_AT - T0).total_seconds()) + 60, 1),)  # kube-state-metrics: after
    nodes = (faulted(LOOP), faulted(LATE), faulted(FOREIGN), faulted(HELD, cordoned))
    with scenario_prometheus(*nodes, pods=(TRAIN,)) as server:
        yield server


class Playing(ReplayClock):
    """The replayed clock with the cluster's part played at each wait's end."""

    play: Play = staticmethod(lambda at: None)

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        type(self).play(self.at)


def watched_run(prom: LocalPrometheus, kubeconfig: Path, at: datetime, play: Play) -> GuardRun:
    """`run --at at --watch` in this process, `play` called at every replayed wait."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["run", "--prometheus-url", prom.url, "--kubeconfig", str(kubeconfig)]
    argv += ["--at", at.isoformat(), "--watch", "--output", "json", "--log-format", "json"]
    clock = type("Clock", (Playing,), {"play": staticmethod(play)})
    with mock.patch("guard.watch.ReplayClock", clock), redirect_stdout(out), redirect_stderr(err):
        try:
            cli.main(argv, standalone_mode=False)
            rc = 0
        except SystemExit as exc:
            rc = int(exc.code or 0)
    log = [json.loads(line) for line in err.getvalue().splitlines() if line.startswith("{")]
    plan = json.loads(out.getvalue()) if out.getvalue().strip() else {}
    assert rc == 0, err.getvalue()
    return GuardRun(rc, dict(plan), log)


def _power_cycled(
    prom: LocalPrometheus,
    kubeconfig: Path,
    lifecycle_node: Callable[..., str],
    core: client.CoreV1Api,
    admin: client.ApiClient,
    deployed: ControlPlane,
    name: str,
) -> str:
    node = lifecycle_node(name, boot="boot-1", allocatable=7)
    assert mine(run_guard(prom, kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    finish(deployed, admin, the_job(admin, node, "evidence"), EVIDENCE, ok=True)
    set_status(core, node, boot="boot-2", allocatable=8)
    return node


def _unfinished(job: dict[str, Any]) -> bool:
    return not (job.get("status") or {}).get("conditions")


class Cluster:
    """The Job controller and the kubelet: each guard Job of the node ends `CONFORMANCE_S` or
    `LOADTEST_S` after the replayed instant it was first seen, with the result given."""

    def __init__(self, deployed: ControlPlane, admin: client.ApiClient, node: str) -> None:
        self.deployed, self.admin, self.node = deployed, admin, node
        self.seen: dict[str, datetime] = {}
        self.ended: list[tuple[str, datetime]] = []
        self.stop_at: datetime | None = None  # no Job ends at or after this instant
        self.loadtest_result = LOADTEST_PASS
        self.before_pass: Callable[[dict[str, Any]], dict[str, Any]] = lambda job: job

    def __call__(self, at: datetime) -> None:
        for kind, took, message in (
            ("conformance", CONFORMANCE_S, PASS),
            ("loadtest", LOADTEST_S, self.loadtest_result),
        ):
            for job in (j for j in the_jobs(self.admin, self.node, kind) if _unfinished(j)):
                name = job["metadata"]["name"]
                first = self.seen.setdefault(name, at)
                if self.stop_at is not None and at >= self.stop_at:
                    continue
                if at >= first + timedelta(seconds=took):
                    job = self.before_pass(job)
                    finish(self.deployed, self.admin, job, message, ok=True)
                    self.ended.append((kind, at))


def the_jobs(admin: client.ApiClient, node: str, kind: str) -> list[dict[str, Any]]:
    try:
        return [the_job(admin, node, kind)]
    except ValueError:  # none yet
        return []


def _actions(run: GuardRun, node: str) -> list[tuple[str, str]]:
    return mine(run.plan, node)


def test_the_conformance_pass_and_the_load_test_pass_return_the_node_in_the_same_run(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = _power_cycled(prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, LOOP)
    cluster = Cluster(deployed, admin, node)
    run = watched_run(prom, guard_kubeconfig, RETURN_AT, cluster)
    assert [kind for kind, _ in cluster.ended] == ["conformance", "loadtest"]
    # One run: the cycle's conformance Job, the watch's load test after its pass, the uncordon
    # after the load test's pass.
    assert _actions(run, node) == [
        ("annotate", "pcie-links"),
        ("create-job", "conditions-met"),
        ("skip", "conformance-running"),  # the watch's turn on its Job's appearance
        ("create-job", "conditions-met"),
        ("skip", "loadtest-running"),
        ("uncordon", "loadtest-passed"),
        ("event", "returned"),
    ]
    assert not core.read_node(node).spec.unschedulable
    # Each step within one return poll of the result it waited for.
    (_, conformance_end), (_, loadtest_end) = cluster.ended
    uncordon = next(line for line in run.log if line.get("event") == "uncordon")
    assert uncordon["node"] == node
    made = the_job(admin, node, "loadtest")
    first_seen = cluster.seen[made["metadata"]["name"]]
    assert first_seen - conformance_end <= timedelta(seconds=2 * RETURN_POLL_S)
    (end,) = run.lines("watch-end")
    assert end["return_turns"] >= 2 and end["why"] == "deadline"
    assert loadtest_end - RETURN_AT <= timedelta(seconds=CONFORMANCE_S + LOADTEST_S + 30)


def test_a_result_that_lands_after_the_run_is_taken_by_the_next_run(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = _power_cycled(prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, LATE)
    cluster = Cluster(deployed, admin, node)
    cluster.stop_at = RETURN_AT  # nothing ends while this run is up
    run = watched_run(prom, guard_kubeconfig, RETURN_AT, cluster)
    assert _actions(run, node) == [
        ("annotate", "pcie-links"),
        ("create-job", "conditions-met"),
        ("skip", "conformance-running"),
    ]
    assert the_jobs(admin, node, "loadtest") == []
    finish(deployed, admin, the_job(admin, node, "conformance"), PASS, ok=True)  # after its end
    later = run_guard(prom, guard_kubeconfig, RETURN_AT + CYCLE).plan
    assert mine(later, node) == [("create-job", "conditions-met")]
    assert the_job(admin, node, "loadtest")  # the load test, made by the next run's cycle
    assert core.read_node(node).spec.unschedulable is True


def test_a_replaced_load_test_job_is_no_pass_in_the_same_run_either(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    node = _power_cycled(prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, FOREIGN)
    cluster = Cluster(deployed, admin, node)
    replaced: list[str] = []

    def impostor(job: dict[str, Any]) -> dict[str, Any]:
        """A namespace admin's Job of the load test's name, which passes in its place."""
        if job["metadata"]["labels"]["app.kubernetes.io/component"] != "loadtest":
            return job
        name = job["metadata"]["name"]
        client.BatchV1Api(admin).delete_namespaced_job(
            name, JOBS_NS, propagation_policy="Background"
        )
        create(admin, copy_of(job))
        found = the_job(admin, node, "loadtest")
        replaced.append(found["metadata"]["uid"])
        assert found["metadata"]["uid"] != job["metadata"]["uid"]
        return found

    cluster.before_pass = impostor
    run = watched_run(prom, guard_kubeconfig, RETURN_AT, cluster)
    assert replaced, "the load test ran in the run"
    actions = _actions(run, node)
    assert ("skip", "loadtest-foreign") in actions and ("event", "loadtest-foreign") in actions
    assert ("uncordon", "loadtest-passed") not in actions
    assert core.read_node(node).spec.unschedulable is True


def test_a_return_a_prometheus_row_holds_moves_in_the_same_run_once_the_row_clears(
    prom, guard_kubeconfig, lifecycle_node, core, admin, deployed
):
    """A GPU pod still running on the node holds its return (`gpu-pods-running`, read from
    kube-state-metrics through Prometheus); it ends mid-run, no API input moves, and the run's
    re-read on the scrape grid takes the next steps: conformance, load test, uncordon."""
    node = _power_cycled(prom, guard_kubeconfig, lifecycle_node, core, admin, deployed, HELD)
    cluster = Cluster(deployed, admin, node)
    run = watched_run(prom, guard_kubeconfig, RETURN_AT, cluster)
    actions = _actions(run, node)
    assert actions.index(("skip", "gpu-pods-running")) < actions.index(
        ("uncordon", "loadtest-passed")
    )
    # The cycle's line, and the turn on its own pcie-links write; not one a scrape while held.
    assert actions.count(("skip", "gpu-pods-running")) <= 2
    assert [kind for kind, _ in cluster.ended] == ["conformance", "loadtest"]
    assert not core.read_node(node).spec.unschedulable
    made = cluster.seen[the_job(admin, node, "conformance")["metadata"]["name"]]
    assert POD_END <= made <= POD_END + timedelta(seconds=2 * 15)  # within a scrape of its end
