"""The README's first command: the built-in example prints the incident plan."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from guard.codec.queries import guard_queries
from guard.example.incident import CARD_UUID
from guard.settings import Settings
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus


@pytest.fixture(autouse=True)
def debian_prometheus() -> None:
    require_engine("prometheus2")  # the example serves its data with Debian's Prometheus


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "guard.example", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_example_json_plan_cordons_gpu_node_b():
    proc = run_example("--output", "json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)  # stdout is exactly one JSON object
    kinds = [(a["type"], a["node"]) for a in plan["actions"]]
    assert kinds == [
        ("skip", ""),  # fabric-not-applicable: the example's exporter has no fabric field
        ("cordon", "gpu-node-b"),
        ("event", "gpu-node-b"),
        ("append-ledger", "gpu-node-b"),
        ("create-job", "gpu-node-b"),
    ]
    fabric, cordon, _, ledger, job = plan["actions"]
    assert fabric["reason"] == "fabric-not-applicable"
    assert cordon["reason"] == "xid-79"
    assert cordon["annotations"]["gpu-node-guard.io/auto-cordon-gpu"] == f"0000:99:00.0 {CARD_UUID}"
    assert ledger["line"] == f"2026-09-21T05:55:00Z xid-79 0000:99:00.0 {CARD_UUID} gpu-node-guard"
    assert job["job_kind"] == "evidence"
    assert plan["counts"]["prometheus_requests"] == len(guard_queries(Settings()))
    assert plan["dry_run"] is True


def test_example_text_plan_reads_as_the_incident():
    proc = run_example()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "dry-run would cordon node=gpu-node-b reason=xid-79" in out
    assert "dry-run would append-ledger node=gpu-node-b" in out
    assert "nodeName: gpu-node-b" in out
    # The 10 September line is in the bundled ledger: the 2nd incident of this card, which the
    # evidence program words as "This is the 2nd incident on this card …".
    assert "- --card-incidents\n            - '2'\n" in out
    for quiet in ("gpu-node-a", "gpu-node-c", "gpu-node-d", "gpu-node-e"):
        assert f"node={quiet}" not in out
