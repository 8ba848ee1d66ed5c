"""Return planner: every condition and transition, in order, as a table."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import (
    Annotate,
    ClearGuardAnnotations,
    CreateJob,
    EmitEvent,
    SetHold,
    Skip,
    Uncordon,
)
from guard.codec.check_records import job_record_value
from guard.jobs import spec_digest
from guard.model import Finding, GpuPod, GuardEvent, JobInfo, JobResult
from guard.plan.isolation import plan_isolation
from guard.plan.return_jobs import evidence_job_name
from guard.plan.returning import plan_return
from guard.settings import Settings
from tests.builders import (
    CORDON_AT,
    DIGEST,
    KEYS,
    LEDGER_LINE,
    NOW,
    PCI,
    TEMPLATES,
    UUID,
    back_node,
    brief,
    gpu,
    job_uid,
    node,
    passed_job,
    rejected_job,
    return_job,
    settings,
    snapshot,
)

LT = return_job(snapshot(back_node()))


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(back_node(hold="waiting for vendor")), [("skip", "b", "hold")], id="hold-stops"
        ),
        pytest.param(
            snapshot(back_node(hold=f"repeat fault: {UUID} 2 incidents, last {CORDON_AT}")),
            [("skip", "b", "repeat-fault-hold")],
            id="the-guards-own-hold-says-repeat-fault",
        ),
        pytest.param(
            snapshot(back_node(boot="boot-1")),
            [("skip", "b", "same-boot"), ("event", "b", "same-boot")],
            id="same-boot-waits-for-power-cycle",
        ),
        pytest.param(
            snapshot(back_node(guarded_xid=48, boot="boot-1")),
            [("skip", "b", "waiting-reset")],
            id="reset-class-needs-reset-done",
        ),
        pytest.param(
            snapshot(back_node(guarded_xid=48, boot="boot-1", reset_done="2026-09-22")),
            [("create-job", "b", "conditions-met")],
            id="reset-class-with-reset-done",
        ),
        pytest.param(
            snapshot(back_node(ready=False)), [("skip", "b", "not-ready")], id="not-ready"
        ),
        pytest.param(
            snapshot(back_node(gpus=7, capacity_at_cordon=8)),
            [("skip", "b", "gpu-count")],
            id="card-gone-for-good-7-of-7",
        ),
        pytest.param(
            snapshot(back_node(allocatable=7)), [("skip", "b", "gpu-count")], id="allocatable-short"
        ),
        pytest.param(
            snapshot(back_node(), hardware=(gpu("b", 79),)),
            [("skip", "b", "xid-present")],
            id="hardware-xid-still-there",
        ),
        pytest.param(
            snapshot(back_node(), remap=(gpu("b", 1),)),
            [("skip", "b", "row-remap")],
            id="row-remap-pending",
        ),
        pytest.param(
            snapshot(back_node(), pods=(GpuPod("research", "train-0", "b", 1),)),
            [("skip", "b", "gpu-pods-running")],
            id="gpu-pod-running",
        ),
        pytest.param(
            snapshot(back_node(), ledger={"b": LEDGER_LINE * 2}),
            [("set-hold", "b", "repeat-fault"), ("event", "b", "repeat-fault")],
            id="repeat-fault-holds",
        ),
        pytest.param(
            snapshot(back_node(), ledger={"b": LEDGER_LINE}),
            [("create-job", "b", "conditions-met")],
            id="first-fault-load-test",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(JobInfo(LT, "loadtest", "b", "running"),)),
            [("skip", "b", "loadtest-running")],
            id="load-test-running-waits",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(passed_job(LT),)),
            [("uncordon", "b", "loadtest-passed"), ("event", "b", "returned")],
            id="load-test-passed-uncordons",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(JobInfo(LT, "loadtest", "b", "failed"),)),
            [("annotate", "b", "loadtest-failed"), ("event", "b", "loadtest-failed")],
            id="load-test-failed-recorded",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(JobInfo(LT, "loadtest", "b", "unreadable", "status.x"),)),
            [("skip", "b", "loadtest-unreadable")],
            id="unreadable-load-test-job-waits",
        ),
        pytest.param(
            snapshot(
                back_node(extra={KEYS.loadtest_result: f"failed job/{LT} at 2026-09-21T05:00:00Z"}),
                jobs=(JobInfo(LT, "loadtest", "b", "failed"),),
            ),
            [("skip", "b", "loadtest-failed")],
            id="second-cycle-after-failure-creates-nothing",
        ),
        pytest.param(
            snapshot(
                back_node(extra={KEYS.loadtest_result: f"failed job/{LT} at 2026-09-21T05:00:00Z"})
            ),
            [("skip", "b", "loadtest-failed")],
            id="expired-failed-job-not-recreated",
        ),
        pytest.param(
            snapshot(
                back_node(
                    boot="boot-3",
                    extra={KEYS.loadtest_result: f"failed job/{LT} at 2026-09-21T05:00:00Z"},
                )
            ),
            [("create-job", "b", "conditions-met")],
            id="new-boot-after-failure-tests-again",
        ),
        pytest.param(snapshot(node("x", cordoned=True)), [], id="human-cordon-untouched"),
    ],
)
def test_return_plan(snap, expected):
    assert brief(plan_return(snap, settings(), TEMPLATES)) == expected


CANCEL_EVENT = (
    "node was uncordoned by a person; gpu-node-guard cleared its annotations without a load "
    f"test; it will not cordon it again for xid-79 on {UUID} in this boot"
)
CORDON_KEYS = (KEYS.reason, KEYS.at, KEYS.boot_id, KEYS.gpu_capacity, KEYS.gpu)


def cleared(record: str, keys: tuple[str, ...] = CORDON_KEYS, event: str = CANCEL_EVENT):
    return (
        ClearGuardAnnotations("b", "human-uncordon", "100", keys, ((KEYS.cancelled, record),)),
        EmitEvent("b", "human-uncordon", "Normal", "GuardCancelled", event),
    )


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(node("b", guarded_xid=79)),
            cleared(f"boot-1 {UUID} xid-79 2026-09-21T05:55:00Z"),
            id="human-uncordon-records-boot-gpu-xid",
        ),
        pytest.param(
            snapshot(node("b", guarded_xid=79, boot="boot-2")),
            cleared(f"boot-2 {UUID} xid-79 2026-09-21T05:55:00Z"),
            id="cancel-after-a-reboot-records-the-boot-the-person-accepted",
        ),
        pytest.param(
            snapshot(node("b", guarded_xid=79, boot="", cordon_boot="boot-1")),
            cleared(f"boot-1 {UUID} xid-79 2026-09-21T05:55:00Z"),
            id="node-reports-no-boot-cancel-keeps-the-recorded-one",
        ),
        pytest.param(
            snapshot(node("b", guarded_xid=79, boot="", cordon_boot=None)),
            cleared(
                f"unknown {UUID} xid-79 2026-09-21T05:55:00Z",
                (KEYS.reason, KEYS.at, KEYS.gpu_capacity, KEYS.gpu),
            ),
            id="no-boot-known-cancel-says-unknown",
        ),
        pytest.param(
            snapshot(
                node("b", extra={KEYS.reason: "conformance-dns", KEYS.at: CORDON_AT}), ledger={}
            ),
            (
                ClearGuardAnnotations(
                    "b",
                    "human-uncordon",
                    "100",
                    (KEYS.reason, KEYS.at),
                    ((KEYS.checked_boot, "boot-1 2026-09-21T05:55:00Z uncordon"),),
                ),
                EmitEvent(
                    "b",
                    "human-uncordon",
                    "Normal",
                    "GuardCancelled",
                    "node was uncordoned by a person; gpu-node-guard cleared its annotations "
                    "without a load test; it records this boot as checked: no conformance Job "
                    "until the next reboot",
                ),
            ),
            id="conformance-cordon-uncordoned-records-the-boot-as-checked",
        ),
        pytest.param(
            snapshot(
                node(
                    "b",
                    guarded_xid=79,
                    reset_done="done",
                    extra={KEYS.loadtest_result: "failed job/gng-lt-b-1 at 2026-09-21T05:00:00Z"},
                )
            ),
            cleared(
                f"boot-1 {UUID} xid-79 2026-09-21T05:55:00Z", (*CORDON_KEYS, KEYS.loadtest_result)
            ),
            id="cancel-clears-results-never-reset-done",
        ),
    ],
)
def test_human_uncordon_is_a_recorded_cancel(snap, expected):
    assert plan_return(snap, settings(), TEMPLATES) == expected


RESET_FIX = f'after the GPU reset or power cycle, annotate {KEYS.reset_done}="$(date -u +%FT%TZ) …"'
NO_RECORDED_BOOT = f"no recorded bootID in {KEYS.boot_id}: a reboot cannot be proven; "


@pytest.mark.parametrize(
    ("snap", "detail"),
    [
        pytest.param(
            snapshot(back_node(cordon_boot=None)),
            f"{NO_RECORDED_BOOT}no {KEYS.reset_done}",
            id="missing-recorded-boot-id-is-not-a-reboot",
        ),
        pytest.param(
            snapshot(back_node(cordon_boot="")),
            f"{NO_RECORDED_BOOT}no {KEYS.reset_done}",
            id="empty-recorded-boot-id-is-not-a-reboot",
        ),
        pytest.param(
            snapshot(back_node(boot="")),
            f"node reports no bootID: a reboot cannot be proven; no {KEYS.reset_done}",
            id="node-without-boot-id-is-not-a-reboot",
        ),
        pytest.param(
            snapshot(back_node(cordon_boot=None, reset_done="2026-09-21T04:40:00Z by alice")),
            f"{NO_RECORDED_BOOT}{KEYS.reset_done}='2026-09-21T04:40:00Z by alice' is from before "
            f"the cordon at {CORDON_AT}",
            id="missing-boot-id-and-reset-done-from-before-the-cordon",
        ),
    ],
)
def test_missing_boot_id_never_counts_as_a_reboot(snap, detail):
    """The whole plan is one WARN skip saying what is missing and how to go on."""
    expected = (Skip("b", "boot-unknown", detail, RESET_FIX, "WARN"),)
    assert plan_return(snap, settings(), TEMPLATES) == expected


def test_missing_boot_id_with_a_fresh_reset_done_goes_on_to_the_load_test():
    snap = snapshot(back_node(cordon_boot=None, reset_done="2026-09-21T05:50:00Z by alice"))
    assert brief(plan_return(snap, settings(), TEMPLATES)) == [
        ("create-job", "b", "conditions-met")
    ]


def test_reset_done_from_an_earlier_incident_does_not_pass_a_new_cordon():
    stale = back_node(guarded_xid=48, boot="boot-1", reset_done="2026-09-20T10:00:00Z by alice")
    (skip,) = plan_return(snapshot(stale), settings(), TEMPLATES)
    assert (skip.reason, skip.detail) == (
        "waiting-reset",
        f"xid-48 is reset-class; {KEYS.reset_done}='2026-09-20T10:00:00Z by alice' is from "
        f"before the cordon at {CORDON_AT}",
    )


def test_same_boot_emits_a_stable_waiting_event_each_cycle():
    waiting = snapshot(back_node(boot="boot-1"))
    first = plan_return(waiting, settings(), TEMPLATES)
    later = plan_return(replace(waiting, now=NOW + timedelta(minutes=5)), settings(), TEMPLATES)
    event = EmitEvent(
        "b",
        "same-boot",
        "Normal",
        "GuardWaitingPowerCycle",
        f"gpu-node-guard waits for a power cycle (xid-79 on GPU {PCI} {UUID}): "
        "bootID boot-1 unchanged since cordon",
    )
    assert first[1] == event == later[1]


def test_uncordon_clears_only_guard_keys_present_and_records_the_return():
    passed = back_node(reset_done="2026-09-21T05:50:00Z", extra={"ops/owner": "x"})
    name = return_job(snapshot(passed))
    snap = snapshot(passed, jobs=(passed_job(name),))
    uncordon = plan_return(snap, settings(), TEMPLATES)[0]
    assert isinstance(uncordon, Uncordon)
    assert uncordon.clear_keys == CORDON_KEYS  # never reset-done: only a person removes it
    assert dict(uncordon.annotations) == {KEYS.returned: f"2026-09-21T05:55:00Z job/{name}"}
    assert uncordon.resource_version == "100"


def test_uncordon_also_clears_an_earlier_cancel_record():
    earlier = {KEYS.cancelled: f"boot-0 {UUID} xid-48 2026-09-01T00:00:00Z"}
    snap = snapshot(back_node(extra=earlier), jobs=(passed_job(LT),))
    uncordon = plan_return(snap, settings(), TEMPLATES)[0]
    assert uncordon.clear_keys == (*CORDON_KEYS, KEYS.cancelled)


def test_load_test_job_requests_every_gpu_and_memory_test_for_memory_xid():
    snap = snapshot(back_node(guarded_xid=48, boot="boot-1", reset_done="done"))
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


@pytest.mark.parametrize(
    ("changed", "same"),
    [
        pytest.param({}, True, id="same-boot-same-cordon-same-job"),
        pytest.param({"boot": "boot-3"}, False, id="new-boot-new-job"),
        pytest.param({"reset_done": "again"}, False, id="new-reset-done-new-job"),
        pytest.param({"extra": {KEYS.at: "2026-09-21T05:30:00Z"}}, False, id="new-cordon-new-job"),
        pytest.param({"rv": "999", "hold": None}, True, id="resource-version-is-not-the-key"),
    ],
)
def test_one_load_test_job_per_boot_and_cordon(changed, same):
    base = return_job(snapshot(back_node(reset_done="done")))
    other = return_job(snapshot(back_node(**{"reset_done": "done", **changed})))
    assert (base == other) is same


def test_repeat_fault_hold_text_names_card_count_and_last():
    snap = snapshot(back_node(), ledger={"b": LEDGER_LINE + LEDGER_LINE.replace("09-21", "09-10")})
    hold = plan_return(snap, settings(), TEMPLATES)[0]
    assert isinstance(hold, SetHold)
    assert hold.text == f"repeat fault: {UUID} 2 incidents, last {CORDON_AT}"
    assert hold.key == KEYS.hold


def test_unreadable_ledger_lines_do_not_count_towards_a_repeat_fault():
    bad = f"0001-01-01T00:00:00+01:00 xid-79 {PCI} {UUID} manual\n"
    snap = snapshot(back_node(), ledger={"b": LEDGER_LINE + bad})
    assert brief(plan_return(snap, settings(), TEMPLATES)) == [
        ("create-job", "b", "conditions-met")
    ]


def test_repeat_fault_limit_is_a_setting():
    snap = snapshot(back_node(), ledger={"b": LEDGER_LINE * 2})
    assert brief(plan_return(snap, settings(repeat_fault_limit=3), TEMPLATES)) == [
        ("create-job", "b", "conditions-met")
    ]


CF = return_job(snapshot(back_node()), "conformance", return_conformance=True)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(None, [("create-job", "b", "conditions-met")], id="conformance-first"),
        pytest.param("running", [("skip", "b", "conformance-running")], id="conformance-running"),
        pytest.param(
            "succeeded",
            [("create-job", "b", "conditions-met")],
            id="conformance-pass-then-load-test",
        ),
    ],
)
def test_return_path_conformance(status, expected):
    jobs = () if status is None else (JobInfo(CF, "conformance", "b", status),)
    if status == "succeeded":
        jobs = (passed_job(CF, "conformance"),)
    actions = plan_return(
        snapshot(back_node(), jobs=jobs), settings(return_conformance=True), TEMPLATES
    )
    assert brief(actions) == expected
    if status is None:
        assert actions[0].job_kind == "conformance"
    if status == "succeeded":
        assert actions[0].job_kind == "loadtest"


def test_return_conformance_is_on_by_default():
    assert Settings().return_conformance is True


def test_by_default_a_power_cycled_node_passes_conformance_of_its_boot_before_the_uncordon():
    """conformance of the new boot -> load test -> uncordon, and the uncordon records that boot
    as checked, so the after-reboot check does not start a second Job while the node serves."""
    s = settings(return_conformance=Settings().return_conformance)
    cf = return_job(snapshot(back_node()), "conformance", return_conformance=True)
    first = plan_return(snapshot(back_node()), s, TEMPLATES)
    assert [(a.job_kind, a.reason) for a in first if isinstance(a, CreateJob)] == [
        ("conformance", "conditions-met")
    ]
    passed = (passed_job(cf, "conformance"),)
    second = plan_return(snapshot(back_node(), jobs=passed), s, TEMPLATES)
    assert [a.job_kind for a in second if isinstance(a, CreateJob)] == ["loadtest"]
    both = (*passed, passed_job(LT))
    uncordon = plan_return(snapshot(back_node(), jobs=both), s, TEMPLATES)[0]
    assert isinstance(uncordon, Uncordon)
    assert dict(uncordon.annotations)[KEYS.checked_boot] == (
        f"boot-2 2026-09-21T05:55:00Z job/{cf}"
    )


def test_failed_conformance_keeps_the_node_cordoned_and_no_load_test_follows():
    s = settings(return_conformance=True)
    failed = (JobInfo(CF, "conformance", "b", "failed"),)
    first = plan_return(snapshot(back_node(), jobs=failed), s, TEMPLATES)
    annotate = first[0]
    assert isinstance(annotate, Annotate)
    assert dict(annotate.annotations)[KEYS.conformance_result].startswith(f"failed job/{CF} at ")
    # The next cycle reads what this one wrote: the node stays, and no load test is created,
    # even with the Job itself gone (expired).
    recorded = back_node(extra=dict(annotate.annotations))
    for jobs in (failed, ()):
        later = plan_return(snapshot(recorded, jobs=jobs), s, TEMPLATES)
        assert brief(later) == [("skip", "b", "conformance-failed")]
    assert not any(isinstance(a, Uncordon | CreateJob) for a in first)


def test_failure_annotation_names_the_job():
    snap = snapshot(back_node(), jobs=(JobInfo(LT, "loadtest", "b", "failed"),))
    annotate = plan_return(snap, settings(), TEMPLATES)[0]
    assert isinstance(annotate, Annotate)
    assert dict(annotate.annotations)[KEYS.loadtest_result].startswith(f"failed job/{LT}")


def test_every_failed_condition_is_one_skip_line_with_observed_value():
    skip = plan_return(snapshot(back_node(allocatable=7)), settings(), TEMPLATES)[0]
    assert isinstance(skip, Skip)
    assert str(skip) == (
        'skip node=b reason=gpu-count detail="capacity=8 recorded=8 '
        'allocatable=7" next="checked again next cycle (https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#return-condition-not-met)"'
    )


def test_missing_ledger_line_of_a_cordon_is_repaired_first():
    actions = plan_return(
        snapshot(back_node(boot="boot-1"), ledger={"b": "a note\n"}), settings(), TEMPLATES
    )
    assert brief(actions) == [
        ("append-ledger", "b", "repair-ledger"),
        ("skip", "b", "same-boot"),
        ("event", "b", "same-boot"),
    ]
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
    at = NOW - timedelta(minutes=minutes_ago)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    # The evidence Job and the Event the cordon at `at` created are the ones the repair must find.
    cordon = plan_isolation(
        replace(snapshot(node("b"), candidates=(gpu("b", 79),)), now=at), settings(), TEMPLATES
    )
    (made,) = [a for a in cordon if isinstance(a, CreateJob)]
    (told,) = [a for a in cordon if isinstance(a, EmitEvent)]
    n = back_node(boot="boot-1", extra={KEYS.at: stamp})
    jobs = (JobInfo(made.name, "evidence", "b", "running"),) if job_exists else ()
    ledger = {"b": f"{stamp} xid-79 {PCI} {UUID} gpu-node-guard\n"}
    cordon_event = GuardEvent(told.name, "b", "GuardCordoned", 1)
    snap = replace(snapshot(n, jobs=jobs, ledger=ledger), events=(cordon_event,))
    actions = plan_return(snap, settings(), TEMPLATES)
    expected = [("create-job", "b", "repair-evidence")] if repaired else []
    if not repaired and not job_exists:  # too late to create it: a WARN says so
        expected = [("skip", "b", "evidence-missing")]
    assert brief(actions) == [*expected, ("skip", "b", "same-boot"), ("event", "b", "same-boot")]
    if repaired:
        assert actions[0].name == made.name


# ---- Results are trusted by identity (docs/security.md, "Job results") --------------------

OTHER_UID = "0b9c6d1e-0000-4000-8000-00000000dead"
FAIL = JobResult("read", failed=(Finding("slow", "slow gpu=3 ratio=0.6"),))
GARBAGE = JobResult("unreadable", "pod x: not a load-test summary (kind None, verdict None)")
# An adopted Pod: ran on another node (guard.read.job_results marks such a result `foreign`).
ADOPTED = JobResult("unreadable", f"pod x ran on node a, not on job/{LT}'s node b", foreign=True)


def recorded(kind: str, name: str, uid: str) -> dict[str, str]:
    """The node's record of the `kind` Job the guard made: `name` with `uid`."""
    key = KEYS.job_record(kind)
    assert key is not None
    return {key: job_record_value(name, uid, DIGEST)}


def replaced(kind: str, name: str) -> tuple:
    """The guard made `name` (uid of its record); someone deleted it and made one of that name."""
    job = replace(passed_job(name, kind), uid=OTHER_UID, digest=DIGEST)
    return back_node(extra=recorded(kind, name, job_uid(name))), job


def foreign_plan(kind: str, node_: object, job: JobInfo, **changes: object) -> tuple:
    snap = snapshot(node_, jobs=(job,), own=False)  # type: ignore[arg-type]
    return plan_return(snap, settings(**changes), TEMPLATES)


@pytest.mark.parametrize(
    ("kind", "changes"),
    [("loadtest", {}), ("conformance", {"return_conformance": True})],
)
def test_a_replaced_job_is_no_pass_the_node_stays_cordoned_with_a_warning(kind, changes):
    name = LT if kind == "loadtest" else CF
    actions = foreign_plan(kind, *replaced(kind, name), **changes)
    assert brief(actions) == [("skip", "b", f"{kind}-foreign"), ("event", "b", f"{kind}-foreign")]
    warn, event = actions
    assert warn.level == "WARN" and OTHER_UID in warn.detail and "replaced" in warn.detail
    assert f"kubectl -n gpu-node-guard-jobs delete job {name}" in warn.next
    assert (event.event_type, event.event_reason) == ("Warning", "GuardForeignJob")
    assert f"job/{name}" in event.message
    assert not [a for a in actions if isinstance(a, Uncordon)]


@pytest.mark.parametrize(
    ("node_", "job", "why"),
    [
        pytest.param(back_node(), passed_job(LT), "no record", id="no-record-on-the-node"),
        pytest.param(
            back_node(extra=recorded("loadtest", "gng-lt-b-other", job_uid(LT))),
            replace(passed_job(LT), uid=job_uid(LT), digest=DIGEST),
            "no record",
            id="the-record-names-another-job",
        ),
        pytest.param(
            back_node(extra=recorded("loadtest", LT, job_uid(LT))),
            replace(passed_job(LT), uid=job_uid(LT), digest="f" * 16),
            "another spec",
            id="same-uid-another-spec",
        ),
    ],
)
def test_a_job_found_by_name_that_the_guard_did_not_make_is_no_pass(node_, job, why):
    actions = foreign_plan("loadtest", node_, job)
    assert brief(actions) == [("skip", "b", "loadtest-foreign"), ("event", "b", "loadtest-foreign")]
    assert why in actions[0].detail


@pytest.mark.parametrize(
    ("kind", "result"),
    [
        pytest.param("loadtest", FAIL, id="loadtest-verdict-fail"),
        pytest.param("loadtest", GARBAGE, id="loadtest-garbage"),
        pytest.param("loadtest", None, id="loadtest-no-pod"),
        pytest.param("conformance", FAIL, id="conformance-fail"),
        pytest.param("conformance", GARBAGE, id="conformance-garbage"),
        pytest.param("conformance", None, id="conformance-no-pod"),
    ],
)
def test_a_succeeded_job_without_its_pods_pass_keeps_the_node_cordoned(kind, result):
    """Job success alone is never a pass: the Pod's own summary must say it."""
    name = LT if kind == "loadtest" else CF
    job = replace(passed_job(name, kind), result=result)
    snap = snapshot(back_node(), jobs=(job,))
    actions = plan_return(snap, settings(return_conformance=kind == "conformance"), TEMPLATES)
    assert brief(actions) == [("skip", "b", f"{kind}-unreadable")]
    assert actions[0].level == "WARN" and "not a pass" in actions[0].detail


@pytest.mark.parametrize("kind", ["loadtest", "conformance"])
def test_a_result_from_a_pod_that_is_not_the_jobs_own_names_the_job_as_foreign(kind):
    """The orphan-adoption route: the Job is the guard's (its record), its Pod came from
    elsewhere. Never a pass: WARN, a Warning Event naming the Job, the node stays cordoned."""
    name = LT if kind == "loadtest" else CF
    job = replace(passed_job(name, kind), result=ADOPTED)
    snap = snapshot(back_node(), jobs=(job,))
    actions = plan_return(snap, settings(return_conformance=kind == "conformance"), TEMPLATES)
    assert brief(actions) == [("skip", "b", f"{kind}-foreign"), ("event", "b", f"{kind}-foreign")]
    warn, event = actions
    assert warn.level == "WARN" and "ran on node a" in warn.detail
    assert event.event_reason == "GuardForeignJob" and f"job/{name}" in event.message


@pytest.mark.parametrize("kind", ["loadtest", "conformance"])
def test_a_job_whose_pod_the_node_rejected_could_not_run_and_the_node_stays_cordoned(kind):
    """OutOfcpu on a node short of the load test's requests: the Job fails at once with no
    container run. Neither a failed check (nothing recorded on the node) nor a pass; deleted,
    the Job is made again."""
    name = LT if kind == "loadtest" else CF
    s = settings(return_conformance=kind == "conformance")
    snap = snapshot(back_node(), jobs=(rejected_job(name, kind),))
    actions = plan_return(snap, s, TEMPLATES)
    assert brief(actions) == [("skip", "b", "job-rejected"), ("event", "b", "job-rejected")]
    warn, event = actions
    assert warn.level == "WARN" and f"{kind} job/{name}" in warn.detail
    assert "OutOfcpu: Pod was rejected: Node didn't have enough resource: cpu" in warn.detail
    assert warn.next.startswith("the node stays cordoned; give the node what the kubelet names")
    assert event.event_type == "Warning" and event.event_reason == "GuardJobRejected"
    assert event.message.startswith(f"gpu-node-guard's {kind} job/{name} could not run: pod ")
    again = plan_return(snapshot(back_node()), s, TEMPLATES)
    assert [a.name for a in again if isinstance(a, CreateJob)] == [name]


def test_a_rejected_evidence_job_is_said_and_the_load_test_goes_on_without_its_links():
    evidence = "gng-ev-b-142b6f18"  # the evidence Job of b's cordon, written out
    snap = snapshot(back_node(), jobs=(rejected_job(evidence, "evidence"),))
    actions = plan_return(snap, settings(), TEMPLATES)
    assert brief(actions) == [
        ("skip", "b", "job-rejected"),
        ("event", "b", "job-rejected"),
        ("create-job", "b", "conditions-met"),
    ]
    assert "no evidence was read" in actions[0].next
    assert (
        "--expect-link"
        not in actions[2].manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    )


def test_the_guards_own_job_with_its_pods_pass_returns_the_node():
    assert brief(
        plan_return(snapshot(back_node(), jobs=(passed_job(LT),)), settings(), TEMPLATES)
    ) == [("uncordon", "b", "loadtest-passed"), ("event", "b", "returned")]


def test_a_created_gate_job_carries_the_record_the_executor_writes():
    (create,) = plan_return(snapshot(back_node()), settings(), TEMPLATES)
    assert isinstance(create, CreateJob) and create.record[0] == KEYS.loadtest_job
    name, uid, digest = create.record[1].split(" ")
    assert (name, uid, digest) == (create.name, "{uid}", spec_digest(create.manifest))
    assert create.log_line()[1]["record"] == KEYS.loadtest_job  # the dry run shows it


def test_a_node_triggers_rejected_evidence_job_names_its_node_wide_command():
    """A node trigger's cordon names no GPU: collecting its evidence by hand is its node-wide
    command (`--trigger`), not the one-GPU Job `render evidence` prints."""
    notes = {
        KEYS.reason: "admission-rejected",
        KEYS.at: CORDON_AT,
        KEYS.gpu_capacity: "8",
        KEYS.boot_id: "boot-1",
    }
    back = node("b", cordoned=True, boot="boot-2", extra=notes)
    snap = snapshot(back, jobs=(rejected_job(evidence_job_name(back), "evidence"),))
    warn = plan_return(snap, settings(), TEMPLATES)[0]
    assert (warn.reason, warn.level) == ("job-rejected", "WARN")
    assert "collect it by hand (gpu-node-guard evidence collect --node b --trigger " in warn.next
    assert "render evidence" not in warn.next
