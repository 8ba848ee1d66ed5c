"""On-call hints that lead out: the guard's `next=` and `status`'s next step, followed as written
with the real kubectl v1.34.4 on the apiserver tier, take the node out of its state.

The repeat-fault hold: the guard counts incidents of the card in its cordon record, so removing
`hold` alone brings the same hold back one cycle later (shown here first). The hint says the whole
step: after the swap, remove `hold` and uncordon; the guard then records a person's cancel, clears
its annotations and lets the node go, and the next cycles leave it alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from guard.example.promserver import LocalPrometheus
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    NO_CF,
    RETURN_AT,
    as_site_settings,
    faulted,
    mine,
    run_guard,
    scenario_prometheus,
    set_status,
    site_settings,
)
from tests.apiserver.kube import ControlPlane
from tests.apiserver.kubectl import HINT_COMMANDS, follow_hint

pytestmark = pytest.mark.apiserver

NODE = "hint-repeat"
ONE_INCIDENT_HOLDS = ("--repeat-fault-limit", "1")  # the first incident is already "repeat"


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    with scenario_prometheus(faulted(NODE)) as server:
        yield server


def status_row(kubeconfig: Path, at: str, core: Any) -> dict[str, Any]:
    with site_settings(core, as_site_settings(ONE_INCIDENT_HOLDS)):
        return _status_row(kubeconfig, at)


def _status_row(kubeconfig: Path, at: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "status",
            "-o",
            "json",
            "--kubeconfig",
            str(kubeconfig),
            "--at",
            at,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [r for r in json.loads(done.stdout)["nodes"] if r["node"] == NODE]
    assert len(rows) == 1, done.stdout
    return dict(rows[0])


def skip_line(run: Any) -> dict[str, Any]:
    (line,) = [x for x in run.lines("skip") if x.get("node") == NODE]
    return dict(line)


def test_the_repeat_fault_hint_takes_the_node_out_of_the_hold(
    prom: LocalPrometheus,
    guard_kubeconfig: Path,
    gpu_node: Any,
    core: Any,
    deployed: ControlPlane,
    kubectl_binary: Path,
) -> None:
    def guard(*extra: str) -> Any:
        return run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF, *ONE_INCIDENT_HOLDS, *extra)

    node = gpu_node(NODE, boot="boot-1")
    cordoned = run_guard(prom, guard_kubeconfig, ISOLATE_AT, *ONE_INCIDENT_HOLDS).plan
    assert mine(cordoned, node)[0] == ("cordon", "xid-79")
    set_status(core, node, boot="boot-2", allocatable=8)  # power cycled: healthy, same card
    held = guard()
    assert mine(held.plan, node) == [("set-hold", "repeat-fault"), ("event", "repeat-fault")]
    (set_hold,) = [x for x in held.lines("set-hold") if x.get("node") == node]

    # The hold alone removed: the guard sets it again, as the hint warns.
    subprocess.run(
        [
            str(kubectl_binary),
            "--kubeconfig",
            str(deployed.kubeconfig),
            "annotate",
            "node",
            node,
            f"{KEYS.hold}-",
        ],
        check=True,
        capture_output=True,
    )
    assert mine(guard().plan, node)[0] == ("set-hold", "repeat-fault")

    again = guard()
    hint = skip_line(again)["next"]
    assert skip_line(again)["reason"] == "repeat-fault-hold"
    row = status_row(deployed.kubeconfig, RETURN_AT.isoformat(), core)
    assert row["state"] == "repeat-fault-hold"
    # One step in all three places: the set-hold line, the skip line and status.
    assert (
        HINT_COMMANDS.findall(hint)
        == HINT_COMMANDS.findall(set_hold["next"])
        == HINT_COMMANDS.findall(row["next"])
    )
    assert follow_hint(row["next"], kubectl_binary, deployed.kubeconfig) == (
        f"kubectl annotate node {node} {KEYS.hold}- && kubectl uncordon {node}"
    )

    let_go = guard()
    assert mine(let_go.plan, node) == [
        ("clear-annotations", "human-uncordon"),
        ("event", "human-uncordon"),
    ]
    stored = core.read_node(node)
    notes = stored.metadata.annotations or {}
    assert not stored.spec.unschedulable
    assert KEYS.hold not in notes and KEYS.reason not in notes
    assert notes[KEYS.cancelled].startswith("boot-2 GPU-")
    # Out of the state for good: later cycles neither hold nor cordon it again.
    later = guard().plan
    assert not {a for a, _ in mine(later, node)} & {"set-hold", "cordon"}, mine(later, node)
    final = status_row(deployed.kubeconfig, RETURN_AT.isoformat(), core)
    assert final["state"] != "repeat-fault-hold"
