"""`gpu-node-guard config check`: the example overlay and tests/overlays/every-setting render
coherent with the real kustomize v5.7.1; each kind of incoherence is one line and exit 1; the
every-setting overlay changes every setting a site may change; its rendered PrometheusRule
fires, under promtool, at the site's breaker limit."""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from guard.generate import alerts, config
from guard.generate.alert_queries import AlertParams
from guard.generate.config import IMAGES, Rendered, check
from guard.generate.policies import documents
from guard.names import SETTINGS_CONFIGMAP
from guard.settings import LAYOUT_SETTINGS, SITE_SETTINGS, Settings, SettingsError, setting_fields
from tests.tiers import tool, unavailable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "overlays" / "example"
EVERY = ROOT / "tests" / "overlays" / "every-setting"
# Site settings the every-setting overlay leaves at their default, each for its reason (its
# settings.env says which): in-cluster, the CronJob's schedule, one credential of three.
LEFT = {"kubeconfig", "prometheus_bearer_token_file", "prometheus_service_account_token"}


@pytest.fixture(scope="module")
def kustomize() -> list[str]:
    """kustomize itself (the tests pass its path as --kustomize), not `kubectl kustomize`."""
    try:
        found = config.find_kustomize()
    except config.ConfigError as exc:
        found = [str(exc)]
    if found[-1] != "build":
        unavailable("unit (kustomize)", "no kustomize binary", "run `make deploytest`")
    return found


@pytest.fixture(scope="module")
def example(kustomize: list[str]) -> Rendered:
    return config.render(EXAMPLE, kustomize)


@pytest.fixture(scope="module")
def every(kustomize: list[str]) -> Rendered:
    return config.render(EVERY, kustomize)


@pytest.mark.parametrize("overlay", [EXAMPLE, EVERY], ids=["example", "every-setting"])
def test_both_overlays_are_coherent(overlay: Path, kustomize: list[str]) -> None:
    result = CliRunner().invoke(config.config, ["check", str(overlay), "--kustomize", kustomize[0]])
    assert result.exit_code == 0, result.output
    assert "coherent" in result.output


def test_the_site_values_are_the_ones_every_consumer_sees(example: Rendered) -> None:
    s, problems = check(example)
    assert problems == [] and s is not None
    assert s.breaker_max_nodes == 3  # the overlay's, not the default 5
    assert s.image == "registry.example.internal/mirror/gpu-node-guard:0.1.0"


def test_every_setting_overlay_changes_every_site_setting(every: Rendered) -> None:
    s, problems = check(every)
    assert problems == [] and s is not None
    site = {*SITE_SETTINGS, *IMAGES} - LEFT  # the images from `images:`
    changed = {
        f.name for f in setting_fields() if getattr(s, f.name) != getattr(Settings(), f.name)
    }
    assert changed == site


def _policy_text(s: Settings) -> list[str]:
    """The policies' texts with the params' defaults blanked (what the settings leave fixed)."""
    return [config._PARAM.sub(r"params[\1]", text) for text in config._strings(documents(s))]


def _rule_text(s: Settings) -> dict[str, str]:
    """The rules' expressions with the strings the alerts component substitutes emptied."""
    return config._blanked(config._rule_exprs(alerts.rule_groups(s, AlertParams())))


def test_a_site_value_alone_changes_only_params_and_substituted_strings(every: Rendered) -> None:
    """Each site value reaches the policies through their params and the rules through the alerts
    component's substitutions, nowhere else: an overlay setting one is admitted and followed."""
    s, _ = check(every)
    assert s is not None
    policies, rules, tried = _policy_text(Settings()), _rule_text(Settings()), 0
    for name in sorted({f.name for f in setting_fields()} - {*LAYOUT_SETTINGS, *IMAGES}):
        if getattr(s, name) == getattr(Settings(), name):
            continue
        try:
            one = replace(Settings(), **{name: getattr(s, name)})
        except SettingsError:
            continue  # valid only with other site values
        assert (_policy_text(one), _rule_text(one)) == (policies, rules), name
        tried += 1
    assert tried > 30


Edit = Callable[[dict[tuple[str, str, str], dict[str, Any]]], None]


def _settings(docs: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, str]:
    data: dict[str, str] = docs[("ConfigMap", "gpu-node-guard", SETTINGS_CONFIGMAP)]["data"]
    return data


def _guard_env(docs: dict[tuple[str, str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    cron = docs[("CronJob", "gpu-node-guard", "gpu-node-guard")]
    env: list[dict[str, Any]] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ][0]["env"]
    return env


def _policy(docs: dict[tuple[str, str, str], dict[str, Any]], name: str) -> dict[str, Any]:
    return docs[("ValidatingAdmissionPolicy", "", name)]


CASES: dict[str, tuple[Edit, str]] = {
    "unknown key": (
        lambda d: _settings(d).update(GUARD_HOLD_WINDOW="600"),
        "GUARD_HOLD_WINDOW: not a setting of the guard",
    ),
    "layout key": (
        lambda d: _settings(d).update(GUARD_JOBS_NAMESPACE="gpu-node-guard-jobs"),
        "GUARD_JOBS_NAMESPACE: a layout name",
    ),
    "bad value": (
        lambda d: _settings(d).update(GUARD_BREAKER_MAX_FRACTION="most"),
        "bad setting in the CronJob's settings",
    ),
    "refused value": (
        lambda d: _settings(d).update(GUARD_BREAKER_MAX_FRACTION="1.5"),
        "the guard refuses these settings: breaker_max_fraction",
    ),
    "fixed value": (
        lambda d: _settings(d).update(GUARD_LOADTEST_MATRIX_SIZE="4096"),
        "GUARD_LOADTEST_MATRIX_SIZE: a fixed value of the guard, not a site setting",
    ),
    "a key of a compound now": (
        lambda d: _settings(d).update(GUARD_BUDGET_RMA_H="720"),
        "GUARD_BUDGET_RMA_H: now the key rma= of GUARD_BUDGET, not a site setting",
    ),
    "bad compound": (
        lambda d: _settings(d).update(GUARD_BUDGET="rma=3w"),
        "GUARD_BUDGET='rma=3w': rma='3w' is not a number (it may end in h)",
    ),
    "the cronjob's own": (
        lambda d: _settings(d).update(GUARD_WATCH_UNTIL_S="100"),
        "GUARD_WATCH_UNTIL_S: the CronJob's own (its manifest), not a site setting",
    ),
    "env entry disagrees": (
        lambda d: next(e for e in _guard_env(d) if e["name"] == "GUARD_LOADTEST_IMAGE").update(
            value="elsewhere/burn:1"
        ),
        "GUARD_LOADTEST_IMAGE: the CronJob's env says 'elsewhere/burn:1', its ConfigMap",
    ),
    "policy edited": (
        lambda d: _policy(d, "gpu-node-guard-loadtest-job")["spec"].update(failurePolicy="Ignore"),
        "ValidatingAdmissionPolicy gpu-node-guard-loadtest-job is not the generated one",
    ),
    "binding unbound": (
        lambda d: d[("ValidatingAdmissionPolicyBinding", "", "gpu-node-guard-onboarding-gate")][
            "spec"
        ].pop("paramRef"),
        "ValidatingAdmissionPolicyBinding gpu-node-guard-onboarding-gate is not the generated one",
    ),
    "breaker not wired": (
        lambda d: d[("PrometheusRule", "gpu-node-guard", "gpu-node-guard")]["spec"]["groups"][1][
            "rules"
        ][0].update(expr="5"),
        "alerts: gpu_node_guard:breaker_max_nodes carries GUARD_BREAKER_MAX_NODES '5', the site's"
        " is '3' (list ../../components/alerts",
    ),
    "setting not copied into the rules": (
        lambda d: _settings(d).update(GUARD_USER_CODE_XIDS="13,43"),
        "alerts: gpu_node_guard:user_code_xids carries GUARD_USER_CODE_XIDS '13,31,43,45,68,109',"
        " the site's is '13,43' (list ../../components/alerts",
    ),
    "service network not copied": (
        lambda d: _settings(d).update(GUARD_SERVICE_NETWORK_CNI_NAMESPACE="kube-flannel"),
        "alerts: NodeServiceNetworkDown carries GUARD_SERVICE_NETWORK_CNI_NAMESPACE '', the"
        " site's is 'kube-flannel'",
    ),
    "rules bake a setting": (
        lambda d: d[("PrometheusRule", "gpu-node-guard", "gpu-node-guard")]["spec"]["groups"][0][
            "rules"
        ][2].update(expr="DCGM_FI_DEV_XID_ERRORS > 0 != 13"),
        "alerts: GPUHardwareXid does not follow the site (its expression)",
    ),
    "runbook link not the site's": (
        lambda d: _settings(d).update(GUARD_RUNBOOK_BASE_URL="https://wiki.site.test/runbook"),
        "do not link the site's GUARD_RUNBOOK_BASE_URL 'https://wiki.site.test/runbook'",
    ),
    "agent image": (
        lambda d: d[("DaemonSet", "gpu-node-guard-jobs", "gpu-node-guard-agent")]["spec"][
            "template"
        ]["spec"]["containers"][0].update(image="ghcr.io/gpu-node-guard/x:1"),
        "the agent's container runs 'ghcr.io/gpu-node-guard/x:1', the policies admit",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_incoherence_is_one_line(example: Rendered, case: str) -> None:
    edit, expected = CASES[case]
    docs = copy.deepcopy(example.docs)
    edit(docs)
    _, problems = check(Rendered(docs))
    assert [p for p in problems if expected in p], problems
    assert all("\n" not in p for p in problems)


def test_an_overlay_without_image_wiring_is_refused(tmp_path: Path, kustomize: list[str]) -> None:
    """`images:` alone rewrites the containers only: the policies' params (and the recorded
    breaker limit) keep the base's values, and the check says so."""
    for part in ("manifests", "policies"):  # kustomize takes relative bases only
        shutil.copytree(ROOT / part, tmp_path / part)
    overlay = tmp_path / "manifests" / "overlays" / "site"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["../../base"],
                "images": [
                    {
                        "name": "ghcr.io/gpu-node-guard/gpu-node-guard",
                        "newName": "mirror.test/gpu-node-guard",
                    }
                ],
            }
        )
    )
    _, problems = check(config.render(overlay, kustomize))
    assert "the CronJob's container runs 'mirror.test/gpu-node-guard:0.1.0'" in "\n".join(problems)


def test_an_overlay_that_does_not_render_is_exit_2(tmp_path: Path, kustomize: list[str]) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    result = CliRunner().invoke(
        config.config, ["check", str(tmp_path), "--kustomize", kustomize[0]]
    )
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.prometheus
def test_promtool_fires_the_rendered_breaker_at_the_sites_limit(
    every: Rendered, tmp_path: Path
) -> None:
    """The every-setting overlay's PrometheusRule, as rendered: without a push the alert opens
    at its GUARD_BREAKER_MAX_NODES=4, not at the default 5 (and not at 3)."""
    promtool = tool("promtool", "prometheus", "install the Debian package prometheus")
    (rule,) = every.kind("PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    (alert,) = [
        r
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if r.get("alert") == "GPUNodeGuardBreakerOpen"
    ]
    annotations = {k: v.replace("{{ $value }}", "4") for k, v in alert["annotations"].items()}
    label = "annotation_gpu_node_guard_io_auto_cordon_reason"
    series = [
        {
            "series": f'kube_node_annotations{{node="n{i}", {label}="xid-79"}}',
            "values": "1x30" if i < 3 else "_x10 1x20",
        }
        for i in range(4)
    ]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": "gpu_node_guard:breaker_max_nodes",
                        "eval_time": "5m",
                        "exp_samples": [{"labels": "gpu_node_guard:breaker_max_nodes", "value": 4}],
                    }
                ],
                "alert_rule_test": [
                    {"eval_time": "9m", "alertname": "GPUNodeGuardBreakerOpen", "exp_alerts": []},
                    {
                        "eval_time": "10m",
                        "alertname": "GPUNodeGuardBreakerOpen",
                        "exp_alerts": [
                            {"exp_labels": {"severity": "critical"}, "exp_annotations": annotations}
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "breaker.test.yaml").write_text(yaml.safe_dump(test))
    done = subprocess.run(
        [promtool, "test", "rules", "breaker.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.prometheus
def test_promtool_follows_the_rendered_filters_of_the_site(every: Rendered, tmp_path: Path) -> None:
    """The every-setting overlay's PrometheusRule, as rendered and with no push: its user-code
    Xids (45 a hardware fault there, 149 not) and its service-network pods (flannel in
    kube-flannel, kube-proxy in any namespace; calico-node no longer watched)."""
    promtool = tool("promtool", "prometheus", "install the Debian package prometheus")
    (rule,) = every.kind("PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    expr = {
        r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r
    }
    gpu = 'gpu="0", pci_bus_id="00000000:1b:00.0"'
    pods = {
        ("kube-flannel", "kube-flannel-ds-x7k2p", "DaemonSet", "kube-flannel-ds"),
        ("infra", "kube-proxy-n1", "Node", "n1"),
        ("kube-system", "calico-node-q8w4r", "DaemonSet", "calico-node"),
    }
    series = [
        {
            "series": f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}", UUID="GPU-{node}", {gpu}}}',
            "values": f"{xid}x10",
        }
        for node, xid in (("n1", 45), ("n2", 149))
    ]
    series += [
        {
            "series": 'kube_node_status_condition{node="n1", condition="Ready", status="true"}',
            "values": "1x10",
        }
    ]
    for ns, pod, kind, owner in sorted(pods):
        series += [
            {
                "series": f'kube_pod_info{{namespace="{ns}", pod="{pod}", node="n1", '
                f'created_by_kind="{kind}", created_by_name="{owner}"}}',
                "values": "1x10",
            },
            {
                "series": f'kube_pod_status_ready{{namespace="{ns}", pod="{pod}", '
                'condition="false"}',
                "values": "1x10",
            },
        ]
    watched = (("infra", "kube-proxy-n1"), ("kube-flannel", "kube-flannel-ds-x7k2p"))
    down = [
        {"labels": f'{{namespace="{ns}", pod="{pod}", node="n1"}}', "value": 1}
        for ns, pod in watched
    ]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": expr["NodeServiceNetworkDown"],
                        "eval_time": "5m",
                        "exp_samples": down,
                    },
                    {
                        "expr": expr["GPUHardwareXid"],
                        "eval_time": "5m",
                        "exp_samples": [
                            {"labels": f'{{node="n1", UUID="GPU-n1", {gpu}}}', "value": 45}
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "site.test.yaml").write_text(yaml.safe_dump(test, width=10_000))
    done = subprocess.run(
        [promtool, "test", "rules", "site.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
