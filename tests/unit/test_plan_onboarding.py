"""The onboarding gate as a table (conformance, burn-in, then exactly the gate taint removed; on
a failure the taint stays with the failed items), and the PCIe links the cordon's evidence Job
recorded reaching the load test as --expect-link."""

from __future__ import annotations

from dataclasses import replace

import pytest

from guard.actions import Annotate, CreateJob, EmitEvent, RemoveTaint, Skip
from guard.model import Finding, JobInfo, JobResult, RecordedLink, Snapshot, Taint
from guard.plan.checks import plan_checks
from guard.plan.returning import plan_return
from tests.builders import (
    CORDON_AT,
    KEYS,
    TEMPLATES,
    brief,
    gpu,
    kubelet_rejected,
    node,
    owned,
    settings,
    snapshot,
)

NOW_S = "2026-09-21T05:55:00Z"
GATE = {"key": "gpu-node-guard.io/onboarding", "value": "pending", "effect": "NoSchedule"}
OTHER = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}  # a site's own taint, kept
NOT_READY = {
    "key": "node.kubernetes.io/not-ready",
    "effect": "NoExecute",
    "timeAdded": "2026-09-21T05:40:00Z",
}


def gated(taints: list[dict[str, str]] | None = None, **kw: object) -> object:
    return node("n", patch={"spec": {"taints": taints or [OTHER, GATE]}}, **kw)  # type: ignore[arg-type]


def checks(snap: Snapshot, **changes: object) -> tuple:
    return plan_checks(snap, settings(**changes), TEMPLATES)[0]


def created(snap: Snapshot, kind: str) -> CreateJob:
    (job,) = [a for a in checks(snap) if isinstance(a, CreateJob) and a.job_kind == kind]
    return job


def done(name: str, kind: str, status: str, result: JobResult | None = None) -> JobInfo:
    return JobInfo(name, kind, "n", status, result=result)  # type: ignore[arg-type]


PASSED = JobResult("read", passed=True)
CF = created(snapshot(gated()), "conformance").name
LT = created(snapshot(gated(), jobs=(done(CF, "conformance", "succeeded", PASSED),)), "loadtest")
BOTH = (
    done(CF, "conformance", "succeeded", PASSED),
    done(LT.name, "loadtest", "succeeded", PASSED),
)
DNS = JobResult("read", failed=(Finding("dns-upstream", "8.8.8.8 is outside 10.0.0.0/8"),))
SLOW = JobResult("read", failed=(Finding("slow", "slow gpu=3 ratio=0.6"),))


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(gated()), [("create-job", "n", "onboarding")], id="gated-node-gets-conformance"
        ),
        pytest.param(
            snapshot(gated(ready=False)),
            [("skip", "n", "onboarding-waiting")],
            id="not-ready-waits",
        ),
        pytest.param(
            snapshot(gated(gpus=0)),
            [("skip", "n", "onboarding-waiting")],
            id="no-gpus-advertised-yet-waits",
        ),
        pytest.param(
            snapshot(gated(), hardware=(gpu("n", 79),)),
            [("skip", "n", "onboarding-waiting")],
            id="hardware-xid-waits",
        ),
        pytest.param(
            snapshot(gated(), jobs=(done(CF, "conformance", "running"),)),
            [("skip", "n", "onboarding-running")],
            id="conformance-running",
        ),
        pytest.param(
            snapshot(gated(), jobs=(done(CF, "conformance", "succeeded", PASSED),)),
            [("create-job", "n", "onboarding")],
            id="conformance-passed-burn-in-next",
        ),
        pytest.param(
            snapshot(
                gated(),
                jobs=(
                    done(CF, "conformance", "succeeded", PASSED),
                    done(LT.name, "loadtest", "running"),
                ),
            ),
            [("skip", "n", "onboarding-running")],
            id="burn-in-running",
        ),
        pytest.param(
            snapshot(gated(), jobs=BOTH),
            [("remove-taint", "n", "onboarding-passed"), ("event", "n", "onboarded")],
            id="gate-pass-removes-the-taint",
        ),
        pytest.param(
            snapshot(gated(), jobs=(done(CF, "conformance", "failed", DNS),)),
            [("annotate", "n", "onboarding-failed"), ("event", "n", "onboarding-failed")],
            id="conformance-fail-keeps-the-taint",
        ),
        pytest.param(
            snapshot(
                gated(),
                jobs=(
                    done(CF, "conformance", "succeeded", PASSED),
                    done(LT.name, "loadtest", "failed", SLOW),
                ),
            ),
            [("annotate", "n", "onboarding-failed"), ("event", "n", "onboarding-failed")],
            id="burn-in-fail-keeps-the-taint",
        ),
        pytest.param(
            snapshot(
                gated(extra={KEYS.onboarding_failed: f"{NOW_S} job/{CF} dns-upstream"}),
                jobs=(done(CF, "conformance", "failed", DNS),),
            ),
            [("skip", "n", "onboarding-failed")],
            id="recorded-failure-says-so-once",
        ),
        pytest.param(
            snapshot(
                gated(), jobs=(done(CF, "conformance", "succeeded", JobResult("unreadable", "x")),)
            ),
            [("skip", "n", "onboarding-unreadable")],
            id="passed-job-unreadable-waits",
        ),
        pytest.param(
            snapshot(gated(cordoned=True, guarded_xid=79)),
            [("skip", "n", "onboarding-waiting")],
            id="under-the-guards-cordon",
        ),
        pytest.param(
            snapshot(gated([{**GATE, "value": "done"}])),
            [("create-job", "n", "never-checked")],
            id="another-value-is-not-the-gate-the-boot-check-takes-it",
        ),
    ],
)
def test_onboarding_gate(snap: Snapshot, expected: list[tuple[str, str, str]]) -> None:
    assert brief(checks(snap)) == expected


def test_the_burn_in_is_longer_than_the_return_test_and_tolerates_the_gate() -> None:
    command = LT.manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--duration-s") + 1] == "900"
    assert "--expect-link" not in command and "--xid" not in command
    tolerations = LT.manifest["spec"]["template"]["spec"]["tolerations"]
    assert {**GATE, "operator": "Equal"} in tolerations


def test_the_gate_removes_exactly_its_taint_and_records_the_boot() -> None:
    snap = snapshot(
        gated(
            [OTHER, GATE, NOT_READY],
            extra={KEYS.onboarding_failed: f"{NOW_S} job/gng-cf-n-0 unknown"},
        ),
        jobs=BOTH,
    )
    remove, event = checks(snap)
    assert remove == RemoveTaint(
        "n",
        "onboarding-passed",
        "100",
        Taint(**GATE),
        (
            Taint(OTHER["key"], "", "NoSchedule"),
            Taint(NOT_READY["key"], "", "NoExecute", "2026-09-21T05:40:00Z"),
        ),
        "boot-1",
        ((KEYS.checked_boot, f"boot-1 {NOW_S} job/{CF}"),),
        (KEYS.onboarding_failed,),
    )
    assert isinstance(event, EmitEvent) and event.event_type == "Normal"
    assert "DNS upstreams not checked" in event.message


def test_a_failed_gate_names_its_items_on_the_node() -> None:
    snap = snapshot(gated(), jobs=(done(CF, "conformance", "failed", DNS),))
    annotate, event = checks(snap)
    assert isinstance(annotate, Annotate)
    assert annotate.annotations == ((KEYS.onboarding_failed, f"{NOW_S} job/{CF} dns-upstream"),)
    assert event.message == (
        f"gpu-node-guard keeps the onboarding taint: conformance job/{CF} failed: dns-upstream "
        "(8.8.8.8 is outside 10.0.0.0/8) (boot boot-1)"
    )


def test_a_failed_job_without_a_result_fails_the_gate_as_unknown() -> None:
    snap = snapshot(gated(), jobs=(done(CF, "conformance", "failed", None),))
    annotate = checks(snap)[0]
    assert annotate.annotations == ((KEYS.onboarding_failed, f"{NOW_S} job/{CF} unknown"),)


def test_a_new_boot_runs_the_gate_again() -> None:
    failed = {KEYS.onboarding_failed: f"{NOW_S} job/{CF} dns-upstream"}
    earlier = (done(CF, "conformance", "failed", DNS),)
    snap = snapshot(gated(boot="boot-2", extra=failed), jobs=earlier)
    assert brief(checks(snap)) == [("create-job", "n", "onboarding")]


def test_no_gate_configured_means_no_gate() -> None:
    assert brief(checks(snapshot(gated()), onboarding_taint="")) == [
        ("create-job", "n", "never-checked")
    ]


# ── PCIe links: recorded from the evidence Job, passed to the load test ─────────────────────

LINKS = (RecordedLink("0000:18:00.0", "16GT/s,x16"), RecordedLink("0000:2a:00.0", "32GT/s,x16"))


# The evidence Job the cordon of node b made (gng-ev-<node>-<digest of the cordon time>), written
# out: the planner's own name function would agree with any change to itself.
EVIDENCE_B = "gng-ev-b-142b6f18"


def rebooted(**extra: str) -> object:
    return node(
        "b", cordoned=True, guarded_xid=79, boot="boot-2", cordon_boot="boot-1", extra=extra
    )


def evidence(status: str = "succeeded", links: tuple[RecordedLink, ...] = LINKS) -> JobInfo:
    name = EVIDENCE_B
    result = None if status == "running" else JobResult("read", links=links)
    return JobInfo(name, "evidence", "b", status, result=result)  # type: ignore[arg-type]


def expect_links(actions: tuple) -> list[str]:
    (job,) = [a for a in actions if isinstance(a, CreateJob) and a.job_kind == "loadtest"]
    command = job.manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    return [command[i + 1] for i, word in enumerate(command) if word == "--expect-link"]


def test_links_in_the_evidence_result_are_recorded_and_reach_the_load_test() -> None:
    actions = plan_return(snapshot(rebooted(), jobs=(evidence(),)), settings(), TEMPLATES)
    assert brief(actions) == [
        ("annotate", "b", "pcie-links"),
        ("create-job", "b", "conditions-met"),
    ]
    assert actions[0].annotations == (
        (KEYS.pcie_links, "0000:18:00.0=16GT/s,x16 0000:2a:00.0=32GT/s,x16"),
    )
    assert expect_links(actions) == ["0000:18:00.0=16GT/s,x16", "0000:2a:00.0=32GT/s,x16"]


def test_recorded_links_reach_the_load_test_after_the_evidence_job_expired() -> None:
    snap = snapshot(rebooted(**{KEYS.pcie_links: "0000:18:00.0=8GT/s,x16"}))
    actions = plan_return(snap, settings(), TEMPLATES)
    assert expect_links(actions) == ["0000:18:00.0=8GT/s,x16"]


def test_the_load_test_waits_for_the_evidence_job_until_its_deadline_passed() -> None:
    snap = snapshot(rebooted(), jobs=(evidence("running"),))  # cordoned 55 minutes ago
    waits = plan_return(snap, settings(evidence_deadline_s=3000), TEMPLATES)
    assert brief(waits) == [("skip", "b", "evidence-running")]
    late = plan_return(snap, settings(evidence_deadline_s=600), TEMPLATES)
    assert brief(late) == [("create-job", "b", "conditions-met")]


def test_links_of_an_evidence_job_the_guard_did_not_make_are_never_taken() -> None:
    """A replaced evidence Job could record links of another node: a load test would then pass
    a link that trained down. Only the recorded evidence Job's links count."""
    foreign = replace(evidence(), uid="0b9c6d1e-0000-4000-8000-00000000dead")
    actions = plan_return(snapshot(rebooted(), jobs=(foreign,), own=False), settings(), TEMPLATES)
    assert brief(actions) == [("create-job", "b", "conditions-met")]
    assert expect_links(actions) == []


def test_no_links_no_expect_link() -> None:
    actions = plan_return(snapshot(rebooted(), jobs=(evidence(links=()),)), settings(), TEMPLATES)
    assert brief(actions) == [("create-job", "b", "conditions-met")]
    assert expect_links(actions) == []


def test_an_unreadable_links_annotation_leaves_the_node_alone() -> None:
    snap = snapshot(rebooted(**{KEYS.pcie_links: "0000:18:00.0=16GT/s"}))
    assert snap.nodes[0].unreadable and snap.nodes[0].unreadable[0].where == KEYS.pcie_links
    assert plan_return(snap, settings(), TEMPLATES) == ()


def test_the_cordon_time_keys_the_evidence_job() -> None:
    assert rebooted().cordon.at.strftime("%Y-%m-%dT%H:%M:%SZ") == CORDON_AT
    assert isinstance(plan_return(snapshot(rebooted()), settings(), TEMPLATES)[0], CreateJob)
    assert not isinstance(plan_return(snapshot(rebooted()), settings(), TEMPLATES)[0], Skip)


# ---- Results are trusted by identity (docs/security.md, "Job results") --------------------

OTHER_UID = "0b9c6d1e-0000-4000-8000-00000000dead"
GARBAGE = JobResult("unreadable", "pod x: not a load-test summary (kind None, verdict None)")
FOREIGN = [("skip", "n", "onboarding-foreign"), ("event", "n", "onboarding-foreign")]
ADOPTED = JobResult("unreadable", "pod x ran on node a, not on node n", passed=True, foreign=True)


@pytest.mark.parametrize(
    ("jobs", "own", "expected"),
    [
        pytest.param(
            (replace(done(CF, "conformance", "succeeded", PASSED), uid=OTHER_UID),),
            False,
            FOREIGN,
            id="conformance-job-not-the-guards",
        ),
        pytest.param(
            (BOTH[0], replace(BOTH[1], uid=OTHER_UID)),
            False,
            FOREIGN,
            id="burn-in-job-not-the-guards",
        ),
        pytest.param(
            (BOTH[0], done(LT.name, "loadtest", "succeeded", SLOW)),
            True,
            [("skip", "n", "onboarding-unreadable")],
            id="burn-in-succeeded-verdict-fail",
        ),
        pytest.param(
            (BOTH[0], done(LT.name, "loadtest", "succeeded", GARBAGE)),
            True,
            [("skip", "n", "onboarding-unreadable")],
            id="burn-in-succeeded-garbage",
        ),
        pytest.param(
            (BOTH[0], done(LT.name, "loadtest", "failed", kubelet_rejected(LT.name, "loadtest"))),
            True,
            [("skip", "n", "job-rejected"), ("event", "n", "job-rejected")],
            id="burn-in-pod-rejected-by-the-node-is-no-failure",
        ),
        pytest.param(
            (BOTH[0], done(LT.name, "loadtest", "succeeded")),
            True,
            [("skip", "n", "onboarding-unreadable")],
            id="burn-in-succeeded-no-pod",
        ),
        pytest.param(
            (done(CF, "conformance", "succeeded"),),
            True,
            [("skip", "n", "onboarding-unreadable")],
            id="conformance-succeeded-no-pod",
        ),
        pytest.param(
            (done(CF, "conformance", "succeeded", ADOPTED),),
            True,
            FOREIGN,
            id="conformance-pass-of-a-pod-from-another-node",
        ),
        pytest.param(
            (BOTH[0], done(LT.name, "loadtest", "succeeded", ADOPTED)),
            True,
            FOREIGN,
            id="burn-in-pass-of-a-pod-from-another-node",
        ),
    ],
)
def test_the_gate_opens_only_on_the_guards_own_jobs_and_their_pods_pass(jobs, own, expected):
    snap = snapshot(gated(), jobs=jobs, own=own)
    if not own:  # the guard made both Jobs (its records); the test replaced one of them
        mine, nodes = owned(tuple(replace(j, uid="") for j in jobs), snap.nodes)
        kept = tuple(
            m if not j.uid else replace(m, uid=j.uid) for j, m in zip(jobs, mine, strict=True)
        )
        snap = replace(snap, nodes=nodes, jobs=kept)
    actions = checks(snap)
    assert brief(actions) == expected
    assert not [a for a in actions if isinstance(a, RemoveTaint)]
    if own is False:
        assert actions[0].level == "WARN" and OTHER_UID in actions[0].detail
