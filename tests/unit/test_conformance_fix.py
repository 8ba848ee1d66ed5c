"""--fix repairs ip_vs only, never overwrites a file, and says FAIL or UNKNOWN when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.conformance.ipvs import plan_fixes
from guard.conformance.model import ItemResult, Status
from tests.fixtures.hosts.hosttree import (
    HEALTHY,
    LIBDIR,
    Answer,
    FakeRunner,
    Link,
    Tree,
    check_host,
    exited,
    ok,
    timed_out,
)

PERSIST = "etc/modules-load.d/ipvs.conf"
NOT_LOADED = {"proc/modules": "nvidia 56807424 0 - Live 0x0\n"}
MODPROBE = ("modprobe", "ip_vs")


def res(name: str, status: Status) -> ItemResult:
    return ItemResult(name, status, "")


@pytest.mark.parametrize(
    ("results", "actions"),
    [
        pytest.param(
            (
                ItemResult("ipvs-loaded", Status.FAIL, ""),
                ItemResult("ipvs-persist", Status.FAIL, ""),
            ),
            ("ipvs-loaded", "ipvs-persist"),
            id="both-ip-vs-items-failed",
        ),
        pytest.param(
            (
                ItemResult("ipvs-loaded", Status.UNKNOWN, ""),
                ItemResult("ipvs-persist", Status.PASS, ""),
            ),
            (),
            id="unknown-is-not-repaired",
        ),
        pytest.param(
            (res("nvidia-match", Status.FAIL), res("rke2-unit", Status.FAIL)),
            (),
            id="other-items-are-report-only",
        ),
    ],
)
def test_plan_fixes(results: tuple[ItemResult, ...], actions: tuple[str, ...]) -> None:
    assert plan_fixes(results) == actions


@pytest.mark.parametrize(
    ("changes", "answer", "item", "status", "seen"),
    [
        pytest.param(
            NOT_LOADED,
            exited(1, "modprobe: FATAL: Module ip_vs not found in directory /lib/modules/x"),
            "ipvs-loaded",
            Status.FAIL,
            "Module ip_vs not found",
            id="modprobe-fails",
        ),
        pytest.param(
            NOT_LOADED, ok(), "ipvs-loaded", Status.FAIL, "exited 0 but", id="modprobe-no-effect"
        ),
        pytest.param(NOT_LOADED, timed_out, "ipvs-loaded", Status.UNKNOWN, "timed out", id="hang"),
        pytest.param(
            {PERSIST: "# reserved for kube-proxy\n"},
            None,
            "ipvs-persist",
            Status.FAIL,
            "not overwritten",
            id="existing-file-is-not-overwritten",
        ),
    ],
)
def test_fix_that_does_not_take(
    tmp_path: Path,
    changes: dict[str, str],
    answer: Answer | None,
    item: str,
    status: Status,
    seen: str,
) -> None:
    runner = FakeRunner({MODPROBE: answer} if answer else {})
    result = check_host(tmp_path, changes, runner=runner, fix=True)[item]
    assert result.status is status, result
    assert seen in result.observed, result
    if item == "ipvs-persist":
        assert (tmp_path / PERSIST).read_text() == changes[PERSIST]


def test_fix_on_a_healthy_node_changes_nothing(tmp_path: Path) -> None:
    runner = FakeRunner()
    results = check_host(tmp_path, runner=runner, fix=True)
    assert {r.status for r in results.values()} == {Status.PASS}
    assert runner.calls == []
    assert (tmp_path / PERSIST).read_text() == HEALTHY[PERSIST]


def test_fix_leaves_other_failures_alone(tmp_path: Path) -> None:
    runner = FakeRunner()
    new = "libnvidia-ml.so.580.159.03"
    changes: Tree = {f"{LIBDIR}/libnvidia-ml.so.1": Link(new), f"{LIBDIR}/{new}": ""}
    results = check_host(tmp_path, changes, runner=runner, fix=True)
    assert results["nvidia-match"].status is Status.FAIL
    assert runner.calls == []


def test_persist_file_is_written_inside_the_root_through_absolute_links(tmp_path: Path) -> None:
    # /etc/modules-load.d as an absolute link (as config management sometimes leaves it) must
    # resolve inside the root, never on the machine running the check.
    changes = {
        PERSIST: None,
        "etc/modules-load.d": Link("/srv/modules-load.d"),
        "srv/modules-load.d/other.conf": "br_netfilter\n",
    }
    result = check_host(tmp_path, changes, runner=FakeRunner({MODPROBE: ok()}), fix=True)
    assert result["ipvs-persist"].status is Status.FIXED
    assert "ip_vs" in (tmp_path / "srv/modules-load.d/ipvs.conf").read_text().splitlines()
