"""Real guard runs push to a real Pushgateway; a real Prometheus scraping it reads them back.

A run here has no API server, so it aborts: the push of a failed run, the input of the
Pushgateway variant of GPUNodeGuardNotRunning, and a Pushgateway that is down. The push of a run
that cordons is read back in tests/apiserver/test_status_apiserver.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from guard import metric_names
from guard.apply.push import OUTCOMES, WRITE_TYPES
from guard.example.promserver import free_port
from guard.generate import alert_queries
from guard.settings import Settings
from tests.alerting.conftest import PUSH_SCRAPE_S, PushStack
from tests.alerting.servers import query, wait_until

READ_BACK_S = 30 * PUSH_SCRAPE_S


def unreachable_cluster(tmp_path: Path) -> Path:
    """A kubeconfig whose API server refuses every connection."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [
            {
                "name": "k",
                "cluster": {
                    "server": f"https://127.0.0.1:{free_port()}",
                    "insecure-skip-tls-verify": True,
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def guard_run(stack: PushStack, tmp_path: Path, namespace: str, gateway: str, *extra: str):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            stack.prometheus_url,
            "--kubeconfig",
            str(unreachable_cluster(tmp_path)),
            "--pushgateway-url",
            gateway,
            "--log-format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        # the CronJob's own values: its namespace from the pod, a short cycle deadline (long
        # enough on a busy machine for importing the Kubernetes client, Prometheus' time and one
        # refused API request, so that the run makes its requests and pushes their count)
        env={**os.environ, "GUARD_NAMESPACE": namespace, "GUARD_CYCLE_DEADLINE_S": "5"},
    )


def pushed(stack: PushStack, namespace: str) -> dict[str, dict[str, float]]:
    """Every gpu_node_guard_ series of `namespace` by name, then by its other labels."""
    found = query(
        stack.prometheus_url, f'{{__name__=~"gpu_node_guard_.+", namespace="{namespace}"}}'
    )
    out: dict[str, dict[str, float]] = {}
    for r in found:
        labels = {k: v for k, v in r["metric"].items() if k not in ("__name__", "job", "namespace")}
        key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        out.setdefault(r["metric"]["__name__"], {})[key] = float(r["value"][1])
        assert r["metric"]["job"] == metric_names.PUSH_JOB
    return out


def test_an_aborted_run_pushes_its_failure_and_no_success(push_stack, tmp_path):
    before = time.time()
    proc = guard_run(push_stack, tmp_path, "gng-abort", push_stack.pushgateway_url)
    assert proc.returncode == 1
    log = [json.loads(line) for line in proc.stderr.splitlines()]
    # "layout": the namespace of this test's own is not the manifests' (a WARN, not a stop)
    assert [line["event"] for line in log] == ["start", "settings", "layout", "abort"]
    series = wait_until(
        lambda: pushed(push_stack, "gng-abort") or None,
        READ_BACK_S,
        "the aborted run's push never reached Prometheus",
    )
    assert set(series) == {
        metric_names.LAST_RUN.name,
        metric_names.LAST_RUN_EXIT_CODE.name,
        metric_names.LAST_RUN_DURATION.name,
        metric_names.LAST_RUN_ACTIONS.name,
        metric_names.LAST_RUN_REQUESTS.name,
        metric_names.USER_CODE_XID.name,
        metric_names.ALLOWED_DNS_PREFIX.name,
    }
    assert before <= series[metric_names.LAST_RUN.name][""] <= time.time()
    assert series[metric_names.LAST_RUN_EXIT_CODE.name] == {"": 1}
    assert 0 < series[metric_names.LAST_RUN_DURATION.name][""] < 60
    actions = series[metric_names.LAST_RUN_ACTIONS.name]
    # every write type and outcome reaches Prometheus, as zero: the refused cordon was not applied
    assert set(actions) == {f"outcome={o},type={t}" for t in WRITE_TYPES for o in OUTCOMES}
    assert set(actions.values()) == {0}
    assert "outcome=failed,type=cordon" in actions
    requests = series[metric_names.LAST_RUN_REQUESTS.name]
    # Prometheus' time, read once before the Lease (guard.plan.instant); the API refused until
    # the deadline
    assert list(requests) == ["code=200,target=prometheus", "code=error,target=kubernetes"]
    assert requests["code=200,target=prometheus"] == 1
    assert requests["code=error,target=kubernetes"] >= 1


def test_the_sites_alert_filters_reach_prometheus_as_the_rules_join_them(push_stack, tmp_path):
    """A run with a site's user-code Xids and allowed DNS networks: Prometheus reads back one
    series per Xid and per address prefix, the labels the shipped rules join on."""
    proc = guard_run(
        push_stack,
        tmp_path,
        "gng-site",
        push_stack.pushgateway_url,
        "--user-code-xids",
        "13,119",
        "--conformance-allowed-dns",
        "10.20.0.0/16,172.16.0.0/15,2001:db8::/32",
    )
    assert proc.returncode == 1, proc.stderr
    series = wait_until(
        lambda: pushed(push_stack, "gng-site") or None,
        READ_BACK_S,
        "the run's push never reached Prometheus",
    )
    assert series[metric_names.USER_CODE_XID.name] == {"xid=13": 1, "xid=119": 1}
    assert series[metric_names.ALLOWED_DNS_PREFIX.name] == {
        "prefix=10.20.": 1,
        "prefix=172.16.": 1,
        "prefix=172.17.": 1,
        "prefix=[2001:db8:": 1,
    }


def test_the_not_running_variant_reads_the_push(push_stack, tmp_path):
    """Its input: no success pushed → the alert's expression holds; the description's age of
    the last run of any result is seconds."""
    assert guard_run(push_stack, tmp_path, "gng-never", push_stack.pushgateway_url).returncode == 1
    s = Settings(namespace="gng-never")
    wait_until(
        lambda: query(push_stack.prometheus_url, alert_queries.last_run_age(s)) or None,
        READ_BACK_S,
        "the failed run's last_run never reached Prometheus",
    )
    (age,) = query(push_stack.prometheus_url, alert_queries.last_run_age(s))
    assert 0 <= float(age["value"][1]) < READ_BACK_S + 30
    expr = alert_queries.alert_guard_not_running_pushed(s, alert_queries.AlertParams())
    (firing,) = query(push_stack.prometheus_url, expr)
    assert firing["metric"] == {"namespace": "gng-never"}


def test_a_pushgateway_that_is_down_is_one_warn_line_and_the_exit_code_stays(push_stack, tmp_path):
    down = f"http://127.0.0.1:{free_port()}"
    proc = guard_run(push_stack, tmp_path, "gng-down", down)
    assert proc.returncode == 1  # the abort's, not the push's
    log = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [(line["event"], line["level"]) for line in log[-2:]] == [
        ("abort", "ERROR"),
        ("push-failed", "WARN"),
    ]
    assert log[-1]["url"] == down and "Connection refused" in log[-1]["reason"]
