"""The agent's loop and HTTP endpoint on 127.0.0.1, and `gpu-node-guard agent` through click."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from guard.agent.cli import agent
from guard.agent.metrics import run_checks
from guard.agent.server import Agent, MetricsServer, Page, answer
from guard.cli import cli
from guard.conformance.hostfs import HostFS
from guard.example.promserver import free_port
from guard.log import Log
from tests.fixtures.hosts.hosttree import CONFIG, LIBDIR, build_host


@contextmanager
def running(agent_: Agent) -> Iterator[str]:
    port, stop = free_port(), threading.Event()
    thread = threading.Thread(target=agent_.serve, args=("127.0.0.1", port, stop), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/metrics", timeout=1).status_code == 200:
                break
        except requests.ConnectionError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_metrics_health_and_other_paths(tmp_path: Path) -> None:
    fs = HostFS(build_host(tmp_path))
    out = io.StringIO()
    with running(Agent("gpu-worker-1", 60, lambda: run_checks(fs, CONFIG), Log(stream=out))) as url:
        metrics = requests.get(f"{url}/metrics", timeout=5)
        assert metrics.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'gpu_node_guard_agent_check_ok{node="gpu-worker-1",check="nvidia-match"} 1' in (
            metrics.text
        )
        assert requests.get(f"{url}/healthz", timeout=5).text == "ok\n"
        assert requests.get(f"{url}/", timeout=5).status_code == 404
    events = [line.split()[2:5] for line in out.getvalue().splitlines()]
    assert events[0][0] == "start"
    assert events[-1] == ["done", "node=gpu-worker-1"]


def test_status_changes_are_logged_once_each(tmp_path: Path) -> None:
    root = build_host(tmp_path)
    out = io.StringIO()
    agent_ = Agent("n", 60, lambda: run_checks(HostFS(root), CONFIG), Log(stream=out))
    page = Page()
    agent_.run_once(page)
    agent_.run_once(page)  # nothing changed: no new line
    (root / LIBDIR / "libnvidia-ml.so.1").unlink()
    (root / LIBDIR / "libnvidia-ml.so.580.159.03").write_text("")
    (root / LIBDIR / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580.159.03")
    agent_.run_once(page)
    lines = out.getvalue().splitlines()
    assert [line.split()[1:5] for line in lines] == [
        ["INFO", "agent-check", "node=n", "check=nvidia-match"],
        ["INFO", "agent-check", "node=n", "check=ipvs-loaded"],
        ["INFO", "agent-check", "node=n", "check=dns-upstream"],
        ["WARN", "agent-check", "node=n", "check=nvidia-match"],
    ]
    assert "status=FAIL" in lines[-1] and 'check="nvidia-match"} 0' in page.last[0]


@pytest.mark.parametrize(
    ("text", "age_s", "code"),
    [
        pytest.param("", 0, 503, id="before-the-first-run"),
        pytest.param("page\n", 10, 200, id="fresh"),
        pytest.param("page\n", 181, 503, id="three-intervals-old-is-stale"),
    ],
)
def test_healthz_follows_the_age_of_the_last_run(text: str, age_s: float, code: int) -> None:
    page = Page((text, 1000.0))
    server = MetricsServer(page, 60, lambda: 1000.0 + age_s)
    server.start("127.0.0.1", 0)
    try:
        got = requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        assert got.status_code == code
    finally:
        server.stop()


def test_once_prints_one_page(tmp_path: Path) -> None:
    root = build_host(tmp_path)
    result = CliRunner().invoke(
        cli, ["agent", "--root", str(root), "--node", "gpu-worker-1", "--once"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# HELP gpu_node_guard_agent_check_ok ")
    assert 'check="ipvs-loaded"} 1' in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--listen", "9842"], "is not HOST:PORT", id="port-without-host"),
        pytest.param(["--listen", "0.0.0.0:99999"], "is not HOST:PORT", id="port-out-of-range"),
        pytest.param(["--interval-s", "0"], "Invalid value for '--interval-s'", id="zero"),
        pytest.param(["--interval-s", "nan"], "not a finite number", id="nan"),
        pytest.param(["--interval-s", "inf"], "not a finite number", id="never"),
        pytest.param(["--allowed-dns", "10.0.0.0/33"], "not a CIDR", id="bad-cidr"),
        pytest.param(
            ["--kube-proxy-mode", "ipv"], "Invalid value for '--kube-proxy-mode'", id="mode"
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_error_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(agent, ["--root", str(tmp_path), "--node", "n", "--once", *args])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2
    assert len(errors) == 1 and message in errors[0], result.output


def test_a_taken_listen_port_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--root", str(tmp_path), "--node", "n", "--listen", f"127.0.0.1:{port}"]
        result = CliRunner().invoke(agent, args)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2, result.output
    assert errors == [
        f"Error: Invalid value for '--listen': cannot listen on 127.0.0.1:{port}:"
        " Address already in use"
    ]


def test_the_node_comes_from_the_environment(tmp_path: Path) -> None:
    env = {"GUARD_AGENT_NODE": "from-downward-api", "GUARD_AGENT_ROOT": str(build_host(tmp_path))}
    result = CliRunner().invoke(agent, ["--once"], env=env)
    assert result.exit_code == 0, result.output
    assert 'node="from-downward-api"' in result.output
    missing = CliRunner().invoke(agent, ["--root", str(tmp_path), "--once"])
    assert missing.exit_code == 2 and "Missing option '--node'" in missing.output


def test_a_query_string_does_not_change_the_path_and_only_get_or_head_is_served() -> None:
    page = Page(("up 1\n", 100.0))
    assert answer(page, 60, lambda: 110.0, "GET", "/healthz?x") == (200, "text/plain", "ok\n")
    assert answer(page, 60, lambda: 110.0, "POST", "/metrics")[0] == 405
