"""Bad input to `gpu-node-guard run`: one clear line, non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from guard.cli import cli
from guard.settings import (
    CRONJOB_DEADLINE_S,
    JOB_DEADLINE_MAX_S,
    JOB_DEADLINE_MIN_S,
    JOB_TTL_MAX_S,
    JOB_TTL_MIN_S,
    Settings,
    fixed_settings,
)

BASE = ["run", "--prometheus-url", "http://127.0.0.1:9", "--dry-run"]


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        pytest.param(["--output", "yaml"], {}, 2, "Invalid value for '--output'", id="bad-output"),
        pytest.param(["--at", "yesterday"], {}, 2, "not RFC 3339", id="at-not-rfc3339"),
        pytest.param(["--at", "2026-09-21T05:55:00"], {}, 2, "not RFC 3339", id="at-without-zone"),
        pytest.param(
            ["--at", "2026-13-45T99:00:00Z"],
            {},
            2,
            "Invalid value for '--at': '2026-13-45T99:00:00Z': not a valid time",
            id="at-impossible-date",
        ),
        pytest.param(
            ["--at", "9999-12-31T23:59:59-23:59"],
            {},
            2,
            "Invalid value for '--at': '9999-12-31T23:59:59-23:59': time out of range",
            id="at-overflows-past-9999",
        ),
        pytest.param(
            ["--at", "0001-01-01T00:00:00+01:00"],
            {},
            2,
            "time out of range",
            id="at-overflows-before-year-1",
        ),
        pytest.param(
            ["--at", "２０２６-09-21T05:55:00Z"], {}, 2, "not RFC 3339", id="at-fullwidth-digits"
        ),
        pytest.param(
            ["--hold-window-s", "5"],
            {},
            2,
            "--hold-window-s (GUARD_HOLD_WINDOW_S) must be at least 60",
            id="bad-setting-value",
        ),
        pytest.param(
            ["--user-code-xids", "13,x"],
            {},
            2,
            "comma-separated list of integers",
            id="bad-xid-list",
        ),
        pytest.param(
            [],
            {"GUARD_BREAKER_MAX_NODES": "many"},
            2,
            "'many' is not a valid integer",
            id="bad-env-var",
        ),
        pytest.param(
            ["--prometheus-url", "127.0.0.1:9090"],
            {},
            2,
            "--prometheus-url (GUARD_PROMETHEUS_URL) must be http://host:port or https://",
            id="prometheus-url-without-scheme",
        ),
        pytest.param(
            ["--prometheus-url", "ftp://127.0.0.1:9090"],
            {},
            2,
            "must be http://",
            id="prometheus-url-not-http",
        ),
        pytest.param(
            ["--prometheus-url", "http://admin:secret@127.0.0.1:9090"],
            {},
            2,
            "no credentials (they would be logged",
            id="prometheus-url-with-credentials",
        ),
        pytest.param(
            ["--prometheus-url", "http://127.0.0.1:9090/ prom"],
            {},
            2,
            "must be http://",
            id="prometheus-url-with-space",
        ),
        pytest.param(
            ["--cluster-snapshot", "/nonexistent/snap.yaml"],
            {},
            2,
            "does not exist",
            id="missing-snapshot",
        ),
        pytest.param(
            ["--fast-path-xids", "13"],
            {},
            2,
            "a fast-path Xid is a user-code Xid",
            id="contradictory-xid-lists",
        ),
    ],
)
def test_bad_input_is_one_line(args, env, code, message):
    result = CliRunner().invoke(cli, [*BASE, *args], env=env)
    assert result.exit_code == code
    assert message in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit | type(None))


# Each of these was accepted once and then failed in the middle of a cordon (a Job refused by the
# job-shape policy after the node was cordoned and its ledger line written).
@pytest.mark.parametrize(
    ("env", "flag", "message"),
    [
        pytest.param(
            {"GUARD_CADENCE_S": "-5"},
            "GUARD_CADENCE_S",
            "must be in 1..86400",
            id="cadence-negative",
        ),
        pytest.param(
            {"GUARD_CADENCE_S": "9" * 30},
            "GUARD_CADENCE_S",
            "must be in 1..86400",
            id="cadence-overflow",
        ),
        pytest.param(
            {"GUARD_HOLD_WINDOW_S": "9" * 30},
            "--hold-window-s",
            "at most 86400",
            id="hold-window-overflow",
        ),
        pytest.param(
            {"GUARD_NAMESPACE": "Bad_NS"},
            "GUARD_NAMESPACE",
            "DNS-1123 label",
            id="namespace-not-dns",
        ),
        pytest.param({"GUARD_IMAGE": " "}, "GUARD_IMAGE", "image reference", id="image-blank"),
        pytest.param(
            {"GUARD_LOADTEST_IMAGE": "a b"},
            "GUARD_LOADTEST_IMAGE",
            "image reference",
            id="image-with-space",
        ),
        pytest.param(
            {"GUARD_RESET_CLASS_XIDS": "48,-1"},
            "--reset-class-xids",
            "must list Xids in 1..999999",
            id="negative-xid",
        ),
        pytest.param(
            {"GUARD_RESET_CLASS_XIDS": "48,79"},
            "--reset-class-xids",
            "must not list a fast-path Xid",
            id="reset-class-fast-path-xid",
        ),
        pytest.param(
            {"GUARD_BREAKER_MAX_FRACTION": "nan"},
            "--breaker-max-fraction",
            "must be in [0, 1]",
            id="fraction-nan",
        ),
        pytest.param(
            {"GUARD_CYCLE_DEADLINE_S": str(CRONJOB_DEADLINE_S - 9)},
            "GUARD_CYCLE_DEADLINE_S",
            f"must be in 1..{CRONJOB_DEADLINE_S - 10}",
            id="deadline-past-the-cronjob",
        ),
        pytest.param(
            {"GUARD_API_PAGE_SIZE": "10"},
            "--api-page-size",
            "must be in 100..5000",
            id="page-too-small-for-the-page-bound",
        ),
        pytest.param(
            {"GUARD_SERVICE_NETWORK_KUBE_PROXY_PODS": 'kube-proxy"}'},
            "--service-network-kube-proxy-pods",
            "must be empty or a regex",
            id="pod-pattern-breaking-out-of-the-promql-string",
        ),
        pytest.param(
            {"GUARD_SERVICE_NETWORK_CNI_DAEMONSETS": "(calico"},
            "--service-network-cni-daemonsets",
            "must be empty or a regex",
            id="daemonset-pattern-not-a-regex",
        ),
        pytest.param(
            {"GUARD_CONFORMANCE_ALLOWED_DNS": "10.0.0.0/8,nope"},
            "--conformance-allowed-dns",
            "comma-separated CIDRs",
            id="allowed-dns-the-conformance-job-refuses",
        ),
        pytest.param(
            {"GUARD_CONFORMANCE_CONTROL_PLANE_VERSION": "1.34"},
            "--conformance-control-plane-version",
            "a version like v1.34.3+rke2r1",
            id="version-the-conformance-job-refuses",
        ),
        pytest.param(
            {"GUARD_SERVICE_NETWORK_CNI_NAMESPACE": "Calico System"},
            "--service-network-cni-namespace",
            "DNS-1123 label",
            id="cni-namespace-bad",
        ),
    ],
)
def test_settings_that_could_half_cordon_are_refused_at_start(env, flag, message):
    result = CliRunner().invoke(cli, BASE, env=env)
    assert result.exit_code == 2
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    if flag.startswith("GUARD_"):  # the CronJob's own: a variable, no flag
        assert f"Error: bad setting: {flag} must" in error and message in error
    else:
        variable = "GUARD_" + flag[2:].replace("-", "_").upper()
        assert f"{flag} ({variable}) must" in error and message in error
    assert "Traceback" not in result.output and "please report" not in result.output


def test_the_fixed_values_are_what_the_policies_and_the_load_test_admit():
    """No flag or variable reaches them (docs/deploy.md, "Settings by lifetime"): the bounds a
    site setting once needed are this test's, on the one value the guard ships."""
    s = Settings()
    for deadline in (s.evidence_deadline_s, s.loadtest_deadline_s):
        assert JOB_DEADLINE_MIN_S <= deadline <= JOB_DEADLINE_MAX_S
    for ttl in (s.job_ttl_s, s.boot_check_job_ttl_s):
        assert JOB_TTL_MIN_S <= ttl <= JOB_TTL_MAX_S
    assert 0 < s.loadtest_duration_s < s.onboarding_burnin_s < s.loadtest_deadline_s
    assert 0 < s.loadtest_min_ratio <= 1 and 0 < s.loadtest_allreduce_min_ratio <= 1
    assert 1 <= s.loadtest_matrix_size <= 65_536 and 1 <= s.loadtest_allreduce_timeout_s <= 3600
    assert 0 < s.api_timeout_s <= 60 and 4096 <= s.ledger_archive_bytes < 1_000_000
    assert s.nvml_mismatch_hold_s == 0  # the hold window
    assert set(fixed_settings()) >= {
        "evidence_deadline_s",
        "loadtest_deadline_s",
        "job_ttl_s",
        "boot_check_job_ttl_s",
        "loadtest_duration_s",
        "onboarding_burnin_s",
        "loadtest_min_ratio",
        "loadtest_allreduce_min_ratio",
        "loadtest_matrix_size",
        "loadtest_allreduce_timeout_s",
        "api_timeout_s",
        "ledger_archive_bytes",
        "nvml_mismatch_hold_s",
    }


def test_no_service_network_selector_at_all_is_refused():
    args = [*BASE, "--service-network-kube-proxy-pods=", "--service-network-cni-daemonsets="]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert (
        "--service-network-cni-daemonsets (GUARD_SERVICE_NETWORK_CNI_DAEMONSETS) must not be"
        " empty when service_network_kube_proxy_pods is empty too" in error
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--node", "Bad Node"], "is not a node name", id="node-not-dns"),
        pytest.param(["--node", "n", "--pci", "bus-99"], "not a PCI address", id="bad-pci"),
        pytest.param(["--node", "n", "--xid", "-1"], "'--xid'", id="negative-xid"),
        pytest.param(["--node", "n", "--gpus", "-8"], "'--gpus'", id="negative-gpus"),
        pytest.param(["--node", "n", "--gpus", "0"], "'--gpus'", id="no-gpus"),
    ],
)
def test_render_refuses_values_that_cannot_make_a_job(args, message):
    result = CliRunner().invoke(cli, ["render", "evidence", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_bare_command_prints_the_help_and_succeeds():
    result = CliRunner().invoke(cli, [])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")
    assert "  run " in result.output and "  render " in result.output


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"gpu-node-guard, version {version('gpu-node-guard')}\n"


def test_prometheus_url_is_required():
    result = CliRunner().invoke(cli, ["run", "--dry-run"], env={"GUARD_PROMETHEUS_URL": ""})
    assert result.exit_code == 2
    assert "--prometheus-url (or GUARD_PROMETHEUS_URL) is required" in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"\xff\xfe\x00garbage", "is not a text file", id="binary-file"),
        pytest.param(b"items: [unclosed", "is not YAML", id="broken-yaml"),
        pytest.param(b"kind: List\nitems: []\n", "holds no Node objects", id="no-nodes"),
        pytest.param(b"- just\n- a list\n", "a document is not an object", id="not-an-object"),
    ],
)
def test_unusable_snapshot_file_aborts_before_anything(tmp_path, content, message):
    path = tmp_path / "snap.yaml"
    path.write_bytes(content)
    # The Prometheus URL points at a closed port: the file is judged before any query runs.
    proc = subprocess.run(
        [sys.executable, "-m", "guard", *BASE, "--cluster-snapshot", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    aborts = [line for line in proc.stderr.splitlines() if " ERROR abort " in line]
    assert len(aborts) == 1
    assert message in aborts[0]


def test_a_missing_shipped_file_stops_run_at_start(monkeypatch):
    """Before any query: the evidence Job of the next fault would need the same file."""
    import guard.bundle

    monkeypatch.setattr(guard.bundle, "TEMPLATE_NAME", "missing-request.md.j2")
    result = CliRunner().invoke(cli, BASE)  # Prometheus at a closed port: never asked
    assert result.exit_code == 1
    aborts = [line for line in result.output.splitlines() if " ERROR abort " in line]
    assert len(aborts) == 1
    assert "package data: request template missing-request.md.j2 not found" in aborts[0]


def test_a_fixed_value_in_the_environment_is_named_and_ignored():
    """GUARD_LOADTEST_MATRIX_SIZE was a setting once: a settings.env that still carries it gets
    one WARN line saying it is the guard's own value, and the Job keeps the fixed size."""
    result = CliRunner().invoke(
        cli, ["render", "loadtest", "--node", "n"], env={"GUARD_LOADTEST_MATRIX_SIZE": "4096"}
    )
    assert result.exit_code == 0, result.output
    (warn,) = [line for line in result.stderr.splitlines() if line.startswith("WARN")]
    assert "'GUARD_LOADTEST_MATRIX_SIZE'" in warn and "a fixed value of the guard" in warn
    assert "8192" in result.stdout
    assert "4096" not in result.stdout


def test_each_command_takes_the_settings_it_uses():
    """`run` every site setting; `render` what reaches a Job; `status` where it reads from;
    `report` where it reads from and the budget."""
    counts = {}
    for command in ("run", "render", "status", "report"):
        out = CliRunner().invoke(cli, [command, "--help"]).output
        counts[command] = sum(1 for line in out.splitlines() if line.startswith("  --"))
    # run: 50 when the settings were grouped by lifetime; the node triggers (gpu_classes,
    # admission_rejected_min_pods), the four quarantine budgets and the domain incidents'
    # topology_label are site settings since.
    # A ratchet: a new option replaces one.
    assert counts["run"] <= 50 and counts["render"] <= 25 and counts["status"] <= 25, counts
    assert counts["report"] <= 9, counts  # six of its own, kubeconfig, api-page-size, budget


def test_a_separate_variable_of_a_compound_setting_is_named_and_ignored():
    """GUARD_BUDGET_RMA_H was a setting once: now the key rma= of GUARD_BUDGET. One WARN line
    says so, and the budget keeps its default unless GUARD_BUDGET sets it."""
    from guard.settings_flags import build_settings, unknown_env_lines

    (warn,) = unknown_env_lines({"GUARD_BUDGET_RMA_H": "720", "GUARD_BUDGET": "rma=30d"})
    assert "'GUARD_BUDGET_RMA_H'" in warn and "now the key rma= of GUARD_BUDGET" in warn
    s = build_settings({"budget": "rma=720h, human=48"}, warn=False)
    assert (s.budget_rma_h, s.budget_human_h, s.budget_reset_h) == (720.0, 48.0, 4.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rma=3w", "--budget (GUARD_BUDGET) rma='3w' is not a number (it may end in h)"),
        ("rma", "--budget (GUARD_BUDGET) 'rma' is not key=value with a key of reset,"),
        ("weeks=3", "'weeks=3' is not key=value with a key of reset, power-cycle, rma, human"),
        ("rma=0h", "--budget (GUARD_BUDGET) rma= must be in 0.01..8784 hours (got 0.0)"),
    ],
)
def test_a_bad_compound_setting_is_one_usage_line(value, message):
    result = CliRunner().invoke(cli, [*BASE, "--budget", value])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("Error")]
    assert message in line and "Traceback" not in result.output
