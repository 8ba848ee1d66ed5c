"""`gpu-node-guard conformance` through click: exit codes, the JSON report, the summary in the
termination message, bad arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guard.conformance.checks import ITEMS
from guard.conformance.cli import SCHEMA, conformance
from guard.wire import parse_summary
from tests.fixtures.hosts.hosttree import ALLOWED_DNS, CONTROL_PLANE, KUBEADM, build_host

CHECKED = ["--control-plane-version", CONTROL_PLANE, "--allowed-dns", ALLOWED_DNS]
PERSIST = "etc/modules-load.d/ipvs.conf"


def invoke(root: Path, *args: str) -> tuple[int, str]:
    # The termination message is written only to a file that exists: none here.
    argv = ["--root", str(root), "--termination-log", str(root / "no-such-file"), *args]
    result = CliRunner().invoke(conformance, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("changes", "args", "code", "failed", "skipped"),
    [
        pytest.param({}, CHECKED, 0, (), (), id="healthy-exits-0"),
        pytest.param({PERSIST: None}, CHECKED, 1, ("ipvs-persist",), (), id="fail-exits-1"),
        pytest.param(
            {}, [], 0, (), ("rke2-version", "dns-upstream"), id="unset-expectations-skip-exit-0"
        ),
        pytest.param(
            {"proc/modules": "nvidia 1 0 - Live 0x0\n", PERSIST: None},
            [*CHECKED, "--role", "server"],
            1,
            ("ipvs-persist", "ipvs-loaded", "rke2-unit"),
            (),
            id="several-failures-listed-in-order",
        ),
        pytest.param(
            {**KUBEADM, PERSIST: None},
            CHECKED,
            0,
            (),
            ("ipvs-resolvable", "ipvs-persist", "ipvs-loaded", "rke2-unit", "rke2-version"),
            id="kubeadm-iptables-node-skips-rke2-and-ip-vs",
        ),
    ],
)
def test_json_report_and_summary(
    tmp_path: Path,
    changes: dict[str, None],
    args: list[str],
    code: int,
    failed: tuple[str, ...],
    skipped: tuple[str, ...],
) -> None:
    root = build_host(tmp_path / "host", changes)
    log = tmp_path / "termination-log"
    log.write_text("")  # kubelet creates the file before the container starts
    result = CliRunner().invoke(
        conformance,
        ["--root", str(root), "--output", "json", "--termination-log", str(log), *args],
    )
    report = json.loads(result.stdout)
    assert result.exit_code == code
    assert (report["schema"], report["ok"], tuple(report["failed"])) == (SCHEMA, not failed, failed)
    assert [i["name"] for i in report["items"]] == list(ITEMS)
    assert all(set(i) == {"name", "status", "observed", "action"} for i in report["items"])
    assert tuple(i["name"] for i in report["items"] if i["status"] == "SKIP") == skipped
    assert report["counts"]["FAIL"] == len(failed)
    summary = parse_summary(log.read_text())
    assert (summary.ok, summary.failed_items) == (not failed, failed)
    assert tuple(f.item for f in summary.skipped) == skipped
    assert result.stderr == ""


def test_text_report_is_a_table_with_a_result_line(tmp_path: Path) -> None:
    exit_code, output = invoke(build_host(tmp_path, {PERSIST: None}), *CHECKED)
    lines = output.splitlines()
    assert exit_code == 1
    assert lines[0] == (
        "node: RKE2 (found /var/lib/rancher/rke2); kube-proxy ipvs"
        " (/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml)"
    )
    assert lines[1].split() == ["ITEM", "STATUS", "OBSERVED", "/", "ACTION"]
    rows = {line.split()[0]: line.split()[1] for line in lines[2:-1] if not line.startswith(" ")}
    assert rows == dict.fromkeys(ITEMS, "PASS") | {"ipvs-persist": "FAIL"}
    assert any(
        line.strip() == "-> echo ip_vs > /etc/modules-load.d/ipvs.conf (or run with --fix)"
        for line in lines
    )
    assert lines[-1].startswith("result: FAIL pass=8 warn=0 fail=1 fixed=0 unknown=0 skip=0")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--allowed-dns", "10.0.0.0/8,nope"], "not a CIDR: 'nope'", id="bad-cidr"),
        pytest.param(["--allowed-dns", ","], "no CIDR given", id="empty-cidr-list"),
        pytest.param(
            ["--control-plane-version", "1.34"], "is not a version like", id="bad-version"
        ),
        pytest.param(["--role", "gpu"], "Invalid value for '--role'", id="bad-role"),
        pytest.param(["--timeout-s", "0"], "Invalid value for '--timeout-s'", id="zero-timeout"),
        pytest.param(["--timeout-s", "nan"], "not a finite number", id="nan-timeout"),
        pytest.param(["--output", "yaml"], "Invalid value for '--output'", id="bad-output"),
        pytest.param(["--platform", "k3s"], "Invalid value for '--platform'", id="bad-platform"),
        pytest.param(
            ["--kube-proxy-mode", "userspace"],
            "Invalid value for '--kube-proxy-mode'",
            id="bad-proxy-mode",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_error_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    exit_code, output = invoke(tmp_path, *args)
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert exit_code == 2
    assert len(errors) == 1 and message in errors[0], output
    assert "Traceback" not in output


def test_missing_root_is_a_bad_argument(tmp_path: Path) -> None:
    exit_code, output = invoke(tmp_path / "absent")
    assert exit_code == 2
    assert "Invalid value for '--root'" in output


def test_environment_variables_set_the_options(tmp_path: Path) -> None:
    env = {"GUARD_CONFORMANCE_ALLOWED_DNS": "192.0.2.0/24", "GUARD_CONFORMANCE_OUTPUT": "json"}
    root = build_host(tmp_path)
    result = CliRunner().invoke(
        conformance, ["--root", str(root), "--termination-log", ""], env=env
    )
    assert result.exit_code == 1
    assert json.loads(result.output)["failed"] == ["dns-upstream"]


def test_every_option_reads_its_documented_environment_variable() -> None:
    # docs/conformance.md: every option but --fix also reads GUARD_CONFORMANCE_<OPTION>.
    assert {p.name: p.envvar for p in conformance.params} == {
        "root": "GUARD_CONFORMANCE_ROOT",
        "fix": None,
        "role": "GUARD_CONFORMANCE_ROLE",
        "control_plane_version": "GUARD_CONFORMANCE_CONTROL_PLANE_VERSION",
        "allowed_dns": "GUARD_CONFORMANCE_ALLOWED_DNS",
        "platform": "GUARD_CONFORMANCE_PLATFORM",
        "kube_proxy_mode": "GUARD_CONFORMANCE_KUBE_PROXY_MODE",
        "resolv_conf": "GUARD_CONFORMANCE_RESOLV_CONF",
        "output": "GUARD_CONFORMANCE_OUTPUT",
        "timeout_s": "GUARD_CONFORMANCE_TIMEOUT_S",
        "nsenter": "GUARD_CONFORMANCE_NSENTER",
        "termination_log": "GUARD_CONFORMANCE_TERMINATION_LOG",
    }


@pytest.mark.parametrize(
    ("args", "kube_proxy"),
    [
        pytest.param([], "ipvs", id="read-from-the-node"),
        pytest.param(["--kube-proxy-mode", "iptables"], "iptables", id="set"),
    ],
)
def test_platform_is_in_the_json_report(tmp_path: Path, args: list[str], kube_proxy: str) -> None:
    _, output = invoke(build_host(tmp_path), "--output", "json", *args)
    platform = json.loads(output.splitlines()[0])["platform"]
    assert (platform["rke2"], platform["kube_proxy_mode"], platform["dpkg"]) == (
        True,
        kube_proxy,
        True,
    )


def test_an_unwritable_termination_log_is_one_note_not_a_failure(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.mkdir()  # exists but cannot be written, even by root
    root = build_host(tmp_path / "host")
    result = CliRunner().invoke(
        conformance, ["--root", str(root), *CHECKED, "--termination-log", str(log)]
    )
    assert result.exit_code == 0
    assert result.stderr == (
        f"WARN termination message not written to {str(log)!r}: Is a directory"
        " (the verdict and exit code stand)\n"
    )


def test_no_termination_log_is_created_where_none_exists(tmp_path: Path) -> None:
    root = build_host(tmp_path / "host")
    missing = tmp_path / "dev" / "termination-log"
    (tmp_path / "dev").mkdir()
    result = CliRunner().invoke(
        conformance, ["--root", str(root), "--termination-log", str(missing)]
    )
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "dev").iterdir()) == []


def test_the_environment_cannot_turn_on_the_host_write(tmp_path: Path) -> None:
    """A host write is asked for on the command line only, where the admission policy sees it."""
    env = {"GUARD_CONFORMANCE_FIX": "1", "GUARD_CONFORMANCE_OUTPUT": "json"}
    root = build_host(tmp_path, {PERSIST: None})
    result = CliRunner().invoke(conformance, ["--root", str(root), *CHECKED], env=env)
    report = json.loads(result.stdout.splitlines()[0])
    assert report["fix"] is False
    assert not (root / PERSIST.lstrip("/")).exists()
    assert result.stderr.splitlines()[0] == (
        "WARN unknown setting 'GUARD_CONFORMANCE_FIX' in the environment is ignored"
        " (--fix is read from the command line only)"
    )
