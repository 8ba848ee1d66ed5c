"""The node signals in both planners: a held driver/NVML mismatch cordons (isolation), and a node
returns only with its agent's match and its kube-proxy and CNI pods Ready (return)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from guard.actions import ClearGuardAnnotations, Cordon, CreateJob, EmitEvent, Skip
from guard.generate.policies import argv
from guard.model import AgentCheck, GuardEvent, ServicePod, Snapshot
from guard.plan import plan_cycle
from guard.plan.isolation import plan_isolation
from guard.plan.returning import plan_return
from guard.runbook import Section
from guard.states import STATES
from guard.status.derive import report
from guard.status.model import Sight
from guard.status.render import render
from tests.argv_layouts import matches
from tests.builders import (
    CORDON_AT,
    KEYS,
    NOW,
    TEMPLATES,
    Signals,
    brief,
    gpu,
    network_pods,
    node,
    passed_job,
    rewritten_event,
    settings,
    snapshot,
    xid_cordon,
)

SEEN = "module 580.126.09 != NVML 580.159.03 (/usr/lib/x86_64-linux-gnu)"
FAIL = AgentCheck("b", "FAIL", SEEN)
PASS = AgentCheck("b", "PASS", "module 580.159.03 == NVML 580.159.03 (/usr/lib/x86_64-linux-gnu)")
CORDON_NVML = [("cordon", "b", "nvml-mismatch"), ("event", "b", "nvml-mismatch")]


def mismatched(*nodes, held=None, agent=(FAIL,), **kw) -> Snapshot:
    """`held`: {node: seconds} of the mismatches held past the window (the view's candidates)."""
    return snapshot(*nodes, signals=Signals(nvml=held or {"b": 660}, agent=agent), **kw)


def guarded(n: int):
    return tuple(node(f"g{i}", cordoned=True, guarded_xid=79) for i in range(n))


# ---- isolation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("snap", "changes", "expected"),
    [
        pytest.param(mismatched(node("b")), {}, CORDON_NVML, id="mismatch-held-cordons"),
        pytest.param(
            snapshot(node("b"), signals=Signals(agent=(FAIL,))),
            {},
            [],
            id="mismatch-not-yet-held-no-cordon",
        ),
        pytest.param(mismatched(node("b")), {"nvml_mismatch_cordon": False}, [], id="cordon-off"),
        pytest.param(
            mismatched(node("b", cordoned=True)),
            {},
            [("skip", "b", "already-cordoned")],
            id="cordoned-meanwhile-skipped",
        ),
        pytest.param(
            mismatched(node("b", hold="driver rollout")), {}, [("skip", "b", "hold")], id="hold"
        ),
        pytest.param(mismatched(), {}, [("skip", "b", "not-in-api")], id="unknown-node-skipped"),
        pytest.param(
            mismatched(node("b", patch={"status": {"capacity": {"nvidia.com/gpu": "lots"}}})),
            {},
            [],
            id="unreadable-node-left-to-the-unreadable-check",
        ),
        pytest.param(
            mismatched(node("b", extra={KEYS.cancelled: f"boot-1 - nvml-mismatch {CORDON_AT}"})),
            {},
            [("skip", "b", "cancelled")],
            id="person-cancelled-this-boot-sticks",
        ),
        pytest.param(
            mismatched(
                node(
                    "b",
                    boot="boot-2",
                    extra={KEYS.cancelled: f"boot-1 - nvml-mismatch {CORDON_AT}"},
                )
            ),
            {},
            CORDON_NVML,
            id="new-boot-re-arms-after-a-cancel",
        ),
        pytest.param(
            mismatched(node("b", extra={KEYS.cancelled: f"boot-1 GPU-1 xid-79 {CORDON_AT}"})),
            {},
            CORDON_NVML,
            id="a-cancelled-xid-is-another-incident",
        ),
        pytest.param(
            mismatched(node("a"), node("b"), held={"a": 700, "b": 3000}, agent=()),
            {},
            [*CORDON_NVML, ("skip", "a", "one-per-cycle")],
            id="longest-held-mismatch-first",
        ),
        pytest.param(
            mismatched(node("a"), node("b"), candidates=(gpu("a", 48),), held={"b": 3000}),
            {},
            [
                *xid_cordon("a", 48),
                ("skip", "b", "one-per-cycle"),
            ],
            id="hardware-xid-before-any-mismatch",
        ),
        pytest.param(
            mismatched(node("b"), candidates=(gpu("b", 79),), held={"b": 3000}),
            {},
            xid_cordon("b", 79),
            id="xid-and-mismatch-on-one-node-is-the-xid-cordon",
        ),
        pytest.param(
            mismatched(*guarded(5), node("b")),
            {},
            [("skip", "b", "breaker-open"), ("event", "b", "breaker-open")],
            id="breaker-respected",
        ),
        pytest.param(
            mismatched(*guarded(4), node("b")), {}, CORDON_NVML, id="below-the-breaker-cordons"
        ),
    ],
)
def test_isolation_of_a_held_mismatch(snap, changes, expected):
    assert brief(plan_isolation(snap, settings(**changes), TEMPLATES)) == expected


def test_mismatch_cordon_writes_what_why_and_next():
    cordon, event = plan_isolation(mismatched(node("b", rv="7")), settings(), TEMPLATES)
    nxt = (
        "let its GPU jobs end, reboot it into the installed driver; it returns after the load test"
    )
    assert cordon == Cordon(
        "b",
        "nvml-mismatch",
        "7",
        (
            (KEYS.reason, "nvml-mismatch"),
            (KEYS.at, "2026-09-21T05:55:00Z"),
            (KEYS.boot_id, "boot-1"),
            (KEYS.gpu_capacity, "8"),
        ),
        "",
        660,
        nxt,
        (),
        SEEN,
    )
    assert str(cordon) == (
        f'cordon node=b reason=nvml-mismatch detail="{SEEN}" held_s=660 next="{nxt}"'
    )
    assert event == EmitEvent(
        "b",
        "nvml-mismatch",
        "Warning",
        "GuardCordoned",
        f"cordoned by gpu-node-guard: the NVIDIA kernel module and the NVML library differ ({SEEN})"
        f" for 660s, so new CUDA and NVML processes fail here; {nxt}",
        incident="2026-09-21T05:55:00Z",
    )


def test_mismatch_cordon_parses_back_as_a_cordon_without_a_gpu():
    """The annotations the cordon writes are a readable cordon record (guard/codec/records.py)."""
    (cordon, _) = plan_isolation(mismatched(node("b")), settings(), TEMPLATES)
    later = node("b", cordoned=True, extra=dict(cordon.annotations))
    assert not later.unreadable
    assert later.cordon is not None
    assert (later.cordon.reason, later.cordon.xid, later.cordon.gpu) == (
        "nvml-mismatch",
        None,
        None,
    )
    assert later.cordon.boot_id == "boot-1" and later.cordon.gpu_capacity == 8


def test_breaker_names_the_mismatch_that_waits():
    actions = plan_isolation(mismatched(*guarded(5), node("b")), settings(), TEMPLATES)
    skip = next(a for a in actions if isinstance(a, Skip))
    assert skip.detail == (
        "5 isolations (nodes cordoned + devices tainted), limit 5; nvml-mismatch waits"
    )
    assert skip.level == "WARN"


def test_a_mismatch_waiting_behind_an_xid_says_so():
    snap = mismatched(node("a"), node("b"), candidates=(gpu("a", 48),), held={"b": 3000})
    skip = plan_isolation(snap, settings(), TEMPLATES)[-1]
    assert skip == Skip(
        "b",
        "one-per-cycle",
        "nvml-mismatch waits behind a",
        "cordoned in this cycle if the API refuses the cordon of a (fallback 1)",
    )


@pytest.mark.parametrize(
    ("minutes_later", "kept", "rewritten"),
    [
        pytest.param(10, False, True, id="lost-event-written-again-under-its-name"),
        pytest.param(10, True, False, id="event-there-nothing"),
        pytest.param(55, False, False, id="too-old-it-may-have-expired"),
    ],
)
def test_a_lost_mismatch_cordon_event_is_written_again(minutes_later, kept, rewritten):
    """The Event the cordon wrote is missing from the next cycle's snapshot: the return check
    writes it again under the same name (the API server keeps Events 1 h)."""
    cordon, event = plan_isolation(mismatched(node("b")), settings(), TEMPLATES)
    assert isinstance(cordon, Cordon) and isinstance(event, EmitEvent)
    n = node("b", cordoned=True, extra=dict(cordon.annotations))
    events = (GuardEvent(event.name, "b", "GuardCordoned", 1),) if kept else ()
    later = replace(returning(n), now=NOW + timedelta(minutes=minutes_later), events=events)
    again = rewritten_event(plan_return(later, settings(), TEMPLATES), event, rewritten)
    if again:
        assert again.message == (
            "cordoned by gpu-node-guard at 2026-09-21T05:55:00Z: the NVIDIA kernel module and "
            "the NVML library differ, so new CUDA and NVML processes fail here; let its GPU jobs "
            "end, reboot it into the installed driver; it returns after the load test (Event "
            "written late: its first write failed)"
        )


# ---- return ---------------------------------------------------------------------------------


def nvml_cordoned(boot: str = "boot-2", **kw):
    """A node the guard cordoned for nvml-mismatch in boot-1."""
    notes = {
        KEYS.reason: "nvml-mismatch",
        KEYS.at: CORDON_AT,
        KEYS.boot_id: "boot-1",
        KEYS.gpu_capacity: "8",
    }
    return node("b", cordoned=True, boot=boot, extra=notes, **kw)


def xid_back():
    return node("b", cordoned=True, guarded_xid=79, boot="boot-2", cordon_boot="boot-1")


def returning(*nodes, agent=(), pods=None, seen=None, **kw) -> Snapshot:
    signals = Signals(agent=agent, service_pods=pods, seen=seen)
    return snapshot(*nodes, signals=signals, **kw)


LOADTEST = [("create-job", "b", "conditions-met")]


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            returning(nvml_cordoned(boot="boot-1"), agent=(FAIL,)),
            [("skip", "b", "same-boot"), ("event", "b", "same-boot")],
            id="mismatch-cordon-waits-for-a-reboot",
        ),
        pytest.param(
            returning(nvml_cordoned(), agent=(PASS,)), LOADTEST, id="new-boot-agent-pass-load-test"
        ),
        pytest.param(
            returning(nvml_cordoned(), agent=(AgentCheck("b", "WARN", "x"),)),
            LOADTEST,
            id="agent-warn-is-ok",
        ),
        pytest.param(
            returning(nvml_cordoned()),
            [("skip", "b", "nvml-unconfirmed")],
            id="agent-series-absent-is-not-ok",
        ),
        pytest.param(
            returning(nvml_cordoned(), agent=(AgentCheck("b", "UNKNOWN", "unreadable"),)),
            [("skip", "b", "nvml-unconfirmed")],
            id="agent-unknown-is-not-ok",
        ),
        pytest.param(
            returning(nvml_cordoned(), agent=(AgentCheck("b", "PASS", "x"), FAIL)),
            [("skip", "b", "nvml-mismatch")],
            id="any-failing-agent-series-blocks",
        ),
        pytest.param(
            returning(nvml_cordoned(), agent=(FAIL,)),
            [("skip", "b", "nvml-mismatch")],
            id="rebooted-into-a-mismatch-again",
        ),
        pytest.param(
            returning(xid_back(), agent=(FAIL,)),
            [("skip", "b", "nvml-mismatch")],
            id="no-node-returns-on-a-mismatched-driver",
        ),
        pytest.param(returning(xid_back()), LOADTEST, id="xid-cordon-needs-no-agent"),
        pytest.param(
            returning(nvml_cordoned(), agent=(PASS,), pods=network_pods("b", kube_proxy=False)),
            [("skip", "b", "service-network-not-ready")],
            id="kube-proxy-not-ready-blocks-the-load-test",
        ),
        pytest.param(
            returning(
                xid_back(),
                pods=network_pods("b", cni=False),
                seen=(("cni", 40), ("kube-proxy", 40)),
            ),
            [("skip", "b", "service-network-not-ready")],
            id="cni-not-ready-blocks-the-load-test",
        ),
        pytest.param(
            returning(xid_back(), pods=(), seen=(("cni", 40), ("kube-proxy", 40))),
            [("skip", "b", "service-network-not-ready")],
            id="no-pod-on-the-node-while-the-cluster-runs-them",
        ),
        pytest.param(
            returning(xid_back(), pods=(), seen=()),
            [("skip", "", "service-network-not-applicable"), *LOADTEST],
            id="no-selected-pods-at-all-not-applied",
        ),
        pytest.param(
            returning(
                xid_back(),
                pods=(network_pods("b")[1],),
                seen=(("cni", 40),),
            ),
            [("skip", "", "service-network-not-applicable"), *LOADTEST],
            id="cilium-without-kube-proxy-checks-only-the-cni",
        ),
        pytest.param(
            returning(
                node("b", cordoned=True, guarded_xid=79, boot="boot-2"),
                pods=network_pods("b", cni=False),
            ),
            [("skip", "b", "service-network-not-ready")],
            id="service-network-after-the-other-conditions",
        ),
    ],
)
def test_return_with_the_node_signals(snap, expected):
    assert brief(plan_return(snap, settings(), TEMPLATES)) == expected


def test_a_not_ready_pod_is_named_with_its_state():
    snap = returning(xid_back(), pods=network_pods("b", kube_proxy=False))
    (skip,) = plan_return(snap, settings(), TEMPLATES)
    assert skip == Skip(
        "b",
        "service-network-not-ready",
        "kube-proxy pod kube-system/kube-proxy-b not Ready",
        "kubectl -n kube-system describe pod kube-proxy-b; the load test waits until the node's"
        " service network is Ready",
    )


def test_a_missing_pod_names_the_selector_and_the_cluster_count():
    snap = returning(xid_back(), pods=network_pods("b")[:1], seen=(("cni", 40), ("kube-proxy", 41)))
    (skip,) = plan_return(snap, settings(), TEMPLATES)
    assert skip.detail == "no cni pod on the node (40 in the cluster)"
    assert skip.next.startswith("kubectl get pods -A -o wide --field-selector spec.nodeName=b;")


def test_selectors_that_match_nothing_are_said_once_per_cycle_not_per_node():
    nodes = [node(n, cordoned=True, guarded_xid=79, boot="boot-2") for n in ("a", "b", "c")]
    snap = returning(*nodes, pods=(), seen=())
    lines = [a for a in plan_cycle(snap, settings(), TEMPLATES) if isinstance(a, Skip)]
    assert [(a.node, a.reason) for a in lines] == [("", "service-network-not-applicable")]
    assert lines[0].detail == (
        'no pod in the cluster matches kube-proxy {namespace="kube-system", pod=~"kube-proxy-.+"};'
        ' cni {created_by_kind="DaemonSet", created_by_name=~"rke2-canal|canal|calico-node|cilium"}'
        " (kube_pod_info): the return check goes on without it"
    )
    assert lines[0].level == "INFO"


def test_no_line_about_the_service_network_without_a_node_to_return():
    snap = returning(node("b"), pods=(), seen=())
    # boot_check off: the unchecked boot of b would start its after-reboot conformance Job.
    assert plan_cycle(snap, settings(boot_check=False), TEMPLATES) == ()


def test_agent_failure_detail_and_next_step_on_return():
    (skip,) = plan_return(returning(nvml_cordoned(), agent=(FAIL,)), settings(), TEMPLATES)
    assert (skip.detail, skip.level) == (f"node agent: nvidia-match FAIL ({SEEN})", "WARN")
    assert skip.next == "reboot it into the installed driver; no load test while they differ"
    (skip,) = plan_return(returning(nvml_cordoned()), settings(), TEMPLATES)
    assert skip.detail == (
        "node agent: no nvidia-match series; an nvml-mismatch cordon returns once the agent"
        " reports PASS"
    )
    assert "--field-selector spec.nodeName=b" in skip.next and "gpu-node-guard-jobs" in skip.next


def test_mismatch_cordon_returns_after_the_load_test_passed():
    snap = returning(nvml_cordoned(), agent=(PASS,))
    (job,) = plan_return(snap, settings(), TEMPLATES)
    assert isinstance(job, CreateJob)
    # no Xid: the plain load test, which the loadtest-job policy's first layout admits
    command = job.manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--xid" not in command
    assert matches(argv.loadtest(), command, "b")
    done = returning(nvml_cordoned(), agent=(PASS,), jobs=(passed_job(job.name),))
    assert brief(plan_return(done, settings(), TEMPLATES)) == [
        ("uncordon", "b", "loadtest-passed"),
        ("event", "b", "returned"),
    ]


def test_a_persons_uncordon_of_a_mismatch_cordon_sticks_for_the_boot():
    notes = {KEYS.reason: "nvml-mismatch", KEYS.at: CORDON_AT, KEYS.boot_id: "boot-1"}
    snap = returning(node("b", boot="boot-1", extra=notes))
    clear, event = plan_return(snap, settings(), TEMPLATES)
    assert clear == ClearGuardAnnotations(
        "b",
        "human-uncordon",
        "100",
        (KEYS.reason, KEYS.at, KEYS.boot_id),
        ((KEYS.cancelled, "boot-1 - nvml-mismatch 2026-09-21T05:55:00Z"),),
    )
    assert event.message.endswith("it will not cordon it again for nvml-mismatch in this boot")
    # the record reads back and stops the next cycle's cordon in the same boot
    later = node("b", boot="boot-1", extra=dict(clear.annotations))
    assert later.cancelled is not None and later.cancelled.reason == "nvml-mismatch"
    assert brief(plan_isolation(mismatched(later), settings(), TEMPLATES)) == [
        ("skip", "b", "cancelled")
    ]


def test_service_pod_states_are_per_selector():
    pods = (
        ServicePod("kube-proxy", "kube-system", "kube-proxy-b", "b", True),
        ServicePod("cni", "calico-system", "calico-node-x1", "b", True),
        ServicePod("cni", "calico-system", "calico-node-x2", "b", False),  # a second CNI pod
    )
    (skip,) = plan_return(returning(xid_back(), pods=pods), settings(), TEMPLATES)
    assert skip.detail == "cni pod calico-system/calico-node-x2 not Ready"


AT = "2026-09-21T05:10:00Z"


@pytest.mark.parametrize(
    ("value", "reads"),
    [
        pytest.param(
            f"boot-1 - nvml-mismatch {AT}",
            ("boot-1", "", None, "nvml-mismatch"),
            id="cordon-without-a-gpu",
        ),
        pytest.param(
            f"unknown - nvml-mismatch {AT}", ("", "", None, "nvml-mismatch"), id="no-boot-known"
        ),
        pytest.param(
            f"boot-1 GPU-1 xid-79 {AT}", ("boot-1", "GPU-1", 79, "xid-79"), id="xid-form-unchanged"
        ),
        pytest.param(f"boot-1 GPU-1 nvml-mismatch {AT}", None, id="reason-word-needs-no-gpu"),
        pytest.param(f"boot-1 - xid-7x {AT}", None, id="bad-xid-is-no-reason-word"),
        pytest.param(f"boot-1 - Not_A_Word {AT}", None, id="bad-reason-word"),
    ],
)
def test_cancelled_values_read_back(value, reads):
    n = node("b", extra={KEYS.cancelled: value})
    if reads is None:
        assert n.unreadable and n.unreadable[0].where == KEYS.cancelled
        assert "or <bootID> - <reason> <time>" in n.unreadable[0].fix
    else:
        c = n.cancelled
        assert c is not None and (c.boot_id, c.uuid, c.xid, c.reason) == reads


# ---- what `gpu-node-guard status` shows (guard.states) --------------------------------------


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            returning(nvml_cordoned(), agent=(FAIL,)),
            ("isolated-for-a-driver-mismatch", "nvml-mismatch", "nvml-mismatch"),
            id="rebooted-still-mismatched",
        ),
        pytest.param(
            returning(nvml_cordoned()),
            ("isolated-for-a-driver-mismatch", "nvml-mismatch", "nvml-unconfirmed"),
            id="waiting-for-the-agent",
        ),
        pytest.param(
            returning(xid_back(), pods=network_pods("b", kube_proxy=False)),
            ("waiting-for-the-service-network", "xid-79", "service-network-not-ready"),
            id="kube-proxy-not-ready",
        ),
        pytest.param(
            returning(node("b", extra={KEYS.cancelled: f"boot-1 - nvml-mismatch {AT}"})),
            ("cancelled-by-a-person", "nvml-mismatch", "-"),
            id="a-cancelled-mismatch-names-no-gpu",
        ),
    ],
)
def test_status_states_of_the_node_signals(snap, expected):
    (row,) = report(snap, settings(), TEMPLATES, Sight("http://prom.test:9090")).nodes
    assert (row.state, row.reason, row.blocked.condition if row.blocked else "-") == expected
    assert (
        row.runbook
        == f"https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#{expected[0]}"
    )
    if expected[0] == "cancelled-by-a-person":
        assert row.gpu is None and row.next == "re-arms on a new boot"


def candidates(snap: Snapshot, **changes):
    r = report(snap, settings(**changes), TEMPLATES, Sight("http://prom.test:9090"))
    assert r.candidates is not None
    return [
        (c.node, c.reason, c.xid, c.pci, c.held_s, c.needs_s, c.decision, c.detail)
        for c in r.candidates
    ]


def test_status_lists_a_held_mismatch_with_the_isolation_checks_word_and_the_agents_detail():
    behind_breaker = mismatched(*guarded(5), node("b"))
    assert candidates(behind_breaker) == [
        ("b", "nvml-mismatch", None, None, 660, 600, "breaker-open", SEEN)
    ]
    assert STATES["breaker-open"] is Section.BREAKER_OPEN
    behind_xid = snapshot(
        node("a"),
        node("b"),
        candidates=(gpu("a", 79, index=0),),
        held={"a": 300},
        loss={"a": 300},
        signals=Signals(nvml={"b": 660}, agent=(FAIL,)),
    )
    assert candidates(behind_xid) == [
        ("a", "xid-79", 79, "0000:99:00.0", 300, 120, "cordon", None),
        ("b", "nvml-mismatch", None, None, 660, 600, "one-per-cycle", SEEN),
    ]
    assert candidates(mismatched(node("b"))) == [
        ("b", "nvml-mismatch", None, None, 660, 600, "cordon", SEEN)
    ]
    assert candidates(mismatched(node("b")), nvml_mismatch_cordon=False) == []


def test_status_lists_a_mismatch_not_held_yet_as_pending():
    snap = snapshot(node("b"), signals=Signals(failing={"b": 120}, agent=(FAIL,)))
    assert candidates(snap) == [("b", "nvml-mismatch", None, None, 120, 600, "pending", SEEN)]


def test_status_text_and_json_of_a_mismatch_candidate():
    r = report(
        mismatched(*guarded(5), node("b")), settings(), TEMPLATES, Sight("http://prom.test:9090")
    )
    lines = render(r).splitlines()
    assert lines[1:3] == [
        "pending candidates: 0, 1 held long enough",
        "  b  nvml-mismatch  -  mismatch held 660 of 600 s  "
        "held: breaker-open; module 580.126.09 != NVML 580.159.03 (/usr/lib/…",
    ]
    assert f"held: breaker-open; {SEEN}" in render(r, wide=True)
    assert r.to_json()["candidates"] == [
        {
            "node": "b",
            "reason": "nvml-mismatch",
            "xid": None,
            "gpu": None,
            "pci": None,
            "uuid": None,
            "held_s": 660,
            "needs_s": 600,
            "decision": "breaker-open",
            "decides_at": None,
            "detail": SEEN,
        }
    ]
