"""guard/plan/device_taint.py: the device taint of a DRA node's faulted GPU, its return, and the
breaker and one isolation per cycle across cordons and device taints (pure planning)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import (
    Annotate,
    ClearGuardAnnotations,
    Cordon,
    CreateClaim,
    CreateJob,
    EmitEvent,
    Skip,
    TaintDevice,
    UntaintDevice,
)
from guard.model import DraDevice, JobInfo, NodeInfo, Snapshot, TaintRule
from guard.plan import device_taint, plan_cycle
from guard.plan.device_taint import DeviceRecord, guarded_count, parse_record, rule_name
from guard.read.objects import devices, taint_rules
from tests.builders import (
    KEYS,
    NOW,
    PASSED,
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


def test_a_gpu_the_driver_does_not_publish_is_not_tainted() -> None:
    snap = published(
        snapshot(dra_node(), candidates=(gpu("d", 79, uuid=OTHER, pci="0000:aa:00.0"),))
    )
    plan = plan_cycle(snap, S, TEMPLATES)
    assert not [a for a in plan if isinstance(a, TaintDevice)]
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
    assert guarded_count(snap, S) == 2
    plan = plan_cycle(snap, replace(S, breaker_max_nodes=2), TEMPLATES)
    assert [a.reason for a in plan if a.node == "e"] == ["breaker-open", "breaker-open"]
    plan = plan_cycle(snap, replace(S, breaker_max_nodes=3), TEMPLATES)
    assert [a.node for a in plan if isinstance(a, TaintDevice)] == ["e"]


def test_one_isolation_per_cycle_across_cordon_and_device_taint() -> None:
    snap = published(snapshot(node("b"), dra_node("d"), candidates=(gpu("b", 79), gpu("d", 79))))
    plan = plan_cycle(snap, S, TEMPLATES)
    isolations = [a for a in plan if device_taint.isolates(a)]
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
    pod = job.manifest["spec"]["template"]["spec"]
    assert "nodeName" not in pod  # the scheduler allocates the claim
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimName": claim.name}]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["requests"]


@pytest.mark.parametrize(
    ("status", "passed", "expected"),
    [
        ("running", None, [("Skip", "loadtest-running")]),
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
    info = JobInfo(job.name, "loadtest", "d", status, result=PASSED if passed else None)  # type: ignore[arg-type]
    snap = published(
        replace(snapshot(tainted(rec, boot="boot-2"), jobs=(info,)), taint_rules=(guard_rule(rec),))
    )
    assert _return(snap) == expected
    untaint = [
        a for a in device_taint.plan_return(snap, S, TEMPLATES) if isinstance(a, UntaintDevice)
    ]
    for a in untaint:  # by name and uid: exactly the rule the guard read as its own
        assert (a.name, a.uid) == (rec.rule, "rule-uid")


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


def test_a_failed_load_test_is_recorded_once_and_the_device_stays_tainted() -> None:
    rec = record()
    base = published(replace(snapshot(tainted(rec, boot="boot-2")), taint_rules=(guard_rule(rec),)))
    _, job = device_taint.plan_return(base, S, TEMPLATES)
    info = JobInfo(job.name, "loadtest", "d", "failed")
    noted = tainted(rec, boot="boot-2", extra={KEYS.loadtest_result: f"failed job/{job.name} at x"})
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
    assert guarded_count(snap, S) == 0


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
