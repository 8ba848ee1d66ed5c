"""The self-tests the conformance script was accepted with: a healthy node passes every item,
deleting the persist file fails, --fix repairs it, a wrong role fails, and a command that hangs
makes its item UNKNOWN while the run goes on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from guard.conformance.checks import ITEMS, run_conformance
from guard.conformance.hostfs import HostFS
from guard.conformance.model import ItemResult, Status
from guard.doors.hostexec import CommandResult, HostRunner
from tests.fixtures.hosts.hosttree import (
    CONFIG,
    PROC_MODULES,
    FakeRunner,
    build_host,
    check_host,
)

PERSIST = "etc/modules-load.d/ipvs.conf"


def statuses(results: dict[str, ItemResult]) -> dict[str, Status]:
    return {name: r.status for name, r in results.items()}


def test_healthy_node_passes_every_item(tmp_path: Path) -> None:
    runner = FakeRunner()
    results = check_host(tmp_path, runner=runner)
    assert statuses(results) == dict.fromkeys(ITEMS, Status.PASS)
    assert runner.calls == []  # every fact came from files; no command ran


def test_deleting_the_persist_file_fails_only_that_item(tmp_path: Path) -> None:
    results = check_host(tmp_path, {PERSIST: None})
    expected = dict.fromkeys(ITEMS, Status.PASS) | {"ipvs-persist": Status.FAIL}
    assert statuses(results) == expected


def test_fix_loads_and_persists_ip_vs(tmp_path: Path) -> None:
    without = "".join(line + "\n" for line in PROC_MODULES.splitlines() if "ip_vs " not in line)
    root = build_host(tmp_path, {PERSIST: None, "proc/modules": without})

    def modprobe(argv: tuple[str, ...]) -> CommandResult:
        # The kernel's side of a successful modprobe.
        (root / "proc/modules").write_text(without + "ip_vs 184320 0 - Live 0x0\n")
        return CommandResult(argv, 0, "", "")

    runner = FakeRunner({("modprobe", "ip_vs"): modprobe})
    fixed = run_conformance(HostFS(root), runner, CONFIG, fix=True).results

    assert {r.name: r.status for r in fixed if r.status is not Status.PASS} == {
        "ipvs-persist": Status.FIXED,
        "ipvs-loaded": Status.FIXED,
    }
    assert runner.calls == [("modprobe", "ip_vs")]
    lines = (root / PERSIST).read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == ["ip_vs"]
    again = run_conformance(HostFS(root), FakeRunner(), CONFIG).results
    assert {r.status for r in again} == {Status.PASS}


def test_wrong_role_fails_the_unit_item(tmp_path: Path) -> None:
    results = check_host(tmp_path, config=replace(CONFIG, role="server"))
    expected = dict.fromkeys(ITEMS, Status.PASS) | {"rke2-unit": Status.FAIL}
    assert statuses(results) == expected


def test_hanging_command_is_unknown_and_the_run_goes_on(tmp_path: Path) -> None:
    # Without osrelease and the rke2 bin link the kernel and RKE2 versions come from commands;
    # the prefix turns every command into a real `sleep` that outlives the timeout.
    root = build_host(
        tmp_path, {"proc/sys/kernel/osrelease": None, "var/lib/rancher/rke2/bin": None}
    )
    hanging = HostRunner(timeout_s=0.2, prefix=("sh", "-c", "exec sleep 30", "sh"))

    results = {r.name: r for r in run_conformance(HostFS(root), hanging, CONFIG).results}

    assert statuses(results) == dict.fromkeys(ITEMS, Status.PASS) | {
        "ipvs-resolvable": Status.UNKNOWN,
        "rke2-version": Status.UNKNOWN,
    }
    assert results["ipvs-resolvable"].observed == "uname -r: timed out after 0.2s"
    assert results["rke2-version"].observed == "rke2 --version: timed out after 0.2s"
