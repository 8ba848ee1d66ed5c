"""Prometheus' own time against each engine, the run's clock (guard.plan.instant; unit
tests/unit/test_instant.py), and a live run with the pod's clock two minutes off."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from guard import cli as cli_module
from guard.doors.retry import Anchor
from tests.engines import LocalPrometheus, scenario_server
from tests.prom_client import PromClient
from tests.scenario_build import NodeTimeline, Scenario
from tests.tiers import require_engine


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


HOLD_S = 120  # Xid 79's hold (the fast path), by default
HELD_S = 60  # how long the loss has held when the run starts


@contextmanager
def loss_held_a_minute() -> Iterator[tuple[LocalPrometheus, datetime]]:
    """Xid 79 and one GPU lost on `clock-a` for the last minute, in real time; no sample later
    than the real now (Prometheus answers a future instant with the last one)."""
    require_engine("prometheus2")
    end = datetime.fromtimestamp(time.time() // 15 * 15, UTC)
    onset = 30 * 60 - HELD_S
    node = NodeTimeline("clock-a", xids=((onset, 4, 79),), allocatable=((onset, 7),))
    scenario = Scenario(start=end - timedelta(minutes=30), duration_s=30 * 60, nodes=(node,))
    with scenario_server(scenario) as server:
        yield server, end


def _cluster(tmp_path: Path) -> Path:
    node = {
        "kind": "Node",
        "metadata": {"name": "clock-a", "resourceVersion": "7", "annotations": {}},
        "spec": {"unschedulable": False},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": "boot-clock-a"},
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "7"},
        },
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    return path


@pytest.mark.parametrize("skew_s", [120, -120], ids=["pod-2min-ahead", "pod-2min-behind"])
def test_a_pod_clock_two_minutes_off_neither_shortens_nor_delays_a_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skew_s: int
) -> None:
    """A live run (no --at) whose pod clock is two minutes off Prometheus': the cycle asks about
    Prometheus' time, so a loss that held one minute of Xid 79's two-minute hold is pending with
    one minute to go — not cordoned as three minutes old (a clock ahead: Prometheus answers a
    future instant with the last sample), nor unseen (a clock behind asked about the time before
    the fault) — and the one `clock-skew` line says so."""
    with loss_held_a_minute() as (prom, end):
        pod = Anchor(datetime.now(UTC) + timedelta(seconds=skew_s), time.monotonic())
        monkeypatch.setattr(cli_module.Anchor, "start", classmethod(lambda _cls: pod))
        args = ["run", "--prometheus-url", prom.url, "--cluster-snapshot", str(_cluster(tmp_path))]
        args += ["--output", "json", "--log-format", "json"]
        result = CliRunner().invoke(cli_module.cli, args, prog_name="gpu-node-guard")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    log = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    at = datetime.fromisoformat(plan["counts"]["at"])
    assert end <= at < end + timedelta(seconds=60)  # Prometheus' time, not the pod's
    assert not [a for a in plan["actions"] if a["type"] == "cordon"], plan["actions"]
    (waiting,) = plan["pending"]
    assert waiting["node"] == "clock-a", waiting
    (skew,) = [line for line in log if line["event"] == "clock-skew"]
    assert skew["level"] == "WARN" and abs(skew["skew_s"] - skew_s) < 5, skew
