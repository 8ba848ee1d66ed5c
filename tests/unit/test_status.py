"""`gpu-node-guard status` over planner-style scenarios: every state, by the planners."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from guard.model import GpuPod, JobInfo, Snapshot
from guard.plan.returning import plan_return
from guard.runbook import PUBLISHED_URL
from guard.states import NODE_STATES
from guard.status.derive import report
from guard.status.model import Blocked, Gpu, NodeRow, Report, Sight
from guard.status.render import render
from tests.builders import (
    CORDON_AT,
    KEYS,
    LEDGER_LINE,
    NOW,
    PCI,
    TEMPLATES,
    UUID,
    back_node,
    gpu,
    node,
    passed_job,
    return_job,
    settings,
    snapshot,
)

SEEN = Sight("http://prom.test:9090")


def card(n: int) -> str:
    return f"GPU-{n:08d}-0000-0000-0000-000000000000"


def first_incidents(*nodes) -> dict[str, str]:
    """One guard ledger line per guard-cordoned node, for its own card."""
    return {
        n.name: f"{CORDON_AT} {n.cordon.reason} {PCI} {n.cordon.gpu.uuid} gpu-node-guard\n"
        for n in nodes
        if n.cordon is not None
    }


LT = return_job(snapshot(back_node()))
CF = return_job(snapshot(back_node()), "conformance", return_conformance=True)


def states(snap: Snapshot, sight: Sight = SEEN, **changes: object) -> list[tuple[str, str, str]]:
    """(node, state, blocking condition or "-") of each row."""
    rows = report(snap, settings(**changes), TEMPLATES, sight).nodes
    return [(r.node, r.state, r.blocked.condition if r.blocked else "-") for r in rows]


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(back_node(boot="boot-1")),
            [("b", "isolated-waiting-for-power-cycle", "same-boot")],
            id="same-boot-waits-for-the-power-cycle",
        ),
        pytest.param(
            snapshot(back_node(guarded_xid=48, boot="boot-1")),
            [("b", "waiting-for-reset-done", "waiting-reset")],
            id="reset-class-xid-waits-for-reset-done",
        ),
        pytest.param(
            snapshot(back_node(cordon_boot=None)),
            [("b", "waiting-for-reset-done", "boot-unknown")],
            id="no-recorded-boot-id-waits-for-reset-done",
        ),
        pytest.param(
            snapshot(back_node(ready=False)),
            [("b", "return-condition-not-met", "not-ready")],
            id="rebooted-but-not-ready",
        ),
        pytest.param(
            snapshot(back_node(allocatable=7)),
            [("b", "return-condition-not-met", "gpu-count")],
            id="rebooted-but-a-gpu-is-missing",
        ),
        pytest.param(
            snapshot(back_node(), hardware=(gpu("b", 79),)),
            [("b", "return-condition-not-met", "xid-present")],
            id="rebooted-but-the-xid-is-still-there",
        ),
        pytest.param(
            snapshot(back_node(), pods=(GpuPod("research", "train-0", "b", 1),)),
            [("b", "return-condition-not-met", "gpu-pods-running")],
            id="rebooted-but-a-pod-holds-a-gpu",
        ),
        pytest.param(
            snapshot(back_node()),
            [("b", "load-test-running", "-")],
            id="conditions-met-test-starts",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(JobInfo(LT, "loadtest", "b", "running"),)),
            [("b", "load-test-running", "loadtest-running")],
            id="load-test-running",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(passed_job(LT),)),
            [("b", "load-test-running", "-")],
            id="load-test-passed-returns-next-cycle",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(JobInfo(LT, "loadtest", "b", "failed"),)),
            [("b", "load-test-failed", "loadtest-failed")],
            id="load-test-failed-first-seen",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(passed_job(LT),), own=False),
            [("b", "job-not-made-by-the-guard", "loadtest-foreign")],
            id="load-test-job-not-made-by-the-guard",
        ),
        pytest.param(
            snapshot(back_node(), jobs=(replace(passed_job(LT), result=None),)),
            [("b", "job-result-unreadable", "loadtest-unreadable")],
            id="load-test-succeeded-without-its-pods-pass",
        ),
        pytest.param(
            snapshot(
                back_node(extra={KEYS.loadtest_result: f"failed job/{LT} at 2026-09-21T05:00:00Z"}),
                jobs=(JobInfo(LT, "loadtest", "b", "failed"),),
            ),
            [("b", "load-test-failed", "loadtest-failed")],
            id="load-test-failed-recorded",
        ),
        pytest.param(
            snapshot(back_node(hold="RMA 4711")),
            [("b", "held-by-a-person", "hold")],
            id="guard-cordoned-and-held-by-a-person",
        ),
        pytest.param(
            snapshot(back_node(), ledger={"b": LEDGER_LINE * 2}),
            [("b", "repeat-fault-hold", "repeat-fault")],
            id="second-incident-of-the-card-the-guard-sets-hold",
        ),
        pytest.param(
            snapshot(back_node(hold=f"repeat fault: {UUID} 2 incidents, last {CORDON_AT}")),
            [("b", "repeat-fault-hold", "repeat-fault-hold")],
            id="the-guards-own-hold",
        ),
        pytest.param(
            snapshot(back_node(cordoned=False)),
            [("b", "cancelled-by-a-person", "human-uncordon")],
            id="uncordoned-by-a-person-before-the-guard-noticed",
        ),
        pytest.param(
            snapshot(
                node("b", extra={KEYS.cancelled: f"boot-1 {UUID} xid-79 2026-09-21T05:10:00Z"})
            ),
            [("b", "cancelled-by-a-person", "-")],
            id="cancel-in-force-in-the-same-boot",
        ),
        pytest.param(
            snapshot(
                node(
                    "b",
                    boot="boot-2",
                    extra={KEYS.cancelled: f"boot-1 {UUID} xid-79 2026-09-21T05:10:00Z"},
                )
            ),
            [],
            id="cancel-after-a-reboot-is-history",
        ),
        pytest.param(
            snapshot(node("b", extra={KEYS.returned: "2026-09-21T05:40:00Z job/gng-lt-b-1"})),
            [("b", "returned-in-the-last-24-h", "-")],
            id="returned-15-minutes-ago",
        ),
        pytest.param(
            snapshot(node("b", extra={KEYS.returned: "2026-09-20T05:54:59Z job/gng-lt-b-1"})),
            [],
            id="returned-over-24-h-ago-is-history",
        ),
        pytest.param(
            snapshot(back_node(extra={KEYS.at: "9999-12-31T23:59:59-23:59"}), ledger={}),
            [("b", "unreadable-annotations", "unreadable")],
            id="unreadable-cordon-time",
        ),
        pytest.param(
            snapshot(node("b", hold="waiting for the vendor")),
            [("b", "held-by-a-person", "hold")],
            id="held-by-a-person-without-a-guard-cordon",
        ),
        pytest.param(snapshot(node("b")), [], id="healthy-node-no-row"),
        pytest.param(
            snapshot(node("b", cordoned=True)), [], id="cordoned-by-a-person-is-not-the-guards"
        ),
    ],
)
def test_every_state_from_the_planners_decision(snap, expected):
    assert states(snap) == expected


def test_a_job_the_guard_did_not_make_shows_its_next_step():
    (row,) = report(
        snapshot(back_node(), jobs=(passed_job(LT),), own=False), settings(), TEMPLATES, SEEN
    ).nodes
    assert (row.state, row.runbook) == (
        "job-not-made-by-the-guard",
        f"{PUBLISHED_URL}#job-not-made-by-the-guard",
    )
    assert f"kubectl -n gpu-node-guard-jobs delete job {LT}" in row.next


def test_a_load_test_waiting_for_the_evidence_job_has_its_runbook_state():
    """`evidence-running` is a node state of its own, linked, and pushed under that name."""
    name = "gng-ev-b-142b6f18"  # the evidence Job of b's cordon, written out
    snap = snapshot(back_node(), jobs=(JobInfo(name, "evidence", "b", "running"),))
    (row,) = report(snap, settings(evidence_deadline_s=3000), TEMPLATES, SEEN).nodes
    state = "waiting-for-the-evidence-job"
    assert (row.state, row.runbook) == (state, f"{PUBLISHED_URL}#{state}")
    assert row.blocked is not None and row.blocked.condition == "evidence-running"
    assert row.state in {s.value for s in NODE_STATES}


def test_a_decision_without_a_runbook_section_is_shown_verbatim():
    snap = snapshot(back_node(), jobs=(JobInfo(CF, "conformance", "b", "running"),))
    (row,) = report(snap, settings(return_conformance=True), TEMPLATES, SEEN).nodes
    assert (row.state, row.runbook) == ("conformance-running", "")
    assert row.blocked == Blocked("conformance-running", f"job/{CF}")
    assert row.next == "checked again next cycle"


def test_a_row_says_reason_since_gpu_incidents_blocking_value_and_next_step():
    ledger = {"b": LEDGER_LINE, "c": f"2026-08-01T00:00:00Z xid-48 0000:11:00.0 {UUID} manual\n"}
    (row,) = report(
        snapshot(back_node(boot="boot-1"), ledger=ledger), settings(), TEMPLATES, SEEN
    ).nodes
    assert row == NodeRow(
        node="b",
        state="isolated-waiting-for-power-cycle",
        runbook="https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#isolated-waiting-for-power-cycle",
        reason="xid-79",
        since=NOW.replace(minute=0),
        gpu=Gpu(PCI, UUID),
        card_incidents=2,  # the card moved: its earlier incident was on node c
        slot_incidents=1,
        blocked=Blocked("same-boot", "bootID boot-1 unchanged since cordon"),
        next="waiting for the power cycle",
    )


def test_without_prometheus_a_node_past_the_api_conditions_says_what_was_not_seen():
    running = (JobInfo(LT, "loadtest", "b", "running"),)
    nodes = (back_node(), back_node("c", boot="boot-1", card=card(3)))
    snap = snapshot(*nodes, jobs=running, ledger=first_incidents(*nodes))
    rows = {r.node: r for r in report(snap, settings(), TEMPLATES, Sight()).nodes}
    assert rows["b"].state == "load-test-running"
    assert rows["b"].blocked is not None and rows["b"].blocked.condition == "not-seen"
    assert rows["c"].blocked == Blocked("same-boot", "bootID boot-1 unchanged since cordon")


def test_breaker_and_candidates_above_the_table():
    snap = snapshot(
        back_node("g1", boot="boot-1"),
        node("p"),
        node("q"),
        candidates=(gpu("q", 79),),
        hardware=(gpu("p", 48, index=2), gpu("q", 79)),
        held={"q": 300},
        loss={"p": 360, "q": 300},
    )
    r = report(snap, settings(breaker_max_nodes=2), TEMPLATES, SEEN)
    assert (r.breaker.guarded, r.breaker.limit, r.breaker.open, r.breaker.headroom) == (
        1,
        2,
        False,
        1,
    )
    assert r.candidates is not None
    assert [(c.node, c.xid, c.held_s, c.needs_s, c.decision) for c in r.candidates] == [
        ("p", 48, 360, 600, "pending"),
        ("q", 79, 300, 120, "cordon"),
    ]
    full = report(snap, settings(breaker_max_nodes=1), TEMPLATES, SEEN)
    assert full.breaker.open
    assert [c.decision for c in full.candidates or ()] == ["pending", "breaker-open"]
    assert report(snap, settings(), TEMPLATES, Sight()).candidates is None


def test_every_runbook_link_is_the_sites() -> None:
    """GUARD_RUNBOOK_BASE_URL: the rows' links, the breaker line and a next step taken from a
    log line (the boot record's) all link the site's runbook; none the published one."""
    site = "https://wiki.site.test/gpu/runbook"
    snap = snapshot(
        back_node("g1", boot="boot-1"),
        node("q"),
        candidates=(gpu("q", 79),),
        hardware=(gpu("q", 79),),
        held={"q": 300},
        loss={"q": 300},
    )
    r = report(snap, settings(breaker_max_nodes=1, runbook_base_url=site), TEMPLATES, SEEN)
    text = render(r, wide=True)
    assert (
        "breaker: OPEN, 1 of 1 isolations (nodes cordoned + devices tainted): no new isolations"
        f" ({site}#breaker-open)" in text
    )
    assert [n.runbook for n in r.nodes] == [f"{site}#isolated-waiting-for-power-cycle"]
    assert "github.com" not in text


def sample_report() -> Report:
    guarded = (
        back_node("gpu-node-a", boot="boot-1"),
        back_node("gpu-node-b", guarded_xid=48, boot="boot-1", card=card(2)),
        back_node("gpu-node-c", allocatable=7, card=card(3)),
    )
    ledger = first_incidents(*guarded)
    ledger["gpu-node-e"] = f"2026-09-21T04:00:00Z xid-79 0000:3b:00.0 {card(5)} gpu-node-guard\n"
    snap = snapshot(
        *guarded,
        node("gpu-node-d"),
        node("gpu-node-e", extra={KEYS.returned: "2026-09-21T05:40:00Z job/gng-lt-gpu-node-e-1"}),
        hardware=(gpu("gpu-node-d", 48, index=2),),
        loss={"gpu-node-d": 360},
        ledger=ledger,
    )
    return report(snap, settings(), TEMPLATES, SEEN)


def test_the_text_table():
    assert render(sample_report()) == (
        "breaker: closed, 3 of 5 isolations (nodes cordoned + devices tainted)"
        " (2 more isolations allowed)\n"
        "pending candidates: 1\n"
        f"  gpu-node-d  xid-48  {PCI}  loss held 360 of 600 s  pending, decides at"
        " 2026-09-21T05:59:00Z\n"
        "\n"
        "NODE        STATE                             REASON  SINCE  GPU           CARD  SLOT  "
        "BLOCKED BY                                        NEXT\n"
        f"gpu-node-a  isolated-waiting-for-power-cycle  xid-79  55m    {PCI}  1     1     "
        "same-boot: bootID boot-1 unchanged since cordon   waiting for the power cycle\n"
        f"gpu-node-b  waiting-for-reset-done            xid-48  55m    {PCI}  1     1     "
        "waiting-reset: xid-48 is reset-class; no gpu-no…  after the GPU reset or power cycle, "
        "annotate gp…\n"
        f"gpu-node-c  return-condition-not-met          xid-79  55m    {PCI}  1     1     "
        "gpu-count: capacity=8 recorded=8 allocatable=7    checked again next cycle\n"
        "gpu-node-e  returned-in-the-last-24-h         xid-79  15m    0000:3b:00.0  1     1     "
        "-                                                 nothing: job/gng-lt-gpu-node-e-1 "
        "passed; the no…\n"
        "STATE is a section of docs/runbook.md; -o wide shows whole texts, -o json all\n"
    )


def test_the_wide_table_cuts_nothing_and_links_the_runbook():
    text = render(sample_report(), wide=True)
    header, *_ = text.split("\n\n")[1].splitlines()
    assert header.split() == [
        "NODE",
        "STATE",
        "REASON",
        "SINCE",
        "GPU",
        "UUID",
        "CARD",
        "SLOT",
        "BLOCKED",
        "BY",
        "NEXT",
        "RUNBOOK",
    ]
    assert (
        f"{card(2)}  1     1     waiting-reset: xid-48 is reset-class; no {KEYS.reset_done}  "
        in text
    )
    assert (
        'annotate gpu-node-guard.io/reset-done="$(date -u +%FT%TZ) …"  https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#'
        in text
    )
    assert text.rstrip().endswith(
        "https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#returned-in-the-last-24-h"
    )


def test_json_is_typed_and_stable():
    doc = json.loads(json.dumps(sample_report().to_json()))
    assert list(doc) == ["at", "namespace", "prometheus", "breaker", "candidates", "nodes"]
    assert doc["at"] == "2026-09-21T05:55:00Z"
    assert doc["prometheus"] == {"url": "http://prom.test:9090", "seen": True, "error": ""}
    assert doc["breaker"] == {"guarded": 3, "limit": 5, "open": False, "headroom": 2}
    assert doc["candidates"] == [
        {
            "node": "gpu-node-d",
            "reason": "xid-48",
            "xid": 48,
            "gpu": "2",
            "pci": PCI,
            "uuid": UUID,
            "held_s": 360,
            "needs_s": 600,
            "decision": "pending",
            "decides_at": "2026-09-21T05:59:00Z",
            "detail": None,
        }
    ]
    assert doc["nodes"][0] == {
        "node": "gpu-node-a",
        "state": "isolated-waiting-for-power-cycle",
        "runbook": "https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#isolated-waiting-for-power-cycle",
        "reason": "xid-79",
        "since": CORDON_AT,
        "gpu": {"pci": PCI, "uuid": UUID},
        "incidents": {"card": 1, "slot": 1},
        "blocked_by": {
            "condition": "same-boot",
            "observed": "bootID boot-1 unchanged since cordon",
        },
        "next": "waiting for the power cycle",
    }
    returned = doc["nodes"][-1]
    assert returned["since"] == "2026-09-21T05:40:00Z"
    assert returned["gpu"] == {"pci": "0000:3b:00.0", "uuid": card(5)}  # its last incident
    assert (returned["incidents"], returned["blocked_by"]) == ({"card": 1, "slot": 1}, None)
    for row in doc["nodes"]:
        assert list(row) == [
            "node",
            "state",
            "runbook",
            "reason",
            "since",
            "gpu",
            "incidents",
            "blocked_by",
            "next",
        ]


def test_status_and_the_plan_agree_on_every_guarded_node():
    """One source of truth: the state's decision is the first thing the real plan does there."""
    snap = replace(
        snapshot(back_node("b1", boot="boot-1"), back_node("b2", allocatable=7), back_node("b3")),
        jobs=(),
    )
    plan = plan_return(snap, settings(), TEMPLATES)
    for row in report(snap, settings(), TEMPLATES, SEEN).nodes:
        first = next(a for a in plan if a.node == row.node)
        word = row.blocked.condition if row.blocked else "loadtest-starting"
        assert word in (first.reason, f"{getattr(first, 'job_kind', '')}-starting")


@pytest.mark.parametrize("wide", [False, True], ids=["text", "wide"])
def test_a_newline_in_a_guard_annotation_forges_no_row(wide: bool) -> None:
    """A value read from a Node is printed escaped: `auto-cordon-reason` holding a newline and a
    made-up row stays in its own row (one line per node, the table's lines unchanged)."""
    forged = "xid-79\ngpu-node-z  returned-in-the-last-24-h  xid-79\x1b[2J"
    sample = sample_report()
    (first, *rest) = sample.nodes
    text = render(replace(sample, nodes=(replace(first, reason=forged), *rest)), wide=wide)
    assert len(text.splitlines()) == len(render(sample, wide=wide).splitlines())
    (row,) = [line for line in text.splitlines() if line.startswith("gpu-node-a ")]
    assert "xid-79\\ngpu-node-z  returned-in-the-last-24-h  xid-79\\x1b[2J" in row
    assert "\x1b" not in text
