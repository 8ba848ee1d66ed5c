"""Bad input to `gpu-node-guard run`: one clear line, non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from guard.cli import cli

BASE = ["run", "--prometheus-url", "http://127.0.0.1:9", "--dry-run"]


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        pytest.param(["--output", "yaml"], {}, 2, "Invalid value for '--output'", id="bad-output"),
        pytest.param(["--at", "yesterday"], {}, 2, "is not RFC 3339", id="at-not-rfc3339"),
        pytest.param(
            ["--at", "2026-09-21T05:55:00"], {}, 2, "is not RFC 3339", id="at-without-zone"
        ),
        pytest.param(
            ["--hold-window-s", "5"],
            {},
            2,
            "hold_window_s must be at least 60",
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


def test_prometheus_url_is_required():
    result = CliRunner().invoke(cli, ["run", "--dry-run"], env={"GUARD_PROMETHEUS_URL": ""})
    assert result.exit_code == 2
    assert "--prometheus-url (or GUARD_PROMETHEUS_URL) is required" in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"\xff\xfe\x00garbage", "cannot read cluster snapshot", id="binary-file"),
        pytest.param(b"items: [unclosed", "is not YAML/JSON", id="broken-yaml"),
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
