"""Prometheus' own time against each engine, and a cycle whose pod clock runs ahead of it
(guard.plan.instant): for an instant in the future Prometheus answers with each series' last
sample, so a loss would "hold" until then. The pod's clock is injected: the run's `Anchor`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from guard.doors.prom import PromClient
from guard.example.scenario import KSM_POD, NodeTimeline, Scenario
from guard.settings import Settings
from tests.engines import LocalPrometheus, scenario_server
from tests.tiers import require_engine

# `gpu-node-guard` with the pod's wall clock `argv[1]` seconds ahead (the run's Anchor).
SKEWED = """
import sys, time
from datetime import UTC, datetime, timedelta
from guard.doors.retry import Anchor
ahead = timedelta(seconds=float(sys.argv.pop(1)))
Anchor.start = classmethod(lambda cls: cls(datetime.now(UTC) + ahead, time.monotonic()))
from guard.cli import main
main()
"""
NODE = "skew79"
LOST_S = 30  # the GPU loss began this long before the data's last sample
AHEAD_S = 180  # the pod's clock: ahead by more than the fast hold (120 s) less the loss


def test_every_engine_answers_its_own_time_and_takes_partial_response_false(
    prom: LocalPrometheus,
) -> None:
    """`time()` asked at no instant gives the engine's clock; every query carries Thanos'
    `partial_response=false` (Prometheus and VictoriaMetrics take the extra parameter)."""
    client = PromClient(prom.url)
    sent: list[str] = []
    client.session.hooks["response"].append(lambda r, *_a, **_k: sent.append(r.request.body))
    theirs = client.server_time()
    assert abs((theirs - datetime.now(UTC)).total_seconds()) < 60
    assert client.vector("one", "vector(1)", theirs)[0].value == 1.0
    assert sent and all("partial_response=false" in body for body in sent)


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[LocalPrometheus, datetime]]:
    """Prometheus 2 over data that ends now: Xid 79 and one GPU lost for the last LOST_S."""
    require_engine("prometheus2")
    end = datetime.now(UTC).replace(microsecond=0)
    start = end.replace(second=0) - timedelta(minutes=40)
    duration = int((end - start).total_seconds())
    onset = duration - LOST_S
    node = NodeTimeline(NODE, gpus=8, xids=((onset, 4, 79),), allocatable=((onset, 7),))
    scenario = Scenario(start=start, duration_s=duration, nodes=(node,), pods=(KSM_POD,))
    with scenario_server(scenario) as server:
        yield server, start + timedelta(seconds=onset)


def cluster_file(tmp_path: Path) -> Path:
    item = {
        "kind": "Node",
        "metadata": {"name": NODE, "resourceVersion": "7"},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": "boot-1"},
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "7"},
        },
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [item]}))
    return path


def run_ahead(prom: LocalPrometheus, snapshot: Path, ahead_s: int) -> tuple[dict[str, Any], str]:
    args = ["--prometheus-url", prom.url, "--cluster-snapshot", str(snapshot), "--output", "json"]
    proc = subprocess.run(
        [sys.executable, "-c", SKEWED, str(ahead_s), "run", *args, "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_a_pod_clock_ahead_never_shortens_the_hold(live, tmp_path: Path) -> None:
    """The pod 180 s ahead: the cycle asks about Prometheus' time, so the loss has held what it
    really held (under the 120 s fast hold: pending, no cordon), not 180 s more; one WARN
    `clock-skew` line says so, and the cycle's instant is not in the future."""
    prom, onset = live
    plan, log = run_ahead(prom, cluster_file(tmp_path), AHEAD_S)
    at = datetime.fromisoformat(plan["counts"]["at"])
    assert at <= datetime.now(UTC)
    assert not [a for a in plan["actions"] if a["type"] == "cordon"], plan["actions"]
    (waiting,) = plan["pending"]
    held = (at - onset).total_seconds()
    assert waiting["node"] == NODE and waiting["held_s"] < Settings().fast_hold_window_s
    assert waiting["held_s"] <= held
    lines = [json.loads(line) for line in log.splitlines()]
    (skew,) = [r for r in lines if r["event"] == "clock-skew"]
    assert skew["level"] == "WARN" and AHEAD_S - 30 < skew["skew_s"] < AHEAD_S + 30


def test_clocks_that_agree_say_nothing(live, tmp_path: Path) -> None:
    prom, _ = live
    _, log = run_ahead(prom, cluster_file(tmp_path), 0)
    assert '"clock-skew"' not in log
