"""The agent's /metrics page: exact samples for a driver mismatch, escaping, and promtool's lint."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from guard.agent.metrics import AgentRun, escape, render, run_checks
from guard.conformance.hostfs import HostFS
from guard.conformance.model import ItemResult, Status
from guard.conformance.nvidia import NvidiaFacts
from tests.fixtures.hosts.hosttree import CONFIG, DRIVER, LIBDIR, Link, build_host
from tests.tiers import tool

NEW = "580.159.03"


def mismatch_run() -> AgentRun:
    return AgentRun(
        (
            ItemResult("nvidia-match", Status.FAIL, f"module {DRIVER} != NVML {NEW} ({LIBDIR})"),
            ItemResult("ipvs-loaded", Status.PASS, "ip_vs loaded"),
            ItemResult(
                "dns-upstream", Status.SKIP, "no --allowed-dns given: upstreams not checked"
            ),
        ),
        NvidiaFacts(DRIVER, NEW, f"/{LIBDIR}"),
    )


def samples(page: str) -> list[str]:
    return [line for line in page.splitlines() if not line.startswith("#")]


def test_a_mismatch_reads_as_one_failed_check() -> None:
    page = render("gpu-worker-1", mismatch_run(), 1796114583.5, 120)
    got = samples(page)
    node = 'node="gpu-worker-1"'
    assert [s for s in got if s.startswith("gpu_node_guard_agent_check_ok")] == [
        f'gpu_node_guard_agent_check_ok{{{node},check="nvidia-match"}} 0',
        f'gpu_node_guard_agent_check_ok{{{node},check="ipvs-loaded"}} 1',
    ]  # dns-upstream is SKIP: no ok sample, only its status
    status_one = [
        s for s in got if s.startswith("gpu_node_guard_agent_check_status") and s[-1] == "1"
    ]
    assert status_one == [
        f'gpu_node_guard_agent_check_status{{{node},check="nvidia-match",status="FAIL"}} 1',
        f'gpu_node_guard_agent_check_status{{{node},check="ipvs-loaded",status="PASS"}} 1',
        f'gpu_node_guard_agent_check_status{{{node},check="dns-upstream",status="SKIP"}} 1',
    ]
    assert sum(s.startswith("gpu_node_guard_agent_check_status") for s in got) == 15
    versions = f'module_version="{DRIVER}",nvml_version="{NEW}"'
    assert f"gpu_node_guard_agent_nvidia_info{{{node},{versions}}} 1" in got
    assert f"gpu_node_guard_agent_last_run_timestamp_seconds{{{node}}} 1796114583.500" in got
    assert f"gpu_node_guard_agent_interval_seconds{{{node}}} 120" in got


def test_label_values_are_escaped_and_detail_is_one_bounded_line() -> None:
    run = AgentRun(
        (ItemResult("dns-upstream", Status.FAIL, 'a "quoted"\\ line\nand ' + "x" * 400),),
        NvidiaFacts(None, None),
    )
    info = next(
        s
        for s in samples(render("n", run, 0, 60))
        if s.startswith("gpu_node_guard_agent_check_info")
    )
    detail = info.split('detail="', 1)[1].rsplit('"} 1', 1)[0]
    assert detail.startswith('a \\"quoted\\"\\\\ line and xxx')
    assert detail.endswith("…") and len(detail) < 220
    assert escape("a\nb") == "a\\nb"
    assert not any(
        s.startswith("gpu_node_guard_agent_nvidia_info") for s in samples(render("n", run, 0, 60))
    )


@pytest.mark.prometheus
def test_promtool_accepts_the_page_of_a_real_run(tmp_path: Path) -> None:
    promtool = tool("promtool", "prometheus", "install the Debian package `prometheus`")
    root = build_host(
        tmp_path,
        {
            f"{LIBDIR}/libnvidia-ml.so.{NEW}": "",
            f"{LIBDIR}/libnvidia-ml.so.1": Link(f"libnvidia-ml.so.{NEW}"),
        },
    )
    page = render("gpu-worker-1", run_checks(HostFS(root), CONFIG), 1796114583.0, 120)
    lint = subprocess.run(
        [promtool, "check", "metrics"], input=page, capture_output=True, text=True, check=False
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert 'check="nvidia-match"} 0' in page
