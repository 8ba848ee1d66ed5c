"""The return in the run's later turns (guard/returns.py) on the real node: after the power
cycle, one `run --watch` creates the conformance Job of the new boot, which this host's kubelet
runs; the run's return turn reads its pass and creates the load test in the same run, and a
later turn of that run reads the kubelet's refusal of it (OutOfcpu: the node offers 1.5 CPUs on
purpose, and has no torch image, so no load test passes here) and keeps the node cordoned.

The run is in this process, in replayed time (tests/apiserver/test_return_loop.py
`watched_run`); each of its waits also lets half a second of real time pass, so the kubelet and
the Job controller act while the run watches."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client

from guard.example.promserver import LocalPrometheus
from tests.apiserver.guard_run import ISOLATE_AT, RETURN_AT, forget_slot, run_guard
from tests.apiserver.test_return_loop import watched_run
from tests.node.jobs import follow
from tests.node.node import Node, reboot
from tests.node.test_incident import _said, _the_job, prom

pytestmark = pytest.mark.node
__all__ = ["prom"]  # the fixture, shared with the incident test

REAL_S_PER_WAIT = 0.5


def _real_time(at: datetime) -> None:
    time.sleep(REAL_S_PER_WAIT)


def test_the_conformance_pass_creates_the_load_test_in_the_same_run_on_the_real_node(
    node: Node,
    prom: LocalPrometheus,
    gpu_node: str,
    admin: client.ApiClient,
    guard_kubeconfig: Path,
) -> None:
    core = client.CoreV1Api(admin)
    first = run_guard(prom, guard_kubeconfig, ISOLATE_AT)
    assert ("INFO", "cordon", "xid-79") in _said(first, gpu_node)
    evidence = follow(
        admin, guard_kubeconfig, _the_job(admin, gpu_node, "evidence"), time.monotonic()
    )
    assert evidence.read.status == "succeeded", evidence.pod["status"]
    reboot(node, str(uuid.uuid4()))

    forget_slot(guard_kubeconfig)
    run = watched_run(prom, guard_kubeconfig, RETURN_AT, _real_time)
    made = [x["kind"] for x in run.log if x.get("node") == gpu_node and x["event"] == "create-job"]
    assert made == ["conformance", "loadtest"]  # both in this one run
    said = _said(run, gpu_node)
    creates = [i for i, (_, event, _) in enumerate(said) if event == "create-job"]
    rejected = said.index(("WARN", "skip", "job-rejected"))
    assert creates[-1] < rejected, said  # the load test's refusal, read by the same run
    assert said[rejected + 1] == ("INFO", "event", "job-rejected"), said
    assert ("INFO", "uncordon", "loadtest-passed") not in said
    conformance = _the_job(admin, gpu_node, "conformance")
    assert conformance["status"].get("succeeded") == 1
    (end,) = run.lines("watch-end")
    assert end["return_turns"] >= 2
    assert core.read_node(gpu_node).spec.unschedulable is True
