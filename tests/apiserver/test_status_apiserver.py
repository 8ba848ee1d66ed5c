"""On-call's view on a real kube-apiserver and a real Prometheus: a guard cycle that cordons and
pushes its metrics to a real Pushgateway (read back through a real Prometheus), then
`gpu-node-guard status` run with a read-only identity (the RBAC of docs/status.md) that changes
nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from guard import metric_names
from guard.example.promserver import LocalPrometheus, free_port
from guard.generate import alert_queries
from guard.names import SETTINGS_CONFIGMAP
from guard.settings import Settings
from tests.alerting.conftest import PushStack, push_stack_in
from tests.alerting.servers import query, wait_until
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    NO_CF,
    NS,
    T0,
    faulted,
    forget_guard_state,
    guard_cordoned,
    guard_jobs,
    healthy,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import JOBS_NS, ControlPlane, create
from tests.scenario_build import NodeTimeline

pytestmark = pytest.mark.apiserver

DOCS = Path(__file__).resolve().parents[2] / "docs" / "status.md"
READER = "oncall-reader"
AT = ISOLATE_AT.strftime("%Y-%m-%dT%H:%M:%SZ")
AT_S = int((ISOLATE_AT - T0).total_seconds())
PENDING_FROM_S = AT_S - 360  # Xid 48 and a GPU lost 6 minutes before the cycle (hold: 10)
CORDONED_EARLIER = T0 + timedelta(minutes=10)
LOADTEST_CARD = "GPU-11111111-2222-3333-4444-555555555555"  # not st-reset's card

# One node per state; names are this module's own in both servers.
NODES = {
    "st-cordon": faulted("st-cordon"),  # cordoned by this cycle: waiting for the power cycle
    "st-pending": NodeTimeline(
        "st-pending", xids=((PENDING_FROM_S, 4, 48),), allocatable=((PENDING_FROM_S, 7),)
    ),
    "st-reset": healthy("st-reset"),  # guard-cordoned earlier for Xid 48, no reset-done
    "st-loadtest": healthy("st-loadtest"),  # guard-cordoned, power-cycled, all GPUs back
    "st-held": healthy("st-held"),  # a person's hold
    "st-returned": healthy("st-returned"),  # returned 10 minutes ago
}


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(*NODES.values()) as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PushStack]:
    with push_stack_in(tmp_path_factory.mktemp("status-push")) as pushes:
        yield pushes


@pytest.fixture(scope="module")
def cluster(deployed: ControlPlane, admin: client.ApiClient) -> Iterator[client.CoreV1Api]:
    core = client.CoreV1Api(admin)
    returned = f"{(ISOLATE_AT - timedelta(minutes=10)):%Y-%m-%dT%H:%M:%SZ} job/gng-lt-st-returned-1"
    own_card = guard_cordoned(CORDONED_EARLIER) | {KEYS.gpu: f"0000:18:00.0 {LOADTEST_CARD}"}
    made = [
        _node(core, "st-cordon", allocatable=7),
        _node(core, "st-pending", allocatable=7),
        _node(core, "st-reset", annotations=guard_cordoned(CORDONED_EARLIER, xid=48)),
        _node(core, "st-loadtest", boot="boot-2", allocatable=8, annotations=own_card),
        _node(core, "st-held", annotations={KEYS.hold: "RMA 4711: card swap on Tuesday"}),
        _node(core, "st-returned", annotations={KEYS.returned: returned}, unschedulable=False),
    ]
    yield core
    for name in made:
        core.delete_node(name)
    forget_guard_state(core, admin)


def _node(
    core: client.CoreV1Api,
    name: str,
    *,
    boot: str = "boot-1",
    allocatable: int = 8,
    annotations: dict[str, str] | None = None,
    unschedulable: bool | None = None,
) -> str:
    cordoned = bool(annotations) if unschedulable is None else unschedulable
    core.create_node(
        {
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"unschedulable": cordoned},
        }
    )
    set_status(core, name, boot=boot, allocatable=allocatable)
    return name


@pytest.fixture(scope="module")
def reader(deployed: ControlPlane, admin: client.ApiClient) -> Path:
    """A kubeconfig of a ServiceAccount bound to exactly the read-only rules of docs/status.md."""
    create(
        admin,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": READER, "namespace": NS},
        },
    )
    subject = {"kind": "ServiceAccount", "name": READER, "namespace": NS}
    for doc in _docs_rbac():
        if doc["kind"].endswith("Binding"):
            doc["subjects"] = [subject]
        create(admin, doc)
    return deployed.service_account_kubeconfig(NS, READER)


def _docs_rbac() -> list[dict[str, Any]]:
    text = DOCS.read_text(encoding="utf-8").split("## It reads, never writes", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block, "docs/status.md lists the reader's RBAC"
    return [d for d in yaml.safe_load_all(block.group(1)) if d]


def _status(
    kubeconfig: Path, prom: LocalPrometheus, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "status",
            "--kubeconfig",
            str(kubeconfig),
            "--prometheus-url",
            prom.url,
            "--at",
            AT,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _pushed(stack: PushStack, name: str) -> dict[str, float]:
    """The pushed series of `name` in the guard's grouping key, by their labels of interest."""
    found = query(stack.prometheus_url, f'{name}{{job="gpu-node-guard", namespace="{NS}"}}')
    keys = ("state", "type", "outcome", "target", "code")
    return {
        ",".join(f"{k}={r['metric'][k]}" for k in keys if k in r["metric"]): float(r["value"][1])
        for r in found
    }


def test_a_cycle_pushes_what_it_did_and_status_shows_every_state_reading_only(
    prom, stack, cluster, reader, guard_kubeconfig, admin
):
    before_push = time.time()
    cycle = run_guard(
        prom, guard_kubeconfig, ISOLATE_AT, "--pushgateway-url", stack.pushgateway_url, NO_CF
    )
    assert [p["node"] for p in cycle.plan["pending"]] == ["st-pending"]
    assert not cycle.lines("push-failed")

    # The push, read back through Prometheus scraping the Pushgateway.
    success = wait_until(
        lambda: _pushed(stack, metric_names.LAST_SUCCESS.name) or None,
        30,
        "the cycle's success never reached Prometheus through the Pushgateway",
    )
    assert before_push <= success[""] <= time.time()
    assert _pushed(stack, metric_names.LAST_RUN_EXIT_CODE.name) == {"": 0}
    actions = _pushed(stack, metric_names.LAST_RUN_ACTIONS.name)
    counts = cycle.plan["counts"]
    assert actions["type=cordon,outcome=applied"] == counts["applied_cordon"] == 1
    assert actions["type=create-job,outcome=applied"] == counts["applied_create_job"]
    assert sum(v for k, v in actions.items() if k.endswith("failed")) == 0
    nodes = _pushed(stack, metric_names.NODES.name)
    assert {k: v for k, v in nodes.items() if v} == {
        "state=waiting-for-reset-done": 1,
        "state=load-test-running": 1,  # conditions met: this cycle creates its load test
        "state=held-by-a-person": 1,
        "state=returned-in-the-last-24-h": 1,
    }
    assert _pushed(stack, metric_names.PENDING_CANDIDATES.name) == {"": 1}
    assert _pushed(stack, metric_names.BREAKER_HEADROOM.name) == {"": 5 - 2}
    requests = _pushed(stack, metric_names.LAST_RUN_REQUESTS.name)
    assert requests["target=prometheus,code=200"] == counts["prometheus_requests"]
    assert requests["target=kubernetes,code=200"] >= 5
    assert (  # the `done` line's count, and the Lease's release after it
        sum(v for k, v in requests.items() if k.startswith("target=kubernetes"))
        == (counts["api_requests"] + 1)
    )
    s = Settings(prometheus_url=prom.url)
    not_running = alert_queries.alert_guard_not_running_pushed(s, alert_queries.AlertParams())
    assert query(stack.prometheus_url, not_running) == []  # a fresh success: the alert is quiet

    # status as on-call, with an identity that can only read, deciding with the settings the
    # cycle ran with (the CronJob's ConfigMap says them: status takes no decision flag).
    with site_setting(client.CoreV1Api(admin), "GUARD_RETURN_CONFORMANCE", "false"):
        _status_reads_only(prom, cluster, reader, admin)
    _report_reads_only(cluster, reader, admin)


@contextmanager
def site_setting(core: client.CoreV1Api, key: str, value: str) -> Iterator[None]:
    before = (core.read_namespaced_config_map(SETTINGS_CONFIGMAP, NS).data or {}).get(key)
    core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, NS, {"data": {key: value}})
    try:
        yield
    finally:  # None removes the key again (a merge patch)
        core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, NS, {"data": {key: before}})


def _status_reads_only(prom, cluster, reader, admin) -> None:
    watched = _versions(cluster, admin)
    proc = _status(reader, prom, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["node"]: r for r in doc["nodes"] if r["node"].startswith("st-")}
    assert {n: r["state"] for n, r in rows.items()} == {
        "st-cordon": "isolated-waiting-for-power-cycle",
        "st-reset": "waiting-for-reset-done",
        "st-loadtest": "load-test-running",
        "st-held": "held-by-a-person",
        "st-returned": "returned-in-the-last-24-h",
    }
    assert rows["st-cordon"]["incidents"] == {"card": 1, "slot": 1}
    assert rows["st-cordon"]["blocked_by"] == {
        "condition": "same-boot",
        "observed": "bootID boot-1 unchanged since cordon",
    }
    (loadtest,) = [j.metadata.name for j in guard_jobs(admin, "st-loadtest")]
    assert rows["st-loadtest"]["blocked_by"] == {
        "condition": "loadtest-running",
        "observed": f"job/{loadtest}",
    }
    assert rows["st-held"]["blocked_by"]["observed"] == "hold='RMA 4711: card swap on Tuesday'"
    assert doc["breaker"] == {"guarded": 3, "limit": 5, "open": False, "headroom": 2}
    assert [(c["node"], c["held_s"], c["needs_s"], c["decision"]) for c in doc["candidates"]] == [
        # kube-state-metrics (the scenario) never saw this cordon: Prometheus lags the API
        ("st-cordon", 180, 120, "already-cordoned"),
        ("st-pending", 360, 600, "pending"),
    ]
    assert _versions(cluster, admin) == watched, "status changed an object"

    text = _status(reader, prom)
    assert text.returncode == 0, text.stderr
    assert "pending candidates: 1, 1 held long enough\n  st-cordon   xid-79  " in text.stdout
    assert re.search(r"\nst-reset +waiting-for-reset-done +xid-48 +23m ", text.stdout)
    assert _versions(cluster, admin) == watched


def _report_reads_only(cluster, reader, admin) -> None:
    """`report` with the same read-only identity: the cycle's cordon is an open incident."""
    watched = _versions(cluster, admin)
    # A minute after the cycle: the period ends before its --at, and the cordon is at AT.
    after = f"{ISOLATE_AT + timedelta(minutes=1):%Y-%m-%dT%H:%M:%SZ}"
    argv = [sys.executable, "-m", "guard", "report", "--kubeconfig", str(reader), "--at", after]
    proc = subprocess.run(
        [*argv, "-o", "json"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (incident,) = [i for i in doc["incidents"] if i["node"] == "st-cordon"]
    assert (incident["xid"], incident["verdict"], incident["open"]) == (79, "power-cycle", True)
    assert incident["at"] == AT
    (span,) = [i for i in doc["isolations"] if i["node"] == "st-cordon"]
    assert (span["unit"], span["gpus"], span["start"], span["end"]) == ("node", 8, AT, None)
    text = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 0, text.stderr
    assert "st-cordon" in text.stdout
    assert _versions(cluster, admin) == watched, "report changed an object"


def test_a_push_that_fails_leaves_a_successful_cycle_at_exit_0(prom, cluster, guard_kubeconfig):
    down = f"http://127.0.0.1:{free_port()}"
    cycle = run_guard(
        prom, guard_kubeconfig, ISOLATE_AT, "--pushgateway-url", down
    )  # asserts exit 0
    (failed,) = cycle.lines("push-failed")
    assert (failed["level"], failed["url"]) == ("WARN", down)
    assert cycle.log[-1] is failed  # after the done line


def test_the_reader_of_docs_status_may_not_write(reader):
    from kubernetes import config

    tries = [
        ("", "nodes", "patch", ""),
        ("", "nodes", "list", ""),
        ("batch", "jobs", "create", JOBS_NS),
        ("", "configmaps", "update", NS),
        ("events.k8s.io", "events", "create", "default"),
        ("", "pods", "list", JOBS_NS),
    ]
    with config.new_client_from_config(config_file=str(reader)) as api:
        auth = client.AuthorizationV1Api(api)
        allowed = {}
        for group, resource, verb, namespace in tries:
            attributes = {
                "group": group,
                "resource": resource,
                "verb": verb,
                "namespace": namespace,
            }
            review = auth.create_self_subject_access_review(
                {"spec": {"resourceAttributes": attributes}}
            )
            allowed[f"{verb} {resource}"] = review.status.allowed
    # list pods: the guard's own Jobs' Pods in the jobs namespace, for their results (no logs)
    assert allowed == {
        "patch nodes": False,
        "list nodes": True,
        "create jobs": False,
        "update configmaps": False,
        "create events": False,
        "list pods": True,
    }


def _versions(core: client.CoreV1Api, admin: client.ApiClient) -> dict[str, str]:
    """resourceVersion of every object status could touch: nodes, ledger, Jobs, Events."""
    out = {f"node/{n.metadata.name}": n.metadata.resource_version for n in core.list_node().items}
    for cm in core.list_namespaced_config_map(NS).items:
        out[f"configmap/{cm.metadata.name}"] = cm.metadata.resource_version
    for j in client.BatchV1Api(admin).list_namespaced_job(JOBS_NS).items:
        out[f"job/{j.metadata.name}"] = j.metadata.resource_version
    for e in client.EventsV1Api(admin).list_namespaced_event("default").items:
        out[f"event/{e.metadata.name}"] = e.metadata.resource_version
    return out


def test_status_decides_with_the_cronjobs_settings_configmap_unless_given_here(prom, reader, admin):
    """`kubectl gpu-guard` on a site whose overlay says GUARD_BREAKER_MAX_NODES=3 shows "of 3"
    (the CronJob's ConfigMap), not the default 5; status takes no decision flag (the breaker
    is the ConfigMap's alone), and the ConfigMap's in-cluster Prometheus URL is never used from
    outside."""
    core = client.CoreV1Api(admin)
    before = core.read_namespaced_config_map(SETTINGS_CONFIGMAP, NS).data
    site = "https://wiki.site.test/gpu/runbook"
    patch = {
        "data": {
            "GUARD_BREAKER_MAX_NODES": "3",
            "GUARD_RUNBOOK_BASE_URL": site,
            "GUARD_PROMETHEUS_URL": "http://prometheus.invalid:9090",
        }
    }
    core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, NS, patch)
    try:
        proc = _status(reader, prom, "-o", "json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["breaker"]["limit"] == 3
        # Every runbook link is the site's (GUARD_RUNBOOK_BASE_URL), absolute.
        links = [n["runbook"] for n in json.loads(proc.stdout)["nodes"] if n["runbook"]]
        assert links and all(link.startswith(site + "#") for link in links), links
        assert f"from configmap {NS}/{SETTINGS_CONFIGMAP} (the CronJob's)" in proc.stderr
        given = _status(reader, prom, "-o", "json", "--breaker-max-nodes", "4")
        assert given.returncode == 2 and "No such option '--breaker-max-nodes'" in given.stderr
    finally:
        core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, NS, {"data": before})
