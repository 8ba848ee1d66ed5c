"""guard/plan/device_taint.py: the device taint of a DRA node's faulted GPU, its return, and the
breaker and one isolation per cycle across cordons and device taints (pure planning)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import (
    Annotate,
    AppendLedgerLine,
    ClearGuardAnnotations,
    Cordon,
    CreateClaim,
    CreateJob,
    EmitEvent,
    Skip,
    TaintDevice,
    UntaintDevice,
)
from guard.ledger import parse_ledger
from guard.model import (
    Claim,
    ClaimRecord,
    DraDevice,
    JobInfo,
    JobResult,
    NodeInfo,
    Snapshot,
    TaintRule,
)
from guard.plan import device_taint, plan_cycle, units
from guard.plan.device_taint import DeviceRecord, parse_record, rule_name
from guard.plan.units import breaker_count
from guard.read.objects import claims, devices, taint_rules
from tests.builders import (
    KEYS,
    NOW,
    PCI,
    TEMPLATES,
    UUID,
    S,
    gpu,
    kubelet_rejected,
    node,
    snapshot,
)

DEVICE = DraDevice("d", "gpu.nvidia.com", "d", "gpu-4", UUID, PCI)
OTHER = "GPU-99999999-2222-3333-4444-555555555555"


def dra_node(name: str = "d", **kw: object) -> NodeInfo:
    """A DRA node: no nvidia.com/gpu resource (the driver publishes its GPUs)."""
    return node(name, gpus=0, **kw)  # type: ignore[arg-type]


def published(snap: Snapshot, *found: DraDevice) -> Snapshot:
    others = tuple(
        replace(DEVICE, name=f"gpu-{i}", uuid=f"{UUID[:-1]}{i}", pci=f"0000:{0x10 + i:02x}:00.0")
        for i in range(4)
    )
    return replace(snap, devices=(*(found or (DEVICE,)), *others))


def record(at_s: int = 600, boot: str = "boot-1") -> DeviceRecord:
    return DeviceRecord(
        "xid-79", NOW - timedelta(seconds=at_s), boot, PCI, UUID, DEVICE.ref, rule_name(DEVICE)
    )


def guard_rule(rec: DeviceRecord, node_name: str = "d") -> TaintRule:
    return TaintRule(
        rec.rule,
        "rule-uid",
        True,
        "gpu.nvidia.com",
        "d",
        "gpu-4",
        KEYS.fault_taint,
        "xid-79",
        "NoSchedule",
        node_name,
        rec.value(),
    )


def tainted(rec: DeviceRecord, **kw: object) -> NodeInfo:
    extra = {KEYS.device_taint: rec.value(), **kw.pop("extra", {})}  # type: ignore[dict-item]
    return dra_node(extra=extra, **kw)


CLAIM_UID = "0b9c6d1e-0000-4000-8000-00000000c1a1"
# The device load test's own summary: a pass on the tainted GPU, named by its UUID.
DEVICE_PASS = JobResult("read", passed=True, gpus=(UUID,))


def returning(
    rec: DeviceRecord,
    result: JobResult | None = DEVICE_PASS,
    *,
    claim: Claim | None = None,
    made: ClaimRecord | None = None,
    rule: bool = True,
) -> Snapshot:
    """The node after a reboot with the device's load-test Job finished (`result`), the claim
    the guard recorded (`made`, its own by default) and the claim as read (`claim`: the
    recorded one, allocated the tainted device, by default)."""
    base = published(replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=(guard_rule(rec),)))
    _, job = device_taint.plan_return(base, S, TEMPLATES)
    made = made or ClaimRecord(job.name, CLAIM_UID)
    claim = claim or Claim(job.name, CLAIM_UID, (DEVICE.ref,))
    info = JobInfo(job.name, "loadtest", "d", "succeeded", result=result)
    snap = snapshot(tainted(rec, boot="boot-2"), jobs=(info,))
    snap = replace(snap, nodes=tuple(replace(n, claim_record=made) for n in snap.nodes))
    rules = (guard_rule(rec),) if rule else ()
    return published(replace(snap, taint_rules=rules, claims=(claim,)))


def test_a_published_faulted_gpu_is_tainted_not_cordoned() -> None:
    snap = published(snapshot(dra_node(), candidates=(gpu("d", 79),)))
    plan = plan_cycle(snap, S, TEMPLATES)
    taint = next(a for a in plan if isinstance(a, TaintDevice))
    assert not [a for a in plan if isinstance(a, Cordon)]
    assert taint.manifest["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "d", "device": "gpu-4"},
        "taint": {"key": KEYS.fault_taint, "value": "xid-79", "effect": "NoSchedule"},
    }
    assert taint.manifest["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-node-guard"
    kinds = [type(a).__name__ for a in plan if a.node == "d"]
    assert kinds == ["TaintDevice", "Annotate", "EmitEvent", "AppendLedgerLine", "CreateJob"]
    note = next(a for a in plan if isinstance(a, Annotate))
    assert parse_record(dict(note.annotations)[KEYS.device_taint]) is not None


def test_a_device_plugin_node_keeps_the_cordon() -> None:
    plan = plan_cycle(snapshot(node("b"), candidates=(gpu("b", 79),)), S, TEMPLATES)
    assert [a.node for a in plan if isinstance(a, Cordon)] == ["b"]
    assert not [a for a in plan if isinstance(a, TaintDevice)]


def test_a_gpu_the_driver_does_not_publish_is_recorded_and_said_not_isolated() -> None:
    """Issue #38, 6.5: a DRA node whose faulted GPU no device names: no taint and no cordon
    (the node's other GPUs stay in service), but the ledger line, once, from the Xid series'
    UUID and PCI address, a WARN line with the DRA hint and a Warning Event; once the driver
    publishes the GPU again it is tainted, without a second ledger line."""
    faulted = gpu("d", 79, uuid=OTHER, pci="0000:aa:00.0")
    snap = published(snapshot(dra_node(), candidates=(faulted,)))
    plan = plan_cycle(snap, S, TEMPLATES)
    assert not [a for a in plan if isinstance(a, TaintDevice | Cordon)]
    mine = [a for a in plan if a.node == "d"]
    assert [type(a).__name__ for a in mine] == ["Skip", "EmitEvent", "AppendLedgerLine"]
    skip, event, line = mine
    assert isinstance(skip, Skip) and (skip.reason, skip.level) == ("device-unpublished", "WARN")
    assert "resourceslices" in skip.next and "device plugin" not in skip.next
    assert isinstance(event, EmitEvent) and event.event_reason == "GuardNotIsolated"
    assert isinstance(line, AppendLedgerLine) and OTHER in line.line and "0000:aa:00.0" in line.line
    again = replace(snap, ledger=parse_ledger({"d": line.line + "\n"}))
    assert [type(a).__name__ for a in plan_cycle(again, S, TEMPLATES) if a.node == "d"] == [
        "Skip",
        "EmitEvent",
    ]
    back = replace(again, devices=(*again.devices, replace(DEVICE, uuid=OTHER, name="gpu-9")))
    kinds = [type(a).__name__ for a in plan_cycle(back, S, TEMPLATES) if a.node == "d"]
    assert kinds == ["TaintDevice", "Annotate", "EmitEvent", "CreateJob"]


def test_a_node_without_gpus_in_the_api_or_the_driver_keeps_the_device_plugin_hint() -> None:
    snap = snapshot(dra_node(), candidates=(gpu("d", 79),))
    plan = plan_cycle(snap, S, TEMPLATES)
    assert [a.reason for a in plan if isinstance(a, Skip) and a.node == "d"] == ["no-gpu-resource"]


def test_the_same_gpu_again_is_already_guarded_another_is_not_isolated() -> None:
    rec = record()
    same = published(snapshot(tainted(rec), candidates=(gpu("d", 79),)))
    same = replace(same, taint_rules=(guard_rule(rec),))
    words = [a.reason for a in plan_cycle(same, S, TEMPLATES) if isinstance(a, Skip)]
    assert "already-guarded" in words
    other = published(snapshot(tainted(rec), candidates=(gpu("d", 79, uuid=OTHER),)))
    plan = plan_cycle(replace(other, taint_rules=(guard_rule(rec),)), S, TEMPLATES)
    assert "device-isolated" in [a.reason for a in plan]
    assert not [a for a in plan if isinstance(a, TaintDevice | Cordon)]


@pytest.mark.parametrize("index", [2, 6])
def test_a_second_faulted_gpu_is_device_isolated_whatever_its_index(index: int) -> None:
    """Issue #38, 6.2: the tainted GPU (index 4) still reports its Xid; another GPU of the node
    faults, with a lower or a higher index: both orders give the WARN and the Event naming it."""
    rec = record()
    faulted = (gpu("d", 79), gpu("d", 79, index=index, uuid=OTHER, pci="0000:aa:00.0"))
    snap = published(snapshot(tainted(rec), candidates=faulted))
    plan = plan_cycle(replace(snap, taint_rules=(guard_rule(rec),)), S, TEMPLATES)
    (skip,) = [a for a in plan if isinstance(a, Skip) and a.reason == "device-isolated"]
    assert skip.level == "WARN"
    assert OTHER in skip.detail and UUID not in skip.detail, skip.detail
    (event,) = [a for a in plan if isinstance(a, EmitEvent) and a.node == "d"]
    assert (event.event_type, event.event_reason) == ("Warning", "GuardNotIsolated")
    assert not [a for a in plan if isinstance(a, TaintDevice | Cordon)]


def test_breaker_counts_cordoned_nodes_and_tainted_devices() -> None:
    rec = record()
    snap = published(
        snapshot(
            node("b", guarded_xid=79, cordoned=True),
            tainted(rec),
            dra_node("e"),
            candidates=(gpu("e", 79),),
        )
    )
    snap = replace(
        snap,
        devices=(*snap.devices, replace(DEVICE, node="e", pool="e")),
        taint_rules=(guard_rule(rec),),
    )
    assert breaker_count(snap, S) == 2
    plan = plan_cycle(snap, replace(S, breaker_max_nodes=2), TEMPLATES)
    assert [a.reason for a in plan if a.node == "e"] == ["breaker-open", "breaker-open"]
    plan = plan_cycle(snap, replace(S, breaker_max_nodes=3), TEMPLATES)
    assert [a.node for a in plan if isinstance(a, TaintDevice)] == ["e"]


def test_one_isolation_per_cycle_across_cordon_and_device_taint() -> None:
    snap = published(snapshot(node("b"), dra_node("d"), candidates=(gpu("b", 79), gpu("d", 79))))
    plan = plan_cycle(snap, S, TEMPLATES)
    isolations = [a for a in plan if isinstance(a, tuple(u.isolating for u in units.UNITS))]
    assert len(isolations) == 1
    assert [a.node for a in plan if a.reason == "one-per-cycle"] == ["d"]


def _return(snap: Snapshot) -> list[tuple[str, str]]:
    return [(type(a).__name__, a.reason) for a in device_taint.plan_return(snap, S, TEMPLATES)]


def test_the_return_waits_for_a_reset_or_a_reboot() -> None:
    rec = record()
    snap = published(replace(snapshot(tainted(rec)), taint_rules=(guard_rule(rec),)))
    assert _return(snap) == [("Skip", "device-waiting-reset")]
    reset = tainted(rec, extra={KEYS.reset_done: "2026-09-21T05:50:00Z GPU reset"})
    snap = published(replace(snapshot(reset), taint_rules=(guard_rule(rec),)))
    assert _return(snap) == [("CreateClaim", "conditions-met"), ("CreateJob", "conditions-met")]


def test_a_newer_reset_done_waits_for_the_running_load_test_of_that_gpu() -> None:
    """Issue #38, 6.4: a reset-done written while the device's load test runs makes no second
    claim and Job for the same GPU; once that Job ended, the newer reset gets its own."""
    rec = record()
    first = tainted(rec, extra={KEYS.reset_done: "2026-09-21T05:50:00Z GPU reset"})
    snap = published(replace(snapshot(first), taint_rules=(guard_rule(rec),)))
    _, job = device_taint.plan_return(snap, S, TEMPLATES)
    newer = tainted(rec, extra={KEYS.reset_done: "2026-09-21T05:54:00Z GPU reset again"})
    newer = replace(newer, claim_record=ClaimRecord(job.name, CLAIM_UID))
    for status, expected in (
        ("running", [("Skip", "loadtest-running")]),
        ("failed", [("CreateClaim", "conditions-met"), ("CreateJob", "conditions-met")]),
    ):
        info = JobInfo(job.name, "loadtest", "d", status)  # type: ignore[arg-type]
        snap = published(replace(snapshot(newer, jobs=(info,)), taint_rules=(guard_rule(rec),)))
        plan = device_taint.plan_return(snap, S, TEMPLATES)
        assert [(type(a).__name__, a.reason) for a in plan] == expected
        assert all(a.name != job.name for a in plan if isinstance(a, CreateClaim | CreateJob))


def test_the_load_test_claims_exactly_that_gpu_tolerating_only_the_guards_taint() -> None:
    rec = record()
    snap = published(replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=(guard_rule(rec),)))
    claim, job = device_taint.plan_return(snap, S, TEMPLATES)
    assert isinstance(claim, CreateClaim) and isinstance(job, CreateJob)
    request = claim.manifest["spec"]["devices"]["requests"][0]["exactly"]
    assert request["count"] == 1 and UUID in request["selectors"][0]["cel"]["expression"]
    assert request["tolerations"] == [
        {"key": KEYS.fault_taint, "operator": "Equal", "value": "xid-79", "effect": "NoSchedule"}
    ]
    # The executor writes the uid the API answers: only that claim's load test counts.
    assert claim.record == (KEYS.loadtest_claim, f"{claim.name} {{uid}}")
    pod = job.manifest["spec"]["template"]["spec"]
    assert "nodeName" not in pod  # the scheduler allocates the claim
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimName": claim.name}]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["requests"]


@pytest.mark.parametrize(
    ("status", "passed", "expected"),
    [
        ("running", None, [("Skip", "loadtest-running")]),
        ("unreadable", None, [("Skip", "loadtest-unreadable")]),
        ("succeeded", False, [("Skip", "loadtest-unreadable")]),
        ("failed", None, [("Annotate", "loadtest-failed"), ("EmitEvent", "loadtest-failed")]),
        (
            "succeeded",
            True,
            [
                ("UntaintDevice", "loadtest-passed"),
                ("ClearGuardAnnotations", "device-returned"),
                ("EmitEvent", "returned"),
            ],
        ),
    ],
)
def test_the_rule_is_deleted_only_after_the_load_test_passed(
    status: str, passed: bool | None, expected: list[tuple[str, str]]
) -> None:
    rec = record()
    base = published(replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=(guard_rule(rec),)))
    _, job = device_taint.plan_return(base, S, TEMPLATES)
    assert isinstance(job, CreateJob)
    snap = returning(rec, DEVICE_PASS if passed else None)
    job_info = replace(snap.jobs[0], status=status)  # type: ignore[arg-type]
    snap = replace(snap, jobs=(job_info,))
    assert _return(snap) == expected
    untaint = [
        a for a in device_taint.plan_return(snap, S, TEMPLATES) if isinstance(a, UntaintDevice)
    ]
    for a in untaint:  # by name and uid: exactly the rule the guard read as its own
        assert (a.name, a.uid) == (rec.rule, "rule-uid")


@pytest.mark.parametrize("status", ["unreadable", "succeeded"])
def test_an_unreadable_or_unproven_load_test_warns_how_to_run_it_again_as_the_nodes(
    status: str,
) -> None:
    """The device unit's gate is the node's here (docs/isolation.md): a Job whose status cannot
    be read, or that succeeded without its Pod's pass, is a WARN with the way to run it again,
    never a wait that looks like a running test."""
    rec = record()
    snap = returning(rec, None)
    job = replace(snap.jobs[0], status=status, problem="status unreadable")  # type: ignore[arg-type]
    (skip,) = device_taint.plan_return(replace(snap, jobs=(job,)), S, TEMPLATES)
    assert isinstance(skip, Skip) and (skip.reason, skip.level) == ("loadtest-unreadable", "WARN")
    assert f"delete job {job.name}" in skip.next


def test_a_load_test_whose_pod_the_node_rejected_is_no_failure_the_device_stays_tainted() -> None:
    rec = record()
    base = published(replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=(guard_rule(rec),)))
    _, job = device_taint.plan_return(base, S, TEMPLATES)
    info = JobInfo(
        job.name, "loadtest", "d", "failed", result=kubelet_rejected(job.name, "loadtest")
    )
    snap = published(
        replace(snapshot(tainted(rec, boot="boot-2"), jobs=(info,)), taint_rules=(guard_rule(rec),))
    )
    assert _return(snap) == [("Skip", "job-rejected"), ("EmitEvent", "job-rejected")]


FOREIGN = [("Skip", "loadtest-foreign"), ("EmitEvent", "loadtest-foreign")]
SWAPPED_UID = "0b9c6d1e-0000-4000-8000-0000000000ff"
HEALTHY = replace(DEVICE, name="gpu-1").ref


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"made": None, "no_record": True}, "no record that the guard created resourceclaim"),
        ({"made": ClaimRecord("gng-lt-other", CLAIM_UID)}, "last claim here is"),
        ({"claim": Claim("gone", CLAIM_UID)}, "is gone"),
        ({"claim_uid": SWAPPED_UID}, f"has uid {SWAPPED_UID} but the guard created uid"),
        ({"allocated": (HEALTHY,)}, f"is allocated {HEALTHY}, not the tainted {DEVICE.ref}"),
        ({"allocated": (DEVICE.ref, HEALTHY)}, "not the tainted"),
        ({"result": replace(DEVICE_PASS, gpus=(OTHER,))}, f"ran on {OTHER}, not the tainted"),
        ({"result": replace(DEVICE_PASS, gpus=())}, "GPUs it did not name"),
        ({"result": replace(DEVICE_PASS, gpus=(UUID, OTHER))}, "not the tainted"),
    ],
    ids=[
        "no-claim-record",
        "record-of-another-claim",
        "claim-gone",
        "claim-swapped",
        "allocated-another-gpu",
        "allocated-two",
        "tested-another-gpu",
        "tested-unnamed",
        "tested-two",
    ],
)
def test_a_pass_on_another_claim_or_gpu_keeps_the_taint(
    change: dict[str, object], why: str
) -> None:
    """The swap of issue #38: the load test passed, but not on the guard's claim of the tainted
    GPU; the rule stays, one WARN line and one Warning Event say what, why and what next."""
    rec = record()
    snap = returning(rec, change.get("result", DEVICE_PASS), made=change.get("made"))  # type: ignore[arg-type]
    name = snap.jobs[0].name
    uid = str(change.get("claim_uid", CLAIM_UID))
    allocated = change.get("allocated", (DEVICE.ref,))
    claim = change.get("claim") or Claim(name, uid, allocated)  # type: ignore[arg-type]
    nodes = snap.nodes
    if change.get("no_record"):
        nodes = tuple(replace(n, claim_record=None) for n in nodes)
    snap = replace(snap, nodes=nodes, claims=(claim,))
    plan = device_taint.plan_return(snap, S, TEMPLATES)
    assert [(type(a).__name__, a.reason) for a in plan] == FOREIGN
    skip, event = plan
    assert isinstance(skip, Skip) and isinstance(event, EmitEvent)
    assert skip.level == "WARN" and why in skip.detail, skip.detail
    assert "the device stays tainted" in skip.next and f"resourceclaim {name}" in skip.next
    assert event.event_type == "Warning" and why in event.message
    # With the rule gone as well, the foreign pass is no return: the record is a cancel.
    gone = replace(snap, taint_rules=())
    reasons = [a.reason for a in device_taint.plan_return(gone, S, TEMPLATES)]
    assert "human-uncordon" in reasons and "device-returned" not in reasons


def test_a_claim_deallocated_after_its_pod_finished_still_counts_by_uid_and_uuid() -> None:
    """The resourceclaim controller clears a claim's allocation once its Pod has finished: the
    recorded uid (its spec is the guard's, and immutable) and the GPU the load test names decide."""
    rec = record()
    snap = returning(rec)
    snap = replace(snap, claims=(replace(snap.claims[0], allocated=()),))
    assert _return(snap)[0] == ("UntaintDevice", "loadtest-passed")
    upper = replace(snap.jobs[0], result=replace(DEVICE_PASS, gpus=(UUID.upper(),)))
    assert _return(replace(snap, jobs=(upper,)))[0] == ("UntaintDevice", "loadtest-passed")


def test_claims_are_read_with_their_uid_and_allocation() -> None:
    found = {
        "metadata": {"name": "c", "uid": CLAIM_UID},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"driver": "gpu.nvidia.com", "pool": "d", "device": "gpu-4"}]
                }
            }
        },
    }
    assert claims([found, {"metadata": {"name": "u"}}, {"metadata": {}}]) == (
        Claim("c", CLAIM_UID, (DEVICE.ref,)),
        Claim("u", "", ()),
    )


def test_a_failed_load_test_is_recorded_once_and_the_device_stays_tainted() -> None:
    rec = record()
    base = published(replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=(guard_rule(rec),)))
    _, job = device_taint.plan_return(base, S, TEMPLATES)
    info = JobInfo(job.name, "loadtest", "d", "failed")
    noted = tainted(
        rec,
        boot="boot-2",
        extra={KEYS.loadtest_result: f"failed job/{job.name} at 2026-09-21T05:00:00Z"},
    )
    snap = published(replace(snapshot(noted, jobs=(info,)), taint_rules=(guard_rule(rec),)))
    assert _return(snap) == [("Skip", "loadtest-failed")]


def test_a_deleted_rule_without_a_passed_load_test_is_a_persons_cancel() -> None:
    rec = record()
    plan = device_taint.plan_return(published(snapshot(tainted(rec))), S, TEMPLATES)
    clear = next(a for a in plan if isinstance(a, ClearGuardAnnotations))
    assert clear.reason == "human-uncordon" and KEYS.device_taint in clear.clear_keys
    assert dict(clear.annotations)[KEYS.cancelled].split()[1] == UUID
    assert [a.event_reason for a in plan if isinstance(a, EmitEvent)] == ["GuardCancelled"]


def test_a_persons_rule_is_never_acted_on() -> None:
    theirs = replace(guard_rule(record()), name="maintenance", guard=False, node="d")
    snap = published(replace(snapshot(dra_node()), taint_rules=(theirs,)))
    assert device_taint.plan_return(snap, S, TEMPLATES) == ()
    assert breaker_count(snap, S) == 0


def test_a_guard_rule_whose_record_did_not_land_is_recorded_again() -> None:
    rec = record()
    snap = published(replace(snapshot(dra_node()), taint_rules=(guard_rule(rec),)))
    (note,) = device_taint.plan_return(snap, S, TEMPLATES)
    assert isinstance(note, Annotate) and dict(note.annotations)[KEYS.device_taint] == rec.value()


def test_resource_slices_and_rules_are_read_at_the_boundary() -> None:
    slice_ = {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "d",
            "pool": {"name": "d"},
            "devices": [
                {
                    "name": "gpu-4",
                    "attributes": {"uuid": {"string": UUID}, "pcieBusID": {"string": PCI}},
                },
                {"name": "gpu-0-mig-1", "attributes": {"uuid": {"string": "MIG-x"}}},
                {"name": "Bad_Name", "attributes": {"uuid": {"string": UUID}}},
            ],
        }
    }
    other = {
        "spec": {
            "driver": "example.com",
            "nodeName": "d",
            "pool": {"name": "d"},
            "devices": [{"name": "x"}],
        }
    }
    assert devices([slice_, other]) == (DEVICE,)
    rule = {
        "metadata": {"name": "r", "uid": "u", "labels": {"app.kubernetes.io/name": "x"}},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "d", "device": "gpu-4"},
            "taint": {"key": "k", "effect": "NoSchedule"},
        },
    }
    (read,) = taint_rules([rule], KEYS)
    assert not read.guard and read.ref == DEVICE.ref


def test_status_shows_a_tainted_device_and_counts_it_under_the_breaker() -> None:
    from guard.status.derive import report
    from guard.status.model import Sight

    rec = record()
    snap = published(replace(snapshot(tainted(rec)), taint_rules=(guard_rule(rec),)))
    r = report(snap, S, TEMPLATES, Sight("http://prometheus.test"))
    (row,) = r.nodes
    assert (row.node, row.state, row.reason) == ("d", "device-tainted", "xid-79")
    assert row.gpu is not None and row.gpu.uuid == UUID
    assert r.breaker.guarded == 1


# Issue #39, 4: a DRA GPU is found by UUID, then PCI address, then as the parent of MIG devices;
# every device of it is tainted (one rule each).
MIG_A = DraDevice("d", "gpu.nvidia.com", "d", "gpu-4-mig-0", "", PCI, UUID)
MIG_B = DraDevice("d", "gpu.nvidia.com", "d", "gpu-4-mig-1", "", PCI, UUID)
NO_UUID = replace(DEVICE, uuid="")
SECOND_NAME = replace(DEVICE, name="gpu-4-alias")


@pytest.mark.parametrize(
    "found",
    [(MIG_A, MIG_B), (NO_UUID,), (DEVICE, SECOND_NAME)],
    ids=["mig-only", "no-uuid-attribute", "two-names"],
)
def test_every_device_of_the_faulted_gpu_is_tainted(found: tuple[DraDevice, ...]) -> None:
    snap = published(snapshot(dra_node(), candidates=(gpu("d", 79),)), *found)
    plan = plan_cycle(snap, S, TEMPLATES)
    taints = [a for a in plan if isinstance(a, TaintDevice)]
    assert [t.device for t in taints] == [d.ref for d in found]
    assert [t.manifest["metadata"]["name"] for t in taints] == [rule_name(d) for d in found]
    note = next(a for a in plan if isinstance(a, Annotate))
    rec = parse_record(dict(note.annotations)[KEYS.device_taint])
    assert rec is not None and rec.devices == tuple(d.ref for d in found)
    assert rec.rules == tuple(rule_name(d) for d in found)
    assert [a.event_reason for a in plan if isinstance(a, EmitEvent)] == ["GuardDeviceTainted"]
    assert not [a for a in plan if isinstance(a, Skip) and a.node == "d"]


def _two_device_record() -> tuple[DeviceRecord, tuple[TaintRule, ...]]:
    rec = replace(
        record(),
        device=f"{DEVICE.ref},{SECOND_NAME.ref}",
        rule=f"{rule_name(DEVICE)},{rule_name(SECOND_NAME)}",
    )
    rules = (
        guard_rule(replace(rec, rule=rule_name(DEVICE))),
        replace(guard_rule(rec), name=rule_name(SECOND_NAME), device=SECOND_NAME.name),
    )
    return rec, tuple(replace(r, record=rec.value()) for r in rules)


def test_one_gpu_with_two_rules_counts_once_and_returns_both() -> None:
    rec, rules = _two_device_record()
    snap = published(replace(snapshot(tainted(rec)), taint_rules=rules), DEVICE, SECOND_NAME)
    assert breaker_count(snap, S) == 1
    assert _return(snap) == [("Skip", "device-waiting-reset")]
    base = published(
        replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=rules), DEVICE, SECOND_NAME
    )
    _, job = device_taint.plan_return(base, S, TEMPLATES)
    info = JobInfo(job.name, "loadtest", "d", "succeeded", result=DEVICE_PASS)
    snap = snapshot(tainted(rec, boot="boot-2"), jobs=(info,))
    made = ClaimRecord(job.name, CLAIM_UID)
    snap = replace(
        base,
        nodes=tuple(replace(n, claim_record=made) for n in snap.nodes),
        jobs=snap.jobs,
        claims=(Claim(job.name, CLAIM_UID, (SECOND_NAME.ref,)),),
    )
    plan = device_taint.plan_return(snap, S, TEMPLATES)
    assert sorted(a.name for a in plan if isinstance(a, UntaintDevice)) == sorted(rec.rules)


def test_a_gpu_published_only_as_mig_devices_waits_with_the_cancel_named() -> None:
    rec = replace(
        record(), device=f"{MIG_A.ref},{MIG_B.ref}", rule=f"{rule_name(MIG_A)},{rule_name(MIG_B)}"
    )
    rules = tuple(
        replace(guard_rule(rec), name=rule_name(d), device=d.name) for d in (MIG_A, MIG_B)
    )
    snap = replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=rules)
    snap = replace(snap, devices=(MIG_A, MIG_B))
    (skip,) = device_taint.plan_return(snap, S, TEMPLATES)
    assert isinstance(skip, Skip) and skip.reason == "device-not-published"
    assert "MIG devices" in skip.detail and " ".join(rec.rules) in skip.next


def test_mig_devices_and_gpus_without_a_uuid_are_read_at_the_boundary() -> None:
    slice_ = {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "d",
            "pool": {"name": "d"},
            "devices": [
                {
                    "name": "gpu-4-mig-0",
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": "MIG-8a2c7d9e-1111-5222-8333-444455556666"},
                        "parentUUID": {"string": UUID},
                    },
                },
                {"name": "gpu-5", "attributes": {"pcieBusID": {"string": "0000:aa:00.0"}}},
                {"name": "gpu-6", "attributes": {"uuid": {"string": "garbage"}}},
            ],
        }
    }
    assert devices([slice_]) == (
        DraDevice("d", "gpu.nvidia.com", "d", "gpu-4-mig-0", "", "", UUID),
        DraDevice("d", "gpu.nvidia.com", "d", "gpu-5", "", "0000:aa:00.0"),
    )


def test_a_node_wide_fault_on_a_dra_node_is_said_not_isolated_with_its_event() -> None:
    """A held fabric fault names no device: no rule, no cordon (the node-scope policy refuses
    it), a WARN line and a GuardNotIsolated Event naming the finding, every cycle."""
    snap = published(snapshot(dra_node()))
    snap = replace(snap, prom=replace(snap.prom, fabric_since=(("d", NOW - timedelta(hours=1)),)))
    plan = plan_cycle(snap, S, TEMPLATES)
    assert not [a for a in plan if isinstance(a, (Cordon, TaintDevice))]
    (skip,) = [a for a in plan if isinstance(a, Skip) and a.node == "d"]
    assert (skip.reason, skip.level) == ("no-gpu-resource", "WARN")
    assert skip.detail.startswith("fabric held 3600s: ")
    assert "names no one device to taint on a DRA node" in skip.detail
    assert "check the device plugin" not in skip.next  # a DRA node has none
    (event,) = [a for a in plan if isinstance(a, EmitEvent) and a.node == "d"]
    assert (event.event_type, event.event_reason) == ("Warning", "GuardNotIsolated")
    assert "fabric held 3600s" in event.message
