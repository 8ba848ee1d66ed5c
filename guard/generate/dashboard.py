"""The Grafana dashboard (docs/metrics.md): one JSON model in a ConfigMap Grafana's sidecar loads,
written by ``python -m guard.generate.dashboard``; `$namespace` is the push's grouping label."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from guard import metric_names as m
from guard.generate import BlockDumper
from guard.names import APP_LABEL, APP_NAME

OUTPUT = Path("manifests/components/grafana-dashboard/dashboard.yaml")
UID = "gpu-node-guard"


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    targets: dict[str, str]  # legend: PromQL
    description: str = ""
    kind: str = "timeseries"  # or stat, bargauge
    unit: str = "none"


def _sel(metric: str, extra: str = "") -> str:
    return f'{metric}{{namespace="$namespace"{"," + extra if extra else ""}}}'


PANELS = (
    Panel(
        "Nodes per state",
        {"{{state}}": f"sum by (state) ({_sel(m.NODES.name)}) > 0"},
        "The rows of `gpu-node-guard status` in numbers (docs/runbook.md, Node states).",
    ),
    Panel(
        "Breaker headroom",
        {
            "headroom": f"min({_sel(m.BREAKER_HEADROOM.name)})",
            "limit": f"max({_sel(m.BREAKER_LIMIT.name)})",
        },
        "Isolations left before the breaker opens (<= 0: open; GPUNodeGuardBreakerOpen).",
        kind="stat",
    ),
    Panel(
        "Isolations over time (open, by verdict)",
        {"{{verdict}} ({{unit}})": f"sum by (verdict, unit) ({_sel(m.ISOLATIONS.name)}) > 0"},
    ),
    Panel(
        "Isolations and returns per run",
        {
            "{{type}}": "sum by (type) ("
            + _sel(
                m.LAST_RUN_ACTIONS.name,
                'type=~"cordon|uncordon|taint-device|untaint-device", outcome="applied"',
            )
            + ")"
        },
        "Applied cordon, uncordon and device-taint writes of each run (the pushed run values).",
    ),
    Panel(
        "Cordoned GPU nodes (kube-state-metrics)",
        {
            "cordoned": "count(max by (node) (kube_node_spec_unschedulable == 1) and on (node) "
            'max by (node) (kube_node_status_capacity{resource="nvidia_com_gpu"}) > 0)'
        },
    ),
    Panel(
        "Time to isolate / return (mean, last 30 days)",
        {"{{phase}}": f"max by (phase) ({_sel(m.REPAIR_PHASE.name)})"},
        "onset-to-cordon, cordon-to-repair, repair-to-return, and the whole isolation.",
        kind="bargauge",
        unit="s",
    ),
    Panel(
        "Oldest isolation against its budget",
        {
            "{{verdict}}": f"max by (verdict) ({_sel(m.ISOLATION_OLDEST_AGE.name)})\n"
            f"/ on (verdict) max by (verdict) ({_sel(m.QUARANTINE_BUDGET.name)})"
        },
        "1 = the verdict's quarantine budget (GPUIsolationPastBudget fires above).",
        kind="bargauge",
        unit="percentunit",
    ),
    Panel(
        "GPU-hours lost",
        {"{{gpus}} GPUs, {{window}}": f"sum by (gpus, window) ({_sel(m.GPU_HOURS_LOST.name)})"},
        "faulted: the faulted GPUs; healthy: healthy GPUs a node-wide cordon held with them.",
        kind="stat",
    ),
    Panel(
        "Incidents and repeat cards",
        {
            "incidents {{window}}": f"sum by (window) ({_sel(m.INCIDENTS.name)})",
            "repeat cards": f"max({_sel(m.REPEAT_CARDS.name)})",
        },
        kind="stat",
    ),
    Panel(
        "GPUs with a hardware Xid (dcgm-exporter)",
        {
            "{{Hostname}}": "count by (Hostname) (DCGM_FI_DEV_XID_ERRORS > 0 != 13 != 31 != 43"
            " != 45 != 68 != 109)"
        },
        "The last Xid per GPU, user-code Xids left out (the defaults of GUARD_USER_CODE_XIDS).",
    ),
    Panel(
        "GPUs not allocatable (kube-state-metrics)",
        {
            "{{node}}": 'max by (node) (kube_node_status_capacity{resource="nvidia_com_gpu"})\n'
            '- max by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"}) > 0'
        },
    ),
)


def _panel(i: int, p: Panel) -> dict[str, Any]:
    return {
        "id": i + 1,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": {},
        "targets": [
            {"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend}
            for j, (legend, expr) in enumerate(p.targets.items())
        ],
    }


def model() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": "GPU node guard",
        "tags": [APP_NAME],
        "timezone": "utc",
        "schemaVersion": 39,
        "time": {"from": "now-7d", "to": "now"},
        "refresh": "1m",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {
                    "name": "namespace",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": f"label_values({m.LAST_RUN.name}, namespace)",
                    "current": {"text": "gpu-node-guard", "value": "gpu-node-guard"},
                },
            ]
        },
        "panels": [_panel(i, p) for i, p in enumerate(PANELS)],
    }


def configmap() -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpu-node-guard-dashboard",
            "namespace": "gpu-node-guard",
            "labels": {"grafana_dashboard": "1", APP_LABEL: APP_NAME},
        },
        "data": {"gpu-node-guard.json": json.dumps(model(), indent=1, sort_keys=True) + "\n"},
    }
    head = (
        "# Generated by `python -m guard.generate.dashboard` (guard/generate/dashboard.py): edit"
        " that, not this.\n"
    )
    return head + yaml.dump(doc, Dumper=BlockDumper, sort_keys=False, width=100)


def main() -> None:
    OUTPUT.write_text(configmap(), encoding="utf-8")
    print(f"wrote {OUTPUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
