"""A value the guard cannot read stops its own object only: one WARN line and Event, and every
other node is planned as usual in the same cycle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from guard.actions import EmitEvent, Skip
from guard.model import NodeInfo, PromUnreadable, Snapshot
from guard.plan import plan_cycle
from guard.read.prom_view import with_prom_unreadable
from tests.builders import (
    CORDON_AT,
    KEYS,
    PCI,
    TEMPLATES,
    UUID,
    brief,
    gpu,
    node,
    settings,
    snapshot,
    xid_cordon,
)
from tests.snapshot_json import round_trips


def guarded(**extra: str) -> dict[str, object]:
    """Node `bad`, cordoned by the guard, with one of its annotations replaced."""
    return {"cordoned": True, "guarded_xid": 79, "extra": extra}


CASES = [
    pytest.param(
        guarded(**{KEYS.at: "9999-12-31T23:59:59-23:59"}),
        KEYS.at,
        "9999-12-31T23:59:59-23:59",
        id="cordon-time-overflows-past-9999",
    ),
    pytest.param(
        guarded(**{KEYS.at: "0001-01-01T00:00:00+01:00"}),
        KEYS.at,
        "0001-01-01T00:00:00+01:00",
        id="cordon-time-overflows-before-year-1",
    ),
    pytest.param(
        guarded(**{KEYS.at: "2026-13-45T99:00:00Z"}),
        KEYS.at,
        "2026-13-45T99:00:00Z",
        id="cordon-time-impossible-date",
    ),
    pytest.param(
        guarded(**{KEYS.reason: "xid-²"}), KEYS.reason, "xid-²", id="reason-superscript-digit"
    ),
    pytest.param(
        guarded(**{KEYS.reason: "xid-٧٩"}), KEYS.reason, "xid-٧٩", id="reason-arabic-indic-digits"
    ),
    pytest.param(guarded(**{KEYS.reason: ""}), KEYS.reason, "", id="reason-empty"),
    pytest.param(guarded(**{KEYS.gpu: PCI}), KEYS.gpu, PCI, id="gpu-field-without-uuid"),
    pytest.param(
        guarded(**{KEYS.gpu: f"bus-99 {UUID}"}),
        KEYS.gpu,
        f"bus-99 {UUID}",
        id="gpu-field-not-a-pci-address",
    ),
    pytest.param(
        guarded(**{KEYS.gpu: f"{PCI}  {UUID}"}),
        KEYS.gpu,
        f"{PCI}  {UUID}",
        id="gpu-field-two-spaces",
    ),
    pytest.param(
        guarded(**{KEYS.gpu_capacity: "8x"}),
        KEYS.gpu_capacity,
        "8x",
        id="capacity-annotation-not-a-number",
    ),
    pytest.param(
        guarded(**{KEYS.gpu_capacity: "٨"}),
        KEYS.gpu_capacity,
        "٨",
        id="capacity-annotation-non-ascii-digit",
    ),
    pytest.param(
        {"extra": {KEYS.cancelled: "alice said so"}},
        KEYS.cancelled,
        "alice said so",
        id="cancel-record-garbage",
    ),
    pytest.param(
        {"extra": {KEYS.cancelled: f"boot-1 {UUID} xid-79 9999-12-31T23:59:59-23:59"}},
        KEYS.cancelled,
        f"boot-1 {UUID} xid-79 9999-12-31T23:59:59-23:59",
        id="cancel-record-time-overflows",
    ),
    pytest.param(
        {"extra": {KEYS.returned: "yesterday job/gng-lt-x"}},
        KEYS.returned,
        "yesterday job/gng-lt-x",
        id="return-record-bad-time",
    ),
    pytest.param(
        {"patch": {"status": {"capacity": {"nvidia.com/gpu": "eight"}}}},
        "status.capacity[nvidia.com/gpu]",
        "'eight'",
        id="status-capacity-not-a-number",
    ),
    pytest.param(
        {"patch": {"status": {"allocatable": {"nvidia.com/gpu": "7.5"}}}},
        "status.allocatable[nvidia.com/gpu]",
        "'7.5'",
        id="status-allocatable-fraction",
    ),
    pytest.param(
        {"patch": {"spec": {"unschedulable": "yes"}}},
        "spec.unschedulable",
        "'yes'",
        id="unschedulable-not-a-boolean",
    ),
    pytest.param(
        {"patch": {"status": {"conditions": "Ready"}}},
        "status.conditions",
        "'Ready'",
        id="conditions-not-a-list",
    ),
    pytest.param(
        {"patch": {"status": {"nodeInfo": {"bootID": 42}}}},
        "status.nodeInfo.bootID",
        "42",
        id="boot-id-not-text",
    ),
    # `$` matches before a final newline: every parser matches the whole value.
    *(
        pytest.param(*row, id=f"trailing-newline-{row[1].removeprefix(KEYS.prefix)}")
        for row in [
            (guarded(**{KEYS.reason: "xid-79\n"}), KEYS.reason, "xid-79\n"),
            (guarded(**{KEYS.at: f"{CORDON_AT}\n"}), KEYS.at, f"{CORDON_AT}\n"),
            (guarded(**{KEYS.gpu_capacity: "8\n"}), KEYS.gpu_capacity, "8\n"),
            (guarded(**{KEYS.gpu: f"{PCI} {UUID}\n"}), KEYS.gpu, f"{PCI} {UUID}\n"),
            (
                {"extra": {KEYS.cancelled: f"boot-1 {UUID} xid-79 {CORDON_AT}\n"}},
                KEYS.cancelled,
                f"boot-1 {UUID} xid-79 {CORDON_AT}\n",
            ),
            (
                {"extra": {KEYS.returned: f"{CORDON_AT} job/gng-lt-x\n"}},
                KEYS.returned,
                f"{CORDON_AT} job/gng-lt-x\n",
            ),
            (
                {"extra": {KEYS.checked_boot: f"boot-1 {CORDON_AT} job/gng-cf-x\n"}},
                KEYS.checked_boot,
                f"boot-1 {CORDON_AT} job/gng-cf-x\n",
            ),
            (
                {"extra": {KEYS.pcie_links: "0000:18:00.0=16GT/s,x16\n"}},
                KEYS.pcie_links,
                "0000:18:00.0=16GT/s,x16\n",
            ),
            (
                {"extra": {KEYS.conformance_failed: f"{CORDON_AT} job/gng-cf-x ipvs-loaded\n"}},
                KEYS.conformance_failed,
                f"{CORDON_AT} job/gng-cf-x ipvs-loaded\n",
            ),
            (
                {"extra": {KEYS.onboarding_failed: f"{CORDON_AT} job/gng-cf-x ipvs-loaded\n"}},
                KEYS.onboarding_failed,
                f"{CORDON_AT} job/gng-cf-x ipvs-loaded\n",
            ),
        ]
    ),
    pytest.param(
        guarded(**{KEYS.reason: "nvml-mismatch\n"}),
        KEYS.reason,
        "nvml-mismatch\n",
        id="trailing-newline-reason-word",
    ),
    pytest.param(
        guarded(**{KEYS.gpu: f"{PCI} {UUID}\n"}),
        KEYS.gpu,
        f"{PCI} {UUID}\n",
        id="trailing-newline-uuid",
    ),
    pytest.param(
        {"patch": {"status": {"capacity": {"nvidia.com/gpu": "8\n"}}}},
        "status.capacity[nvidia.com/gpu]",
        "'8\\n'",
        id="trailing-newline-status-capacity",
    ),
]


@pytest.mark.parametrize(("bad", "where", "value"), CASES)
def test_unreadable_node_is_skipped_and_its_faulted_neighbour_cordoned(bad, where, value):
    snap = snapshot(
        node("bad", **bad),
        node("b"),
        # `bad` is a candidate too, and would go first (held longer, name after `b` only by tie)
        candidates=(gpu("b", 79), gpu("bad", 79)),
        held={"bad": 900, "b": 120},
        ledger={},
    )
    actions = plan_cycle(snap, settings(), TEMPLATES)
    assert brief(actions) == [
        ("skip", "bad", "unreadable"),
        *xid_cordon("b", 79),
        ("event", "bad", "unreadable"),  # after the cordon: bounded, never ahead of it
    ]
    skip, event = actions[0], actions[-1]
    assert isinstance(skip, Skip) and isinstance(event, EmitEvent)
    assert skip.level == "WARN"
    assert skip.detail.startswith(f"{where}={value!r}: ")
    assert (event.event_type, event.event_reason) == ("Warning", "GuardUnreadable")


def test_unreadable_line_names_node_key_value_and_the_fix():
    bad = node("gpu-7", **guarded(**{KEYS.at: "9999-12-31T23:59:59-23:59"}))
    skip, event = plan_cycle(snapshot(bad, ledger={}), settings(), TEMPLATES)
    fix = (
        f"write an RFC 3339 time such as 2026-09-21T05:55:00Z (kubectl annotate node gpu-7 "
        f"{KEYS.at}=… --overwrite), or remove it ({KEYS.at}-); the guard leaves this node alone "
        "until then"
    )
    assert skip == Skip(
        "gpu-7",
        "unreadable",
        f"{KEYS.at}='9999-12-31T23:59:59-23:59': time out of range (years 1970-9998)",
        fix,
        "WARN",
    )
    assert str(skip) == (
        f"skip node=gpu-7 reason=unreadable detail=\"{KEYS.at}='9999-12-31T23:59:59-23:59': "
        f'time out of range (years 1970-9998)" '
        f'next="{fix} (https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#unreadable-annotations)"'
    )
    assert event == EmitEvent(
        "gpu-7",
        "unreadable",
        "Warning",
        "GuardUnreadable",
        f"gpu-node-guard cannot read {KEYS.at}='9999-12-31T23:59:59-23:59' (time out of range "
        f"(years 1970-9998)) and leaves this node alone: {fix}",
    )


def test_several_bad_values_on_one_node_are_still_one_line():
    bad = node("bad", **guarded(**{KEYS.at: "soon", KEYS.gpu_capacity: "many"}))
    actions = plan_cycle(snapshot(bad, ledger={}), settings(), TEMPLATES)
    assert brief(actions) == [("skip", "bad", "unreadable"), ("event", "bad", "unreadable")]
    assert actions[0].detail.count("; ") == 1
    assert "(and 1 more)" in actions[1].message


def test_an_unreadable_guarded_node_still_counts_for_the_breaker():
    bad = node("bad", **guarded(**{KEYS.at: "soon"}))
    snap = snapshot(bad, node("b"), candidates=(gpu("b", 79),), ledger={})
    actions = plan_cycle(snap, settings(breaker_max_nodes=1), TEMPLATES)
    assert ("skip", "b", "breaker-open") in brief(actions)


def test_a_readable_node_has_no_unreadable_line():
    snap = snapshot(node("b", cordoned=True, guarded_xid=79, boot="boot-1"))
    assert "unreadable" not in {a.reason for a in plan_cycle(snap, settings(), TEMPLATES)}


INCIDENT = f"{CORDON_AT} xid-79 {PCI} {UUID} gpu-node-guard"


@pytest.mark.parametrize(
    ("text", "level", "first"),
    [
        pytest.param(
            f"{INCIDENT}\n0001-01-01T00:00:00+01:00 xid-79 {PCI} {UUID} manual\n",
            "WARN",
            "0001-01-01T00:00:00+01:00",
            id="incident-with-overflowing-time",
        ),
        pytest.param(
            f"{INCIDENT}\n2026-09-10T13:03:59Z xid-² {PCI} {UUID} manual\n",
            "WARN",
            "xid-²",
            id="incident-with-superscript-xid",
        ),
        pytest.param(
            f"{INCIDENT}\npower cycled by infra 9/15\n", "INFO", "power cycled", id="hand-note"
        ),
    ],
)
def test_unreadable_ledger_lines_are_reported_once_per_cycle(text, level, first):
    snap = snapshot(node("b", cordoned=True, guarded_xid=79, boot="boot-2"), ledger={"b": text})
    actions = plan_cycle(snap, settings(), TEMPLATES)
    reports = [a for a in actions if a.reason == "ledger-unreadable"]
    assert len(reports) == 1
    (report,) = reports
    assert (report.node, report.level) == ("b", level)
    assert report.detail.startswith("1 line(s) of configmap/gpu-fault-ledger not counted, first")
    assert first in report.detail
    # and the line is not counted: one incident, so no repeat-fault hold
    assert ("create-job", "b", "conditions-met") in brief(actions)


def test_an_object_without_a_name_is_reported_not_fatal():
    snap = replace(snapshot(node("b"), candidates=(gpu("b", 79),)), ignored=("Node without name",))
    actions = plan_cycle(snap, settings(), TEMPLATES)
    assert actions[0] == Skip(
        "",
        "object-unreadable",
        "Node without name",
        "fix or remove it in the snapshot file",
        "WARN",
    )
    assert brief(actions[1:]) == xid_cordon("b", 79)


def test_unreadable_nodes_events_are_bounded_per_cycle_and_new_ones_go_first():
    from guard.model import GuardEvent
    from guard.plan.unreadable import EVENTS_PER_CYCLE, unreadable_events

    bad = [node(f"bad-{i:02}", extra={KEYS.cancelled: "alice said so"}) for i in range(25)]
    old = tuple(GuardEvent(f"bad-0{i}.gng-x", f"bad-0{i}", "GuardUnreadable", 3) for i in range(3))
    snap = replace(snapshot(*bad, node("b"), candidates=(gpu("b", 79),), ledger={}), events=old)
    actions = plan_cycle(snap, settings(), TEMPLATES)
    events = [a for a in actions if isinstance(a, EmitEvent) and a.reason == "unreadable"]
    assert len(events) == EVENTS_PER_CYCLE == 20
    assert [e.node for e in events[:2]] == ["bad-03", "bad-04"]  # no Event yet: first
    cordon = next(i for i, a in enumerate(actions) if a.reason == "xid-79")
    assert actions.index(events[0]) > cordon
    (later,) = [a for a in actions if a.reason == "unreadable-events-later"]
    assert isinstance(later, Skip) and later.level == "INFO"
    assert later.detail.startswith("5 more unreadable nodes get no GuardUnreadable Event")
    assert "first not written: bad-23" in later.detail  # then bad-24, and the 3 that have one
    assert len([a for a in actions if a.reason == "unreadable" and isinstance(a, Skip)]) == 25
    assert unreadable_events(snapshot(node("b"))) == ()


# ---- a series Prometheus sent that was refused at the boundary (guard.read.prom_view) ----------


def prom_refused(*problems: PromUnreadable, nodes: tuple[NodeInfo, ...] = ()) -> Snapshot:
    snap = snapshot(*nodes)
    view = replace(snap.prom, unreadable=problems)
    marked = tuple(with_prom_unreadable(n, view) for n in snap.nodes)
    return replace(snap, nodes=marked, prom=view)


FORGED = PromUnreadable("bad", "hardware-xid", "UUID", "GPU-1\nforged line", "not a GPU UUID")


def test_a_refused_series_is_one_warn_line_and_an_event_without_its_value():
    """Issue 38: a node left alone for a refused series is not only a log line; the Event names
    where, never the value (it came from outside)."""
    plan = plan_cycle(
        prom_refused(FORGED, nodes=(node("bad"), node("good"))), settings(), TEMPLATES
    )
    skip, event = [a for a in plan if a.node == "bad"]
    assert isinstance(skip, Skip) and (skip.reason, skip.level) == ("unreadable", "WARN")
    assert skip.detail == "prometheus hardware-xid UUID='GPU-1\\nforged line': not a GPU UUID"
    assert "\n" not in str(skip)
    assert isinstance(event, EmitEvent) and event.event_type == "Warning"
    assert event.message.startswith(
        "gpu-node-guard cannot read the series prometheus hardware-xid UUID (refused: its value"
    )
    assert "forged" not in event.message and "GPU-1" not in event.message


def test_beside_an_unreadable_annotation_the_event_names_only_the_annotation():
    bad = node("bad", **guarded(**{KEYS.at: "2026-13-45T99:00:00Z"}))
    plan = plan_cycle(prom_refused(FORGED, nodes=(bad,)), settings(), TEMPLATES)
    skips = [a for a in plan if isinstance(a, Skip) and a.reason == "unreadable"]
    events = [a for a in plan if isinstance(a, EmitEvent) and a.reason == "unreadable"]
    assert len(skips) == 1 and "prometheus hardware-xid UUID=" in skips[0].detail
    assert len(events) == 1 and "forged" not in events[0].message


def test_a_refused_series_of_no_known_node_is_reported_by_its_name():
    far = PromUnreadable("gpu-9", "cordoned", "value", "NaN", "not a finite number")
    nameless = PromUnreadable("", "xid-hosts", "Hostname", "a b", "not a Node name")
    plan = plan_cycle(prom_refused(far, nameless), settings(), TEMPLATES)
    assert [(a.node, a.reason, a.level) for a in plan if isinstance(a, Skip)] == [
        ("", "unreadable", "WARN"),
        ("gpu-9", "unreadable", "WARN"),
    ]


def test_the_snapshot_with_refused_series_survives_json():
    snap = prom_refused(FORGED, nodes=(node("bad"),))
    assert round_trips(snap)
