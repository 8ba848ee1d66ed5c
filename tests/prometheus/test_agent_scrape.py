"""A real Prometheus scrapes a real agent process on 127.0.0.1: the page is ingested as written, and
a driver upgraded on disk without a reboot turns nvidia-match to 0 at the next run."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from guard.codec import queries
from guard.example.promserver import free_port, stop
from tests.engines import binaries
from tests.fixtures.hosts.hosttree import ALLOWED_DNS, DRIVER, LIBDIR, build_host
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus
NODE = "gpu-worker-1"
NEW_DRIVER = "580.159.03"
JOB = "gpu-node-guard-agent"


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def scraped_agent(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(Prometheus URL, host root): an agent every second, scraped every second."""
    require_engine("prometheus2")
    prometheus = binaries("prometheus2").server
    root = build_host(tmp_path / "host")
    agent_port, prom_port = free_port(), free_port()
    agent_log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "guard",
            "agent",
            "--root",
            str(root),
            "--node",
            NODE,
            "--listen",
            f"127.0.0.1:{agent_port}",
            "--interval-s",
            "1",
            "--allowed-dns",
            ALLOWED_DNS,
        ],
        stdout=agent_log,
        stderr=subprocess.STDOUT,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: {JOB}\n    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{agent_port}']}}]\n",
        encoding="utf-8",
    )
    prom_log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=prom_log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{prom_port}", root
    finally:
        for process in (server, agent):
            stop(process)
        agent_log.close()
        prom_log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    try:
        answer = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    except requests.ConnectionError:
        return []
    if answer.status_code != 200:
        return []
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def values(url: str, promql: str) -> dict[str, str]:
    return {r["metric"].get("check", ""): r["value"][1] for r in query(url, promql)}


def test_prometheus_ingests_the_page_and_sees_a_mismatch(scraped_agent: tuple[str, Path]) -> None:
    url, root = scraped_agent
    up = wait_for("the agent to be scraped", lambda: query(url, f'up{{job="{JOB}"}} == 1'))
    assert up[0]["metric"]["instance"].startswith("127.0.0.1:")
    ok = f'gpu_node_guard_agent_check_ok{{node="{NODE}"}}'
    assert wait_for("three checks", lambda: len(values(url, ok)) == 3 and values(url, ok)) == {
        "nvidia-match": "1",
        "ipvs-loaded": "1",
        "dns-upstream": "1",
    }
    info = query(url, "gpu_node_guard_agent_nvidia_info")
    assert (info[0]["metric"]["module_version"], info[0]["metric"]["nvml_version"]) == (
        DRIVER,
        DRIVER,
    )
    assert query(url, "time() - gpu_node_guard_agent_last_run_timestamp_seconds < 10")

    # unattended-upgrades installs the new library; the loaded module stays the old one.
    lib = root / LIBDIR
    (lib / f"libnvidia-ml.so.{NEW_DRIVER}").write_text("")
    (lib / "libnvidia-ml.so.1").unlink()
    (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{NEW_DRIVER}")

    mismatch = f'gpu_node_guard_agent_check_ok{{node="{NODE}", check="nvidia-match"}} == 0'
    wait_for("nvidia-match to fail", lambda: query(url, mismatch))
    failed = query(url, 'gpu_node_guard_agent_check_status{check="nvidia-match"} == 1')
    assert [r["metric"]["status"] for r in failed] == ["FAIL"]
    detail = query(url, 'gpu_node_guard_agent_check_info{check="nvidia-match"}')[0]["metric"]
    assert detail["detail"].startswith(f"module {DRIVER} != NVML {NEW_DRIVER}")
    # The guard's own queries on the real page (docs/node-signals.md): the failure its hold
    # history steps over, and the status and detail its cordon and return check read.
    failing = wait_for("the guard to see it", lambda: query(url, queries.nvml_mismatch()))
    assert [(r["metric"], r["value"][1]) for r in failing] == [({"node": NODE}, "1")]
    (status,) = query(url, queries.nvml_status())
    assert status["metric"] == {"node": NODE, "status": "FAIL", "detail": detail["detail"]}
    assert values(url, ok)["ipvs-loaded"] == "1"
