"""`gpu-node-guard conformance` through click: exit codes, the JSON report, bad arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guard.conformance.checks import ITEMS
from guard.conformance.cli import conformance
from guard.conformance.report import SCHEMA, parse_report, summary
from tests.fixtures.hosts.hosttree import ALLOWED_DNS, CONTROL_PLANE, build_host

CHECKED = ["--control-plane-version", CONTROL_PLANE, "--allowed-dns", ALLOWED_DNS]
PERSIST = "etc/modules-load.d/ipvs.conf"


def invoke(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(conformance, ["--root", str(root), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("changes", "args", "code", "failed", "warned"),
    [
        pytest.param({}, CHECKED, 0, (), (), id="healthy-exits-0"),
        pytest.param({PERSIST: None}, CHECKED, 1, ("ipvs-persist",), (), id="fail-exits-1"),
        pytest.param(
            {},
            [],
            0,
            (),
            ("rke2-version", "dns-upstream"),
            id="warn-only-exits-0",
        ),
        pytest.param(
            {"proc/modules": "nvidia 1 0 - Live 0x0\n", PERSIST: None},
            [*CHECKED, "--role", "server"],
            1,
            ("ipvs-persist", "ipvs-loaded", "rke2-unit"),
            (),
            id="several-failures-listed-in-order",
        ),
    ],
)
def test_json_report(
    tmp_path: Path,
    changes: dict[str, None],
    args: list[str],
    code: int,
    failed: tuple[str, ...],
    warned: tuple[str, ...],
) -> None:
    exit_code, output = invoke(build_host(tmp_path, changes), "--output", "json", *args)
    report = json.loads(output)
    assert exit_code == code
    assert (report["schema"], report["ok"], tuple(report["failed"])) == (SCHEMA, not failed, failed)
    assert [i["name"] for i in report["items"]] == list(ITEMS)
    assert all(set(i) == {"name", "status", "observed", "action"} for i in report["items"])
    assert tuple(i["name"] for i in report["items"] if i["status"] == "WARN") == warned
    assert report["counts"]["FAIL"] == len(failed)
    assert summary(report) == (not failed, failed)


def test_text_report_is_a_table_with_a_result_line(tmp_path: Path) -> None:
    exit_code, output = invoke(build_host(tmp_path, {PERSIST: None}), *CHECKED)
    lines = output.splitlines()
    assert exit_code == 1
    assert lines[0].split() == ["ITEM", "STATUS", "OBSERVED", "/", "ACTION"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:-1] if not line.startswith(" ")}
    assert rows == dict.fromkeys(ITEMS, "PASS") | {"ipvs-persist": "FAIL"}
    assert any(
        line.strip() == "-> echo ip_vs > /etc/modules-load.d/ipvs.conf (or run with --fix)"
        for line in lines
    )
    assert lines[-1].startswith("result: FAIL pass=8 warn=0 fail=1 fixed=0 unknown=0")


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
        pytest.param(["--output", "yaml"], "Invalid value for '--output'", id="bad-output"),
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
    result = CliRunner().invoke(conformance, ["--root", str(build_host(tmp_path))], env=env)
    assert result.exit_code == 1
    assert summary(json.loads(result.output)) == (False, ("dns-upstream",))


def test_every_option_reads_its_documented_environment_variable() -> None:
    # docs/conformance.md: every option but --fix also reads GUARD_CONFORMANCE_<OPTION>.
    assert {p.name: p.envvar for p in conformance.params} == {
        "root": "GUARD_CONFORMANCE_ROOT",
        "fix": None,
        "role": "GUARD_CONFORMANCE_ROLE",
        "control_plane_version": "GUARD_CONFORMANCE_CONTROL_PLANE_VERSION",
        "allowed_dns": "GUARD_CONFORMANCE_ALLOWED_DNS",
        "output": "GUARD_CONFORMANCE_OUTPUT",
        "timeout_s": "GUARD_CONFORMANCE_TIMEOUT_S",
        "nsenter": "GUARD_CONFORMANCE_NSENTER",
    }


def test_the_environment_cannot_turn_on_the_host_write(tmp_path: Path) -> None:
    """A host write is asked for on the command line only, where the admission policy sees it."""
    env = {"GUARD_CONFORMANCE_FIX": "1", "GUARD_CONFORMANCE_OUTPUT": "json"}
    root = build_host(tmp_path, {PERSIST: None})
    result = CliRunner().invoke(conformance, ["--root", str(root), *CHECKED], env=env)
    report = json.loads(result.output)
    assert (report["fix"], summary(report)) == (False, (False, ("ipvs-persist",)))
    assert not (root / PERSIST.lstrip("/")).exists()


def test_the_report_is_found_in_a_job_log(tmp_path: Path) -> None:
    _, output = invoke(build_host(tmp_path, {PERSIST: None}), "--output", "json", *CHECKED)
    log = "W1129 nsenter: noise before\n" + output + "trailing line\n"
    assert summary(parse_report(log)) == (False, ("ipvs-persist",))
