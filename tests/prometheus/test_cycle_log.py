"""A whole cycle's log as a machine reads it (``--log-format json``) and as on-call reads it.

Real Prometheus over a scenario with a node to cordon, a node whose GPU loss is still pending,
and a node the guard cordoned earlier (same boot); run once with the breaker closed and once with
it open. Every line is one JSON object with typed values and no key twice.
"""

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

from guard.example.promserver import LocalPrometheus
from guard.ledger import format_time
from guard.settings import setting_fields
from tests.engines import scenario_server
from tests.scenario_build import KSM_POD, NodeTimeline, Scenario
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus

T0 = datetime(2026, 9, 21, 5, 0, tzinfo=UTC)
AT = T0 + timedelta(minutes=55)
KEY = "gpu-node-guard.io/"
NODES = (
    NodeTimeline("log-cordon", xids=((50 * 60, 4, 79),), allocatable=((50 * 60, 7),)),
    NodeTimeline("log-pending", xids=((49 * 60, 2, 48),), allocatable=((49 * 60, 7),)),
    NodeTimeline(
        "log-guarded",
        xids=((10 * 60, 1, 79),),
        allocatable=((10 * 60, 7),),
        unschedulable=((11 * 60, 1),),
    ),
)
# Values that are text although they may look like numbers: comma-joined setting lists.
TEXT_LISTS = {f.name for f in setting_fields() if str(f.type).startswith("tuple")}
INTEGERS = {
    "held_s",
    "needs_s",
    "nodes",
    "candidates",
    "pending",
    "applied",
    "failed",
    "already_done",
    "skipped",
    "decisions",
    "would_apply",
    "prometheus_requests",
    "prometheus_retries",
    "api_requests",
    "api_retries",
    "shown",
    "more",
}


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    require_engine("prometheus2")
    scenario = Scenario(start=T0, duration_s=60 * 60, nodes=NODES, pods=(KSM_POD,))
    with scenario_server(scenario) as server:
        yield server


def cluster_file(tmp_path: Path) -> Path:
    def node(name: str, cordoned: bool, notes: dict[str, str]) -> dict[str, Any]:
        return {
            "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "7", "annotations": notes},
            "spec": {"unschedulable": cordoned},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"bootID": f"boot-{name}"},
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": "7"},
            },
        }

    guarded = {
        "reason": "xid-79",
        "at": "2026-09-21T05:15:00Z",
        "boot-id": "boot-log-guarded",
        "gpu-capacity": "8",
        "gpu": f"0000:28:00.0 {NODES[2].gpu_uuid(1)}",
    }
    guarded = {f"{KEY}auto-cordon-{k}": v for k, v in guarded.items()}
    items = [
        node("log-cordon", False, {}),
        node("log-pending", False, {}),
        node("log-guarded", True, guarded),
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key twice in one line: {keys}"
    return dict(pairs)


def cycle(prom: LocalPrometheus, snapshot: Path, *extra: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            prom.url,
            "--cluster-snapshot",
            str(snapshot),
            "--at",
            AT.isoformat(),
            "--log-format",
            "json",
            "--output",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line, object_pairs_hook=unique_keys) for line in proc.stderr.splitlines()]
    for r in records:
        assert isinstance(r["time"], str) and r["level"] in ("INFO", "WARN", "ERROR"), r
        assert isinstance(r["event"], str), r
        for key, value in r.items():
            assert isinstance(value, str | int | float | bool), (key, value)
            if key in INTEGERS or key.startswith(("applied_", "failed_", "would_apply_")):
                assert type(value) is int, (key, value)
            elif key.endswith("_s"):
                assert type(value) in (int, float), (key, value)
            elif key == "dry_run":
                assert value is True
            elif isinstance(value, str) and key not in TEXT_LISTS:
                assert not value.lstrip("-").replace(".", "", 1).isdigit(), f"{key}={value!r}"
    return records


def test_a_whole_cycles_json_log_is_typed_with_unique_keys(prom, tmp_path):
    log = cycle(prom, cluster_file(tmp_path))
    events = [(r["event"], r.get("node", "")) for r in log]
    assert events[:2] == [("start", ""), ("settings", "")]
    assert events[-1] == ("done", "")
    assert ("cordon", "log-cordon") in events and ("skip", "log-guarded") in events
    (pending,) = [r for r in log if r["event"] == "pending"]
    assert pending == {
        "time": pending["time"],
        "level": "INFO",
        "event": "pending",
        "node": "log-pending",
        "reason": "xid-48",
        "gpu": "0000:38:00.0",
        "held_s": 360,
        "needs_s": 600,
        "decides_at": format_time(AT + timedelta(seconds=240)),
        "next": "cordon candidate if the GPU loss holds 240s more",
    }
    (same_boot,) = [r for r in log if r["event"] == "skip" and r["reason"] == "same-boot"]
    assert same_boot["next"] == (
        "waiting for the power cycle (https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#isolated-waiting-for-power-cycle)"
    )
    events_lines = [r for r in log if r["event"] == "event"]
    assert events_lines and all("event_reason" in r and r["dry_run"] for r in events_lines)
    done = log[-1]
    assert (done["pending"], done["would_apply"], done["applied"], done["failed"]) == (1, 7, 0, 0)


def test_with_the_breaker_open_every_blocked_candidate_is_one_warn_line(prom, tmp_path):
    log = cycle(prom, cluster_file(tmp_path), "--breaker-max-nodes", "1")
    (blocked,) = [r for r in log if r.get("reason") == "breaker-open" and r["event"] == "skip"]
    assert (blocked["level"], blocked["node"]) == ("WARN", "log-cordon")
    assert blocked["detail"] == (
        "1 isolations (nodes cordoned + devices tainted), limit 1; xid-79 waits"
    )
    assert blocked["next"].endswith(
        "(https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#breaker-open)"
    )
    assert not [r for r in log if r["event"] == "cordon"]
    assert [r["node"] for r in log if r["event"] == "pending"] == ["log-pending"]
