"""`gpu-node-guard status` rows of the lifecycle checks: from their planners' own decisions."""

from __future__ import annotations

import pytest

from guard.model import Finding, JobInfo, JobResult, Snapshot
from guard.status.derive import report
from guard.status.model import Sight
from tests.builders import KEYS, TEMPLATES, node, settings, snapshot
from tests.unit.test_plan_checks import CF as BOOT_CF
from tests.unit.test_plan_checks import cordoned_for_conformance, serving
from tests.unit.test_plan_onboarding import CF as GATE_CF
from tests.unit.test_plan_onboarding import gated

SEEN = Sight("http://prom.test:9090")
NOW_S = "2026-09-21T05:55:00Z"


def rows(snap: Snapshot) -> list[tuple[str, str, str, str]]:
    found = report(snap, settings(), TEMPLATES, SEEN).nodes
    return [(r.node, r.state, r.reason, r.blocked.condition if r.blocked else "-") for r in found]


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(gated()),
            [("n", "onboarding-pending", "onboarding", "-")],
            id="gated-node-is-pending",
        ),
        pytest.param(
            snapshot(gated(ready=False)),
            [("n", "onboarding-pending", "onboarding", "onboarding-waiting")],
            id="gated-node-waits",
        ),
        pytest.param(
            snapshot(
                gated(extra={KEYS.onboarding_failed: f"{NOW_S} job/{GATE_CF} x"}),
                jobs=(
                    JobInfo(
                        GATE_CF,
                        "conformance",
                        "n",
                        "failed",
                        result=JobResult("read", failed=(Finding("x"),)),
                    ),
                ),
            ),
            [("n", "onboarding-failed", "onboarding", "onboarding-failed")],
            id="gate-failed",
        ),
        pytest.param(
            snapshot(serving(), jobs=(JobInfo(BOOT_CF, "conformance", "b", "running"),)),
            [("b", "after-reboot-check-running", "boot-check", "boot-check-running")],
            id="after-reboot-check-running",
        ),
        pytest.param(
            snapshot(serving(), jobs=(JobInfo(BOOT_CF, "conformance", "b", "failed"),)),
            [("b", "job-result-unreadable", "boot-check", "boot-check-unreadable")],
            id="failed-without-a-result",
        ),
        pytest.param(
            snapshot(cordoned_for_conformance(boot="boot-2"), ledger={}),
            [("b", "cordoned-for-conformance", "conformance-ipvs-loaded", "conformance-same-boot")],
            id="cordoned-for-conformance",
        ),
        pytest.param(snapshot(serving()), [], id="a-boot-check-not-started-yet-has-no-row"),
        pytest.param(snapshot(node("b")), [], id="never-checked-has-no-row"),
        pytest.param(snapshot(serving(cordoned=True)), [], id="a-persons-cordon-has-no-row"),
    ],
)
def test_lifecycle_rows(snap: Snapshot, expected: list[tuple[str, str, str, str]]) -> None:
    assert rows(snap) == expected
