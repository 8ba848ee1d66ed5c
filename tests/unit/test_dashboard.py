"""The shipped Grafana dashboard is the generator's, a ConfigMap the kube-prometheus-stack
sidecar picks up, each panel with a query (run against a real Prometheus in
tests/prometheus/test_dashboard.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from guard.generate import dashboard

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_file_is_the_generators() -> None:
    assert (ROOT / dashboard.OUTPUT).read_text(encoding="utf-8") == dashboard.configmap()


def test_a_sidecar_loads_it_and_every_panel_asks_something() -> None:
    doc = yaml.safe_load((ROOT / dashboard.OUTPUT).read_text(encoding="utf-8"))
    assert doc["kind"] == "ConfigMap" and doc["metadata"]["labels"]["grafana_dashboard"] == "1"
    model = json.loads(doc["data"]["gpu-node-guard.json"])
    titles = [p["title"] for p in model["panels"]]
    assert len(titles) == len(set(titles)) == len(dashboard.PANELS)
    for panel in model["panels"]:
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])
    wanted = ("Nodes per state", "Breaker headroom", "Time to isolate", "GPU-hours lost")
    assert all(any(t.startswith(w) for t in titles) for w in wanted)
    kustomization = yaml.safe_load(
        (ROOT / dashboard.OUTPUT.parent / "kustomization.yaml").read_text(encoding="utf-8")
    )
    assert kustomization["resources"] == [dashboard.OUTPUT.name]
