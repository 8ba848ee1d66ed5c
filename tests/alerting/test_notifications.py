"""The notification pair end to end: kube-state-metrics series → the SHIPPED rules in a real
Prometheus → a real Alertmanager with the route example of docs/alerts.md → its webhook.

Prometheus scrapes a small kube-state-metrics stand-in (the exact series kube-state-metrics
exports with the documented annotation allowlist) every 15 s and evaluates the shipped rules
file every 15 s, the intervals of Prometheus' own example configuration; the rules' `for: 1m`
runs in real time. Only Alertmanager's group_wait/group_interval are shortened.
"""

from __future__ import annotations

import copy
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from guard.generate import alerts
from guard.runbook import PUBLISHED_URL
from tests.alerting import servers
from tests.alerting.conftest import need
from tests.alerting.servers import Exposition, Received, Webhook, query, wait_until

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "alerts.md"
INTERVAL = "15s"
NOTIFY, PAGER = "gpu-node-guard-notify", "gpu-oncall-pager"  # receivers of the docs example
DELIVERY_S = 300  # for: 1m + a scrape + an evaluation, with room for a loaded CI machine

REASON = "annotation_gpu_node_guard_io_auto_cordon_reason"
GPU = "annotation_gpu_node_guard_io_auto_cordon_gpu"
RETURNED = "annotation_gpu_node_guard_io_returned"
GPU_A = ("0000:99:00.0", "GPU-5d1c0e7a-93b1-4f55-8c2e-0a3f6d9b1c42")
GPU_B = "0000:3b:00.0 GPU-a011f911-0c4e-4bd8-9d2f-6e7b5a4c3d21"
GPU_C = "0000:5e:00.0 GPU-77c2d0b4-1e9a-4f3c-b8a6-2d5e9f0c1b37"
LOADTEST_JOB = "gng-lt-gpu-node-b-a011f911"


def route_example() -> dict[str, Any]:
    """The ```yaml block after the route-example marker in docs/alerts.md."""
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- alertmanager-route-example.*?-->\n```yaml\n(.*?)```", text, re.S)
    assert found, f"{DOCS} has no route example block"
    example: dict[str, Any] = yaml.safe_load(found.group(1))
    return example


def for_test(example: dict[str, Any], webhook_url: str) -> dict[str, Any]:
    """The docs example with every receiver posting to the test's webhook under its own name,
    and group_wait/group_interval shortened so a notification leaves at once."""
    config = copy.deepcopy(example)
    config["receivers"] = [
        {"name": r["name"], "webhook_configs": [{"url": f"{webhook_url}/{r['name']}"}]}
        for r in config["receivers"]
    ]
    routes = [config["route"], *config["route"].get("routes", [])]
    for route in routes:
        route.update(group_wait="1s", group_interval="1s")
    return config


def kube_state_metrics(annotations: dict[str, dict[str, str]], cordoned: set[str]) -> str:
    """kube-state-metrics' text for these nodes (allowlisted annotations only, as it exports)."""
    lines = [
        "# HELP kube_node_annotations Kubernetes annotations converted to Prometheus labels.",
        "# TYPE kube_node_annotations gauge",
    ]
    for node, labels in sorted(annotations.items()):
        pairs = ",".join(f'{k}="{v}"' for k, v in {"node": node, **labels}.items())
        lines.append(f"kube_node_annotations{{{pairs}}} 1")
    lines += [
        "# HELP kube_node_spec_unschedulable Whether a node can schedule new pods.",
        "# TYPE kube_node_spec_unschedulable gauge",
    ]
    lines += [
        f'kube_node_spec_unschedulable{{node="{n}"}} {int(n in cordoned)}'
        for n in sorted(annotations)
    ]
    return "\n".join(lines) + "\n"


# gpu-node-a: healthy, then cordoned by the guard. gpu-node-b: guard-cordoned, then returned
# after a passed load test. gpu-node-c: guard-cordoned, then uncordoned by a person (the guard
# writes `cancelled`, which the allowlist does not export).
BEFORE = kube_state_metrics(
    {
        "gpu-node-a": {},
        "gpu-node-b": {REASON: "xid-79", GPU: GPU_B},
        "gpu-node-c": {REASON: "xid-48", GPU: GPU_C},
    },
    cordoned={"gpu-node-b", "gpu-node-c"},
)


def after(returned_at: str) -> str:
    return kube_state_metrics(
        {
            "gpu-node-a": {REASON: "xid-79", GPU: " ".join(GPU_A)},
            "gpu-node-b": {RETURNED: f"{returned_at} job/{LOADTEST_JOB}"},
            "gpu-node-c": {},
        },
        cordoned={"gpu-node-a"},
    )


def _alerts_at(received: list[Received], receiver: str) -> list[dict[str, Any]]:
    return [a for r in received if r.path == f"/{receiver}" for a in r.body["alerts"]]


def _describe(prom_url: str, webhook: Webhook) -> str:
    states = [
        (a["labels"]["alertname"], a["labels"].get("node"), a["state"])
        for a in servers.firing_and_pending(prom_url)
    ]
    posts = [
        (r.path, [a["labels"]["alertname"] for a in r.body["alerts"]]) for r in webhook.received()
    ]
    return f"Prometheus alerts: {states}; webhook posts: {posts}"


def test_the_route_example_sends_the_pair_to_the_channel_and_pages_to_the_pager(
    tmp_path: Path,
) -> None:
    need("amtool")
    amtool = servers.find("amtool")
    assert amtool
    cases = {
        "notify=gpu-node-guard severity=info alertname=GPUNodeGuardCordoned": NOTIFY,
        "notify=gpu-node-guard severity=info alertname=GPUNodeGuardReturned": NOTIFY,
        "severity=critical alertname=GPUHardwareXid": PAGER,
        "severity=warning alertname=GPUNodeGuardNotRunning": PAGER,
    }
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(route_example()), encoding="utf-8")
    for labels, receiver in cases.items():
        result = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={config}", *labels.split()],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (result.returncode, result.stdout.strip()) == (0, receiver), (labels, result.stderr)


def test_cordon_and_return_reach_the_channel_a_cancel_does_not_and_pages_stay_apart(
    tmp_path: Path, record_property: Any
) -> None:
    need("prometheus", "alertmanager")
    (tmp_path / "am").mkdir()
    (tmp_path / "prom").mkdir()
    with Webhook().serve() as webhook, Exposition(BEFORE).serve() as ksm:
        am_config = for_test(route_example(), webhook.url)
        with servers.alertmanager(am_config, tmp_path / "am") as am_url:
            prom_config = {
                "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
                "rule_files": [str(ROOT / alerts.RULES_FILE)],
                "alerting": {
                    "alertmanagers": [
                        {"static_configs": [{"targets": [am_url.removeprefix("http://")]}]}
                    ]
                },
                "scrape_configs": [
                    {
                        "job_name": "kube-state-metrics",
                        "honor_labels": True,
                        "static_configs": [{"targets": [ksm.target]}],
                    }
                ],
            }
            with servers.prometheus(prom_config, tmp_path / "prom") as prom_url:
                _run(prom_url, ksm, webhook, record_property)


def _run(prom_url: str, ksm: Exposition, webhook: Webhook, record_property: Any) -> None:
    wait_until(
        lambda: len(query(prom_url, f'kube_node_annotations{{{REASON}!=""}}')) == 2,
        120,
        f"Prometheus never scraped the first kube-state-metrics state from {ksm.target}",
    )
    returned_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ksm.set(after(returned_at))
    changed = time.monotonic()

    def both_announced() -> list[dict[str, Any]] | None:
        got = _alerts_at(webhook.received(), NOTIFY)
        names = {a["labels"]["alertname"] for a in got}
        return got if {"GPUNodeGuardCordoned", "GPUNodeGuardReturned"} <= names else None

    announced = wait_until(
        both_announced,
        DELIVERY_S,
        "cordon and return notifications did not both reach the webhook; "
        + _describe(prom_url, webhook),
    )
    # The cancel changed gpu-node-c in the same scrape as gpu-node-b's return: had a rule
    # matched it, it would be pending or firing now.
    assert [
        a for a in servers.firing_and_pending(prom_url) if a["labels"].get("node") == "gpu-node-c"
    ] == []

    posts = [r for r in webhook.received() if r.path == f"/{NOTIFY}"]
    for post in posts:
        assert (post.body["receiver"], post.body["status"]) == (NOTIFY, "firing")
        record_property(
            f"series_to_webhook_s.{post.body['alerts'][0]['labels']['alertname']}",
            round(post.at - changed, 1),
        )
    by_name = {a["labels"]["alertname"]: a for a in announced}
    assert len(announced) == 2, announced
    cordoned, returned = by_name["GPUNodeGuardCordoned"], by_name["GPUNodeGuardReturned"]
    assert cordoned["labels"] == {
        "alertname": "GPUNodeGuardCordoned",
        "severity": "info",
        "notify": "gpu-node-guard",
        "node": "gpu-node-a",
        "reason": "xid-79",
        "pci": GPU_A[0],
        "UUID": GPU_A[1],
    }
    assert cordoned["annotations"]["summary"] == (
        f"gpu-node-guard cordoned gpu-node-a: xid-79 on GPU {GPU_A[0]} ({GPU_A[1]})"
    )
    assert cordoned["annotations"]["runbook_url"] == f"{PUBLISHED_URL}#gpunodeguardcordoned"
    assert returned["labels"] == {
        "alertname": "GPUNodeGuardReturned",
        "severity": "info",
        "notify": "gpu-node-guard",
        "node": "gpu-node-b",
        "returned_at": returned_at,
        "job_name": LOADTEST_JOB,
    }
    assert returned["annotations"]["summary"] == (
        f"gpu-node-b returned to service: load test job/{LOADTEST_JOB} passed"
    )
    assert returned["annotations"]["runbook_url"] == f"{PUBLISHED_URL}#gpunodeguardreturned"

    # Pages went their own way: the shipped GPUNodeGuardNotRunning fires at once here (no
    # kube-state-metrics CronJob series at all) and reached the pager, not the channel.
    pages = wait_until(
        lambda: _alerts_at(webhook.received(), PAGER) or None,
        DELIVERY_S,
        "no page reached the pager receiver; " + _describe(prom_url, webhook),
    )
    assert {a["labels"]["alertname"] for a in pages} == {"GPUNodeGuardNotRunning"}
    assert all("notify" not in a["labels"] for a in pages)
