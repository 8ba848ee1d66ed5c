"""Every panel query of the Grafana dashboard (guard/generate/dashboard.py, as shipped in
manifests/components/grafana-dashboard/dashboard.yaml) against Debian's Prometheus serving the
example incident (dcgm-exporter and kube-state-metrics series, guard/example/incident.py) and
the guard's pushes over it (the samples its push code builds, as a Pushgateway scrape keeps
them): each returns data at the incident's end."""

from __future__ import annotations

import io
import json
import math
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import requests
import yaml

from guard import metric_names as m
from guard.apply.push import Samples, repair_figures
from guard.example.incident import incident
from guard.example.promserver import LocalPrometheus, openmetrics_file
from guard.example.scenario import write_openmetrics
from tests.builders import node, settings, snapshot
from tests.engines import load_openmetrics, serve
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "manifests" / "components" / "grafana-dashboard" / "dashboard.yaml"
PUSH_LABELS = 'job="gpu-node-guard",namespace="gpu-node-guard",instance="10.0.0.7:9091"'
SCENARIO = incident()
END = SCENARIO.start + timedelta(seconds=SCENARIO.duration_s)


def pushed() -> Samples:
    """What a run pushes: its repair figures (a Xid 79 cordon past a half-hour budget) and the
    run's node states, breaker and writes."""
    snap = snapshot(node("gpu-node-b", cordoned=True, guarded_xid=79))
    out = repair_figures(settings(budget_power_cycle_h=0.5), snap)
    out[m.NODES.name] = {(("state", "isolated-past-its-budget"),): 1.0}
    out[m.BREAKER_HEADROOM.name] = {(): 4.0}
    out[m.BREAKER_LIMIT.name] = {(): 5.0}
    out[m.LAST_RUN.name] = {(): END.timestamp()}
    out[m.LAST_RUN_ACTIONS.name] = {
        (("type", "cordon"), ("outcome", "applied")): 1.0,
        (("type", "uncordon"), ("outcome", "applied")): 0.0,
    }
    # A mean of none is NaN (no isolation of this snapshot ended): give the panel numbers.
    phases = out[m.REPAIR_PHASE.name]
    out[m.REPAIR_PHASE.name] = {k: 0.0 if math.isnan(v) else v for k, v in phases.items()}
    return out


def write_pushes(out: io.StringIO, samples: Samples) -> None:
    stamps = range(int(SCENARIO.start.timestamp()), int(END.timestamp()) + 1, 60)
    for name, series in samples.items():
        out.write(f"# TYPE {name} gauge\n")
        for labels, value in series.items():
            text = ",".join([PUSH_LABELS, *(f'{k}="{v}"' for k, v in labels)])
            out.writelines(f"{name}{{{text}}} {value} {t}\n" for t in stamps)


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    require_engine("prometheus2")
    with tempfile.TemporaryDirectory(prefix="gng-dashboard-") as tmp:
        data_dir = Path(tmp)
        text = io.StringIO()
        write_openmetrics(SCENARIO, text)
        body = text.getvalue().removesuffix("# EOF\n")
        text = io.StringIO()
        text.write(body)
        write_pushes(text, pushed())
        text.write("# EOF\n")
        openmetrics_file(data_dir).write_text(text.getvalue(), encoding="utf-8")
        load_openmetrics(data_dir, "prometheus2")
        with serve(data_dir, "prometheus2", ready_at=END) as server:
            yield server


def panel_queries() -> list[tuple[str, str]]:
    doc = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    model = json.loads(doc["data"]["gpu-node-guard.json"])
    return [
        (f"{p['title']} [{t['refId']}]", t["expr"]) for p in model["panels"] for t in p["targets"]
    ]


@pytest.mark.parametrize(("panel", "expr"), panel_queries(), ids=[q[0] for q in panel_queries()])
def test_every_panel_query_returns_data(prom: LocalPrometheus, panel: str, expr: str) -> None:
    query = expr.replace("$namespace", "gpu-node-guard")
    answer = requests.get(
        f"{prom.url}/api/v1/query",
        params={"query": query, "time": f"{END.timestamp():.3f}"},
        timeout=30,
    ).json()
    assert answer["status"] == "success", (panel, answer)
    result = answer["data"]["result"]
    assert result, f"{panel}: no data for {query}"
    assert all(not math.isnan(float(r["value"][1])) for r in result), (panel, result)


def test_the_budget_panel_shows_the_isolation_past_its_budget(prom: LocalPrometheus) -> None:
    (expr,) = [e for p, e in panel_queries() if p.startswith("Oldest isolation")]
    answer = requests.get(
        f"{prom.url}/api/v1/query",
        params={"query": expr.replace("$namespace", "gpu-node-guard"), "time": END.timestamp()},
        timeout=30,
    ).json()
    ratios = {r["metric"]["verdict"]: float(r["value"][1]) for r in answer["data"]["result"]}
    assert ratios["power-cycle"] == pytest.approx(55 * 60 / 1800)  # 55 min of a 30 min budget
    assert ratios["reset"] == 0.0
