"""Return planner: every condition and transition, in order, as a table."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import Annotate, CreateJob, SetHold, Skip, Uncordon, event_name, to_json
from guard.jobs import job_name
from guard.model import GpuPod, GuardEvent, JobInfo
from guard.plan.returning import plan_return
from tests.builders import CORDON_AT, KEYS, NOW, PCI, TEMPLATES, UUID, gpu, node, settings, snapshot


def brief(actions):
    return [(to_json(a)["type"], a.node, a.reason) for a in actions]


def back(**kw):
    """A guard-cordoned node that rebooted and looks healthy."""
    defaults = dict(cordoned=True, guarded_xid=79, boot="boot-2", cordon_boot="boot-1")
    return node("b", **{**defaults, **kw})


def lt_name(boot="boot-2", reset=""):
    return job_name("loadtest", "b", f"{boot}\0{reset}")


LEDGER_ONE = {"b": f"{CORDON_AT} xid-79 {PCI} {UUID} gpu-node-guard\n"}


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(node("b", guarded_xid=79)),
            [("clear-annotations", "b", "human-uncordon"), ("event", "b", "human-uncordon")],
            id="human-uncordon-cancels",
        ),
        pytest.param(
            snapshot(back(hold="waiting for vendor")), [("skip", "b", "hold")], id="hold-stops"
        ),
        pytest.param(
            snapshot(back(boot="boot-1")),
            [("skip", "b", "same-boot")],
            id="same-boot-waits-for-power-cycle",
        ),
        pytest.param(
            snapshot(back(guarded_xid=48, boot="boot-1")),
            [("skip", "b", "waiting-reset")],
            id="reset-class-needs-reset-done",
        ),
        pytest.param(
            snapshot(back(guarded_xid=48, boot="boot-1", reset_done="2026-09-22")),
            [("create-job", "b", "conditions-met")],
            id="reset-class-with-reset-done",
        ),
        pytest.param(snapshot(back(ready=False)), [("skip", "b", "not-ready")], id="not-ready"),
        pytest.param(
            snapshot(back(gpus=7, capacity_at_cordon=8)),
            [("skip", "b", "gpu-count")],
            id="card-gone-for-good-7-of-7",
        ),
        pytest.param(
            snapshot(back(allocatable=7)), [("skip", "b", "gpu-count")], id="allocatable-short"
        ),
        pytest.param(
            snapshot(back(), hardware=(gpu("b", 79),)),
            [("skip", "b", "xid-present")],
            id="hardware-xid-still-there",
        ),
        pytest.param(
            snapshot(back(), remap=(gpu("b", 1),)),
            [("skip", "b", "row-remap")],
            id="row-remap-pending",
        ),
        pytest.param(
            snapshot(back(), pods=(GpuPod("research", "train-0", "b", 1),)),
            [("skip", "b", "gpu-pods-running")],
            id="gpu-pod-running",
        ),
        pytest.param(
            snapshot(back(), ledger={"b": LEDGER_ONE["b"] * 2}),
            [("set-hold", "b", "repeat-fault"), ("event", "b", "repeat-fault")],
            id="repeat-fault-holds",
        ),
        pytest.param(
            snapshot(back(), ledger=LEDGER_ONE),
            [("create-job", "b", "conditions-met")],
            id="first-fault-load-test",
        ),
        pytest.param(
            snapshot(back(), jobs=(JobInfo(lt_name(), "loadtest", "b", "running"),)),
            [("skip", "b", "loadtest-running")],
            id="load-test-running-waits",
        ),
        pytest.param(
            snapshot(back(), jobs=(JobInfo(lt_name(), "loadtest", "b", "succeeded"),)),
            [("uncordon", "b", "loadtest-passed"), ("event", "b", "returned")],
            id="load-test-passed-uncordons",
        ),
        pytest.param(
            snapshot(back(), jobs=(JobInfo(lt_name(), "loadtest", "b", "failed"),)),
            [("annotate", "b", "loadtest-failed"), ("event", "b", "loadtest-failed")],
            id="load-test-failed-recorded",
        ),
        pytest.param(
            snapshot(
                back(extra={KEYS.loadtest_result: f"failed job/{lt_name()} at x"}),
                jobs=(JobInfo(lt_name(), "loadtest", "b", "failed"),),
            ),
            [("skip", "b", "loadtest-failed")],
            id="second-cycle-after-failure-creates-nothing",
        ),
        pytest.param(
            snapshot(back(extra={KEYS.loadtest_result: f"failed job/{lt_name()} at x"})),
            [("skip", "b", "loadtest-failed")],
            id="expired-failed-job-not-recreated",
        ),
        pytest.param(
            snapshot(back(boot="boot-3", extra={KEYS.loadtest_result: f"failed job/{lt_name()}"})),
            [("create-job", "b", "conditions-met")],
            id="new-boot-after-failure-tests-again",
        ),
        pytest.param(snapshot(node("x", cordoned=True)), [], id="human-cordon-untouched"),
    ],
)
def test_return_plan(snap, expected):
    assert brief(plan_return(snap, settings(), TEMPLATES)) == expected


def test_uncordon_clears_only_guard_keys_present():
    snap = snapshot(
        back(reset_done=None, extra={"ops/owner": "x"}),
        jobs=(JobInfo(lt_name(), "loadtest", "b", "succeeded"),),
    )
    uncordon = plan_return(snap, settings(), TEMPLATES)[0]
    assert isinstance(uncordon, Uncordon)
    assert set(uncordon.clear_keys) == {
        KEYS.reason,
        KEYS.at,
        KEYS.boot_id,
        KEYS.gpu_capacity,
        KEYS.gpu,
    }
    assert uncordon.resource_version == "100"


def test_load_test_job_requests_every_gpu_and_memory_test_for_memory_xid():
    snap = snapshot(back(guarded_xid=48, boot="boot-1", reset_done="done"))
    (job,) = plan_return(snap, settings(), TEMPLATES)
    assert isinstance(job, CreateJob) and job.job_kind == "loadtest"
    pod = job.manifest["spec"]["template"]["spec"]
    assert pod["nodeName"] == "b"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    command = pod["containers"][0]["command"]
    assert command[:7] == [
        "gpu-node-guard",
        "loadtest",
        "run",
        "--backend",
        "torch",
        "--expected-gpus",
        "8",
    ]
    assert command[command.index("--xid") + 1] == "48"
    assert command[command.index("--memory-test-pci") + 1] == PCI
    assert job.name == lt_name(boot="boot-1", reset="done")


def test_repeat_fault_hold_text_names_card_count_and_last():
    snap = snapshot(
        back(), ledger={"b": LEDGER_ONE["b"] + LEDGER_ONE["b"].replace("09-21", "09-10")}
    )
    hold = plan_return(snap, settings(), TEMPLATES)[0]
    assert isinstance(hold, SetHold)
    assert hold.text == f"repeat fault: {UUID} 2 incidents, last {CORDON_AT}"
    assert hold.key == KEYS.hold


def test_repeat_fault_limit_is_a_setting():
    snap = snapshot(back(), ledger={"b": LEDGER_ONE["b"] * 2})
    assert brief(plan_return(snap, settings(repeat_fault_limit=3), TEMPLATES)) == [
        ("create-job", "b", "conditions-met")
    ]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(None, [("create-job", "b", "conditions-met")], id="conformance-first"),
        pytest.param("running", [("skip", "b", "conformance-running")], id="conformance-running"),
        pytest.param(
            "failed",
            [("annotate", "b", "conformance-failed"), ("event", "b", "conformance-failed")],
            id="conformance-fail-holds",
        ),
        pytest.param(
            "succeeded",
            [("create-job", "b", "conditions-met")],
            id="conformance-pass-then-load-test",
        ),
    ],
)
def test_return_path_conformance(status, expected):
    name = job_name("conformance", "b", "boot-2\0")
    jobs = () if status is None else (JobInfo(name, "conformance", "b", status),)
    actions = plan_return(snapshot(back(), jobs=jobs), settings(return_conformance=True), TEMPLATES)
    assert brief(actions) == expected
    if status is None:
        assert actions[0].job_kind == "conformance"
    if status == "succeeded":
        assert actions[0].job_kind == "loadtest"


def test_failure_annotation_names_the_job():
    snap = snapshot(back(), jobs=(JobInfo(lt_name(), "loadtest", "b", "failed"),))
    annotate = plan_return(snap, settings(), TEMPLATES)[0]
    assert isinstance(annotate, Annotate)
    assert dict(annotate.annotations)[KEYS.loadtest_result].startswith(f"failed job/{lt_name()}")


def test_every_failed_condition_is_one_skip_line_with_observed_value():
    skip = plan_return(snapshot(back(allocatable=7)), settings(), TEMPLATES)[0]
    assert isinstance(skip, Skip)
    assert str(skip) == (
        'skip node=b reason=gpu-count detail="capacity=8 recorded=8 '
        'allocatable=7" next="checked again next cycle"'
    )


def test_missing_ledger_line_of_a_cordon_is_repaired_first():
    actions = plan_return(
        snapshot(back(boot="boot-1"), ledger={"b": "a note\n"}), settings(), TEMPLATES
    )
    assert brief(actions) == [("append-ledger", "b", "repair-ledger"), ("skip", "b", "same-boot")]
    assert actions[0].line == f"{CORDON_AT} xid-79 {PCI} {UUID} gpu-node-guard"


@pytest.mark.parametrize(
    ("minutes_ago", "job_exists", "repaired"),
    [
        pytest.param(5, False, True, id="fresh-cordon-without-job-gets-it"),
        pytest.param(5, True, False, id="fresh-cordon-with-job-untouched"),
        pytest.param(30, False, False, id="old-cordon-job-not-resurrected"),
    ],
)
def test_evidence_job_repair_window(minutes_ago, job_exists, repaired):
    at = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    n = back(boot="boot-1", extra={KEYS.at: at})
    name = job_name("evidence", "b", at)
    jobs = (JobInfo(name, "evidence", "b", "running"),) if job_exists else ()
    ledger = {"b": f"{at} xid-79 {PCI} {UUID} gpu-node-guard\n"}
    cordon_event = GuardEvent(event_name("b", "GuardCordoned", at), "b", "GuardCordoned", 1)
    snap = replace(snapshot(n, jobs=jobs, ledger=ledger), events=(cordon_event,))
    actions = plan_return(snap, settings(), TEMPLATES)
    expected = [("create-job", "b", "repair-evidence")] if repaired else []
    if not repaired and not job_exists:  # too late to create it: a WARN says so
        expected = [("skip", "b", "evidence-missing")]
    assert brief(actions) == [*expected, ("skip", "b", "same-boot")]
    if repaired:
        assert actions[0].name == name
