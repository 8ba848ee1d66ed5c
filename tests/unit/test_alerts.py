"""The generated alert files: in sync with guard/generate/alerts.py, valid, and proven by
promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from guard import metric_names, runbook
from guard.apply.push import WRITE_TYPES
from guard.codec import queries
from guard.generate import alert_queries, alerts
from guard.names import APP_LABEL, COMPONENT_LABEL, Annotations
from guard.settings import Settings, SettingsError
from guard.states import NODE_STATES
from tests.unit.test_node_alerts import NODE_ALERT_NAMES

ROOT = Path(__file__).resolve().parents[2]
RULE_TESTS = sorted((ROOT / "tests" / "rules").glob("*.test.yaml"))
ALERT_NAMES = [
    "GPUHardwareXid",
    "GPUHardwareXidCount",
    "GPUCountDropped",
    "NodeCordonedTooLong",
    "GPUIsolationPastBudget",
    "GPUNodeDomainIncident",
    "GPUDeviceTaintedTooLong",
    "GPUNodeRejectingGPUPods",
    "GPUNodeFabricFailed",
    "GPUNodeGuardBreakerOpen",
    "GPUNodeGuardNotRunning",
    "GPUNodeGuardLeaseHeld",
    "GPUNodeGuardJobFailed",
    "GPUNodeGuardCordoned",
    "GPUNodeGuardDeviceTainted",
    "GPUNodeGuardReturned",
    *NODE_ALERT_NAMES,
]


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not found: install the Debian package prometheus (make system-deps)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("path", [alerts.RULES_FILE, alerts.PROMETHEUS_RULE_FILE], ids=str)
def test_committed_file_is_what_the_source_generates(path: Path) -> None:
    generated = alerts.render(Settings(), alert_queries.AlertParams())[path]
    assert (ROOT / path).read_text(encoding="utf-8") == generated


def test_prometheusrule_ships_the_same_groups_for_the_operator() -> None:
    plain = yaml.safe_load((ROOT / alerts.RULES_FILE).read_text(encoding="utf-8"))
    operator = yaml.safe_load((ROOT / alerts.PROMETHEUS_RULE_FILE).read_text(encoding="utf-8"))
    assert operator["spec"]["groups"] == plain["groups"]
    assert operator["kind"] == "PrometheusRule"
    assert operator["metadata"]["namespace"] == "gpu-node-guard"
    assert operator["metadata"]["labels"]["release"] == "prometheus"


def test_every_alert_has_severity_summary_and_description() -> None:
    everything = [
        r for g in alerts.rule_groups(Settings(), alert_queries.AlertParams()) for r in g["rules"]
    ]
    rules = [r for r in everything if "alert" in r]
    q = alert_queries
    assert [r["record"] for r in everything if "record" in r] == [
        q.USER_CODE_XIDS_SETTING,
        q.USER_CODE_XID,
        q.BREAKER_SETTING,
        q.COREDNS_UPSTREAMS,
        q.COREDNS_UPSTREAM_ALLOWED,
    ]
    assert [r["alert"] for r in rules] == ALERT_NAMES
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


@pytest.mark.parametrize(
    ("kind", "key", "label"),
    [
        pytest.param(
            "annotation",
            "gpu-node-guard.io/auto-cordon-reason",
            "annotation_gpu_node_guard_io_auto_cordon_reason",
            id="annotation-dots-dashes-slash",
        ),
        pytest.param(
            "label", "app.kubernetes.io/component", "label_app_kubernetes_io_component", id="label"
        ),
        pytest.param("label", "example.com/nodeName", "label_example_com_node_name", id="camel"),
    ],
)
def test_ksm_label_matches_kube_state_metrics_naming(kind: str, key: str, label: str) -> None:
    assert queries.ksm_label(kind, key) == label


def test_settings_reach_the_expressions() -> None:
    custom = Settings(
        user_code_xids=(43, 13),
        breaker_max_nodes=3,
        annotation_prefix="example.com/",
        namespace="ops",
    )
    made = (
        *alerts.gpu_rules(custom, alert_queries.AlertParams()),
        *alerts.guard_rules(custom, alert_queries.AlertParams()),
    )
    rules = {r.alert: r.expr for r in made if isinstance(r, alerts.Rule)}
    records = {r.record: r.expr for r in made if isinstance(r, alerts.Record)}
    # The alert compares the breaker's pushed count (else the nodes with the guard's cordon or
    # device record) with the pushed limit, else the recorded setting: no number of its own.
    assert rules["GPUNodeGuardBreakerOpen"] == (
        "(\n  max(gpu_node_guard_breaker_isolations)\n  or count(max by (node) ("
        'kube_node_annotations{annotation_example_com_auto_cordon_reason!=""} or '
        'kube_node_annotations{annotation_example_com_device_taint!=""}))\n)\n'
        ">= (\n  max(gpu_node_guard_breaker_limit_nodes)\n"
        "  or gpu_node_guard:breaker_max_nodes\n)"
    )
    assert records == {"gpu_node_guard:breaker_max_nodes": "3"}
    # The user-code Xids: a join with the pushed (else recorded) series, the list only recorded.
    groups = alerts.rule_groups(custom, alert_queries.AlertParams())
    recorded = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    assert recorded["gpu_node_guard:user_code_xids"] == (
        'label_replace(vector(1), "xids", "43,13", "", "")'
    )
    assert "unless on (xid) gpu_node_guard:user_code_xid" in rules["GPUHardwareXidCount"]
    assert "unless on (xid) gpu_node_guard:user_code_xid" in rules["GPUHardwareXid"]
    assert "!= 13" not in rules["GPUHardwareXid"]
    assert 'namespace="ops", cronjob="gpu-node-guard"' in rules["GPUNodeGuardNotRunning"]
    assert '"label_example_com_node"' in rules["GPUNodeGuardJobFailed"]


# ── Notifications, the pushgateway variant, runbook links ───────────────────────────────────────


def _rules(p: alert_queries.AlertParams, s: Settings | None = None) -> dict[str, dict[str, Any]]:
    groups = alerts.rule_groups(s or Settings(), p)
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_only_the_notification_pair_is_info_and_carries_the_route_label() -> None:
    rules = _rules(alert_queries.AlertParams())
    notify = {name for name, r in rules.items() if "notify" in r["labels"]}
    info = {name for name, r in rules.items() if r["labels"]["severity"] == "info"}
    assert (
        notify
        == info
        == {"GPUNodeGuardCordoned", "GPUNodeGuardReturned", "GPUNodeGuardDeviceTainted"}
    )
    for name in notify:
        assert rules[name]["labels"] == {"severity": "info", "notify": "gpu-node-guard"}
        assert rules[name]["for"] == "1m"


def test_every_alert_links_its_runbook_section_under_the_configured_base() -> None:
    """Absolute by default (a pager opens it), the site's copy from one setting."""
    base = "https://git.example.com/ops/gpu-node-guard/-/blob/main/docs/runbook.md"
    for s, prefix in ((Settings(), runbook.PUBLISHED_URL), (Settings(runbook_base_url=base), base)):
        for name, rule in _rules(alert_queries.AlertParams(), s).items():
            assert rule["annotations"]["runbook_url"] == f"{prefix}#{name.lower()}"
    assert runbook.PUBLISHED_URL.startswith("https://")


@pytest.mark.parametrize("bad", ["docs/runbook.md", "ftp://x/runbook.md", "https://x/r.md#a", ""])
def test_a_runbook_base_that_a_pager_cannot_open_is_refused(bad: str) -> None:
    with pytest.raises(SettingsError, match="runbook_base_url"):
        Settings(runbook_base_url=bad)


def test_the_pushgateway_variant_changes_only_the_not_running_rule() -> None:
    kube = _rules(alert_queries.AlertParams())
    pushed = _rules(alert_queries.AlertParams(not_running_source="pushgateway"))
    assert list(pushed) == list(kube)
    changed = {name for name in kube if kube[name] != pushed[name]}
    assert changed == {"GPUNodeGuardNotRunning"}
    expr = pushed["GPUNodeGuardNotRunning"]["expr"]
    assert f'{metric_names.LAST_SUCCESS.name}{{namespace="gpu-node-guard"}}' in expr
    assert "kube_cronjob" not in expr
    assert pushed["GPUNodeGuardNotRunning"]["labels"] == kube["GPUNodeGuardNotRunning"]["labels"]


def test_the_annotation_prefix_reaches_the_notification_pair() -> None:
    rules = _rules(alert_queries.AlertParams(), Settings(annotation_prefix="example.com/"))
    assert (
        'kube_node_annotations{annotation_example_com_auto_cordon_reason!=""}'
        in (rules["GPUNodeGuardCordoned"]["expr"])
    )
    assert (
        'kube_node_annotations{annotation_example_com_returned!=""}'
        in (rules["GPUNodeGuardReturned"]["expr"])
    )
    assert "example.com/returned" in ksm_flags(Settings(annotation_prefix="example.com/"))[0]


@pytest.mark.prometheus
def test_promtool_proves_the_pushgateway_variant(promtool: str, tmp_path: Path) -> None:
    """tests/rules/pushgateway/ runs beside the variant rendered as gpu-node-guard.rules.yaml."""
    p = alert_queries.AlertParams(not_running_source="pushgateway")
    rules = alerts.render(Settings(), p)[alerts.RULES_FILE]
    (tmp_path / "gpu-node-guard.rules.yaml").write_text(rules, encoding="utf-8")
    for test_file in sorted((ROOT / "tests" / "rules" / "pushgateway").glob("*.test.yaml")):
        shutil.copy(test_file, tmp_path / test_file.name)
        result = _run([promtool, "test", "rules", test_file.name], tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr


def ksm_flags(s: Settings) -> tuple[str, str]:
    """The kube-state-metrics flags the rules need (annotations and labels are opt-in)."""
    names = Annotations(s.annotation_prefix)
    return (
        f"--metric-annotations-allowlist=nodes=[{names.reason},{names.gpu},{names.returned},"
        f"{names.device_taint},{names.conformance_failed},{names.onboarding_failed}]",
        f"--metric-labels-allowlist=jobs=[{APP_LABEL},{COMPONENT_LABEL},{names.node_label}]",
    )


def test_docs_name_every_alert_and_the_kube_state_metrics_flags() -> None:
    docs = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    for needle in (*ALERT_NAMES, *ksm_flags(Settings())):
        assert needle in docs


def test_check_passes_after_write_and_names_the_stale_file(tmp_path: Path) -> None:
    for path in (alerts.RULES_FILE, alerts.PROMETHEUS_RULE_FILE):
        (tmp_path / path.parent).mkdir(parents=True, exist_ok=True)
    runner = CliRunner()
    assert runner.invoke(alerts.main, ["--root", str(tmp_path), "check"]).exit_code == 1
    assert runner.invoke(alerts.main, ["--root", str(tmp_path), "write"]).exit_code == 0
    assert runner.invoke(alerts.main, ["--root", str(tmp_path), "check"]).exit_code == 0
    (tmp_path / alerts.PROMETHEUS_RULE_FILE).write_text("# edited by hand\n", encoding="utf-8")
    result = runner.invoke(alerts.main, ["--root", str(tmp_path), "check"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: manifests/components/alerts/prometheusrule.yaml differs from "
        "guard/generate/alerts.py;"
        " run `python -m guard.generate.alerts write`\n"
    )


def test_a_root_without_manifests_is_one_usage_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(alerts.main, ["--root", str(tmp_path), "check"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {tmp_path / 'manifests/prometheus'} is not a directory; run from the repo root"
    )


@pytest.mark.prometheus
def test_promtool_accepts_the_shipped_rules(promtool: str) -> None:
    result = _run([promtool, "check", "rules", str(alerts.RULES_FILE)], ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    # + the recorded limit, the user-code Xids (2) and CoreDNS's upstreams (2)
    assert f"SUCCESS: {len(ALERT_NAMES) + 5} rules found" in result.stdout


@pytest.mark.prometheus
def test_promtool_accepts_rules_built_from_other_settings(promtool: str, tmp_path: Path) -> None:
    custom = Settings(user_code_xids=(13,), breaker_max_nodes=2, annotation_prefix="example.com/")
    rules = tmp_path / "custom.rules.yaml"
    rules.write_text(alerts.render(custom, alert_queries.AlertParams())[alerts.RULES_FILE], "utf-8")
    result = _run([promtool, "check", "rules", str(rules)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
@pytest.mark.parametrize("test_file", RULE_TESTS, ids=[p.name for p in RULE_TESTS])
def test_promtool_rule_tests_pass(promtool: str, test_file: Path) -> None:
    result = _run([promtool, "test", "rules", test_file.name], test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr


# The incident write-up's corrected rule, verbatim: its `unless` drops any GPU with any Xid a
# day ago, user-code Xids included.
OLD_RULE = """\
max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS) > 0 != 13 != 31 != 43 != 45 != 68 != 109
  unless on (Hostname, gpu) (max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS offset 24h) > 0)"""


@pytest.mark.prometheus
def test_old_rule_was_blind_where_the_shipped_rule_fires(promtool: str, tmp_path: Path) -> None:
    labels = 'gpu="4", UUID="GPU-5d1c", pci_bus_id="00000000:99:00.0"'
    shipped = alert_queries.alert_hardware_xid(Settings(), alert_queries.AlertParams())
    scenario = {
        "rule_files": [],
        "evaluation_interval": "5m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [  # Xid 13 (user code) until 26h, then Xid 79
                    {
                        "series": f'DCGM_FI_DEV_XID_ERRORS{{Hostname="gpu-node-b", {labels}}}',
                        "values": "13x1559 79x10",
                    },
                ],
                "promql_expr_test": [
                    {"expr": OLD_RULE, "eval_time": "26h", "exp_samples": []},
                    {
                        "expr": shipped,
                        "eval_time": "26h",
                        "exp_samples": [
                            {"labels": f'{{node="gpu-node-b", {labels}}}', "value": 79}
                        ],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "old-rule.test.yaml"
    test_file.write_text(yaml.safe_dump(scenario, width=10_000), encoding="utf-8")
    result = _run([promtool, "test", "rules", test_file.name], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_device_taint_pair_reads_the_pushed_states_and_writes() -> None:
    """The states and the write's type word are the guard's own (docs/metrics.md), so a renamed
    state or action fails here, not silently in a cluster."""
    rules = _rules(alert_queries.AlertParams())
    too_long = rules["GPUDeviceTaintedTooLong"]["expr"]
    assert f'{metric_names.NODES.name}{{state=~"device-tainted|device-repeat-fault"}}' in too_long
    assert {"device-tainted", "device-repeat-fault"} <= {s.value for s in NODE_STATES}
    tainted = rules["GPUNodeGuardDeviceTainted"]["expr"]
    assert 'type="taint-device", outcome="applied"' in tainted
    assert "taint-device" in WRITE_TYPES
    assert f"changes({metric_names.LAST_RUN.name}[1h])" in tainted
    assert rules["GPUDeviceTaintedTooLong"]["labels"] == {"severity": "warning"}
