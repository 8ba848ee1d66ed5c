"""Isolation planner: candidates + API snapshot → at most one cordon, with reasons for the rest."""

from __future__ import annotations

from dataclasses import replace

import pytest

from guard.actions import AppendLedgerLine, Cordon, CreateJob, EmitEvent, Skip
from guard.plan.isolation import breaker_limit, by_node, plan_isolation
from tests.builders import (
    CORDON_AT,
    KEYS,
    NOW,
    PCI,
    TEMPLATES,
    UUID,
    Signals,
    brief,
    gpu,
    node,
    settings,
    snapshot,
    xid_cordon,
)


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(node("b", allocatable=7), candidates=(gpu("b", 79),)),
            xid_cordon("b", 79),
            id="xid79-cordons",
        ),
        pytest.param(snapshot(node("b")), [], id="no-candidates-no-actions"),
        pytest.param(
            snapshot(candidates=(gpu("ghost", 79),)),
            [("skip", "ghost", "not-in-api")],
            id="unknown-node-skipped",
        ),
        pytest.param(
            snapshot(node("b", cordoned=True), candidates=(gpu("b", 79),)),
            [("skip", "b", "already-cordoned")],
            id="cordoned-meanwhile-skipped",
        ),
        pytest.param(
            snapshot(node("b", guarded_xid=48), candidates=(gpu("b", 79),)),
            [("skip", "b", "already-guarded")],
            id="guard-annotation-skipped",
        ),
        pytest.param(
            snapshot(node("b", hold="card swap pending"), candidates=(gpu("b", 79),)),
            [("skip", "b", "hold")],
            id="hold-skipped",
        ),
        pytest.param(
            snapshot(
                node("a"),
                node("b"),
                candidates=(gpu("a", 48), gpu("b", 79)),
                held={"a": 900, "b": 120},
            ),
            [*xid_cordon("b", 79), ("skip", "a", "one-per-cycle")],
            id="fast-path-first",
        ),
        pytest.param(
            snapshot(
                node("a"),
                node("b"),
                candidates=(gpu("a", 48), gpu("b", 48)),
                held={"a": 660, "b": 900},
            ),
            [
                *xid_cordon("b", 48),
                ("skip", "a", "one-per-cycle"),
            ],
            id="longest-held-next",
        ),
        pytest.param(
            snapshot(
                node("b"),
                node("a"),
                candidates=(gpu("b", 48), gpu("a", 48)),
                held={"a": 660, "b": 660},
            ),
            [
                *xid_cordon("a", 48),
                ("skip", "b", "one-per-cycle"),
            ],
            id="name-breaks-ties",
        ),
    ],
)
def test_isolation_plan(snap, expected):
    assert brief(plan_isolation(snap, settings(), TEMPLATES)) == expected


def test_unsorted_xids_cordon_the_right_node_once():
    """Prometheus answers in any order; a node's GPUs apart in the answer are still one node:
    one cordon, and no node waits one-per-cycle behind itself."""
    xids = (
        gpu("a", 79, index=5, uuid=OTHER_UUID, pci="0000:99:00.0"),
        gpu("b", 48),
        gpu("a", 79, index=0),
    )
    assert [g.node for g in snapshot(candidates=xids).prom.hardware_xids] == ["a", "b", "a"]
    assert list(by_node(xids)) == ["a", "b"] and len(by_node(xids)["a"]) == 2
    actions = plan_isolation(snapshot(node("a"), node("b"), candidates=xids), settings(), TEMPLATES)
    assert brief(actions) == [*xid_cordon("a", 79), ("skip", "b", "one-per-cycle")]
    (cordon,) = [a for a in actions if isinstance(a, Cordon)]
    assert cordon.gpu == PCI  # GPU 0 names the cordon: the lowest index of the node's two


def guarded(n: int):
    return tuple(node(f"g{i}", cordoned=True, guarded_xid=79) for i in range(n))


@pytest.mark.parametrize(
    ("already", "limit", "expect_cordon"),
    [
        pytest.param(4, 5, True, id="below-limit-cordons"),
        pytest.param(5, 5, False, id="at-limit-breaker-open"),
        pytest.param(6, 5, False, id="above-limit-breaker-open"),
        pytest.param(0, 1, True, id="limit-one-empty-cordons"),
    ],
)
def test_breaker(already, limit, expect_cordon):
    snap = snapshot(node("b"), *guarded(already), candidates=(gpu("b", 79),))
    actions = plan_isolation(snap, settings(breaker_max_nodes=limit), TEMPLATES)
    if expect_cordon:
        assert isinstance(actions[0], Cordon)
    else:
        assert brief(actions) == [("skip", "b", "breaker-open"), ("event", "b", "breaker-open")]
        counted = f"{already} isolations (nodes cordoned + devices tainted), limit {limit}"
        assert counted in actions[0].detail


def test_breaker_open_names_every_blocked_candidate_at_warn():
    snap = snapshot(
        node("a"),
        node("b"),
        node("c", hold="vendor"),
        *guarded(5),
        candidates=(gpu("a", 48), gpu("b", 79), gpu("c", 79)),
        held={"a": 900, "b": 120},
    )
    detail = "5 isolations (nodes cordoned + devices tainted), limit 5; xid-{} waits"
    advice = "cordon by hand if the fault is real; the breaker closes when nodes return"

    def blocked(name: str, xid: int) -> tuple[Skip, EmitEvent]:
        text = detail.format(xid)
        return (
            Skip(name, "breaker-open", text, advice, "WARN"),
            EmitEvent(
                name,
                "breaker-open",
                "Warning",
                "GuardBreakerOpen",
                f"gpu-node-guard did not cordon: {text}",
            ),
        )

    assert plan_isolation(snap, settings(), TEMPLATES) == (
        Skip("c", "hold", f"xid-79 gpu={PCI} uuid={UUID} (hold)", "nothing to do for this node"),
        *blocked("b", 79),  # fast path first, as it would be cordoned first
        *blocked("a", 48),
    )


def test_human_cordon_without_annotations_does_not_count_for_breaker():
    humans = tuple(node(f"h{i}", cordoned=True) for i in range(9))
    actions = plan_isolation(
        snapshot(node("b"), *humans, candidates=(gpu("b", 79),)), settings(), TEMPLATES
    )
    assert isinstance(actions[0], Cordon)


@pytest.mark.parametrize(
    ("gpu_nodes", "fraction", "absolute", "limit"),
    [
        pytest.param(100, 0.0, 5, 5, id="fraction-off"),
        pytest.param(100, 0.02, 5, 2, id="fraction-binds"),
        pytest.param(1000, 0.02, 5, 5, id="absolute-binds"),
        pytest.param(10, 0.05, 5, 1, id="never-below-one"),
    ],
)
def test_breaker_limit_lower_binds(gpu_nodes, fraction, absolute, limit):
    snap = snapshot(*(node(f"n{i}") for i in range(gpu_nodes)))
    assert (
        breaker_limit(snap, settings(breaker_max_nodes=absolute, breaker_max_fraction=fraction))
        == limit
    )


def test_cordon_carries_annotations_ledger_line_and_evidence_job():
    snap = snapshot(
        node("gpu-node-b", allocatable=7, boot="boot-7", rv="901877"),
        candidates=(gpu("gpu-node-b", 79),),
        held={"gpu-node-b": 120},
        ledger={"gpu-node-b": f"2026-09-10T13:03:59Z xid-79 {PCI} {UUID} manual\n"},
    )
    cordon, _event, line, job = plan_isolation(snap, settings(), TEMPLATES)
    assert isinstance(cordon, Cordon) and isinstance(line, AppendLedgerLine)
    assert isinstance(job, CreateJob)
    assert dict(cordon.annotations) == {
        KEYS.reason: "xid-79",
        KEYS.at: "2026-09-21T05:55:00Z",
        KEYS.boot_id: "boot-7",
        KEYS.gpu_capacity: "8",
        KEYS.gpu: f"{PCI} {UUID}",
    }
    assert cordon.resource_version == "901877"
    assert str(cordon) == (
        f"cordon node=gpu-node-b reason=xid-79 gpu={PCI} held_s=120 next=job/{job.name}"
    )
    assert line.line == f"2026-09-21T05:55:00Z xid-79 {PCI} {UUID} gpu-node-guard"
    pod = job.manifest["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-node-b"
    command = pod["containers"][0]["command"]
    assert command[:7] == [
        "gpu-node-guard",
        "evidence",
        "collect",
        "--node",
        "gpu-node-b",
        "--pci",
        PCI,
    ]
    # The 2nd incident of this card: the evidence program words it from the counts.
    assert command[7:] == [
        "--xid",
        "79",
        "--uuid",
        UUID,
        "--card-incidents",
        "2",
        "--slot-incidents",
        "2",
    ]
    assert job.manifest["spec"]["activeDeadlineSeconds"] > 0
    assert job.manifest["spec"]["ttlSecondsAfterFinished"] > 0


def test_third_incident_on_card_asks_for_replacement():
    history = "".join(f"2026-09-{d}T00:00:00Z xid-79 {PCI} {UUID} manual\n" for d in (10, 21))
    snap = snapshot(node("b"), candidates=(gpu("b", 79),), ledger={"b": history})
    job = plan_isolation(snap, settings(), TEMPLATES)[3]
    command = job.manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == ["--card-incidents", "3", "--slot-incidents", "3"]


def test_a_gpu_without_a_pci_address_is_cordoned_without_an_evidence_job():
    """The evidence Job's --pci is an address the policies pin: an exporter without
    pci_bus_id gets its cordon and ledger line, and one WARN instead of a Job the API refuses."""
    snap = snapshot(node("b", allocatable=7), candidates=(gpu("b", 79, pci="unknown"),))
    cordon, event, line, skip = plan_isolation(snap, settings(), TEMPLATES)
    assert isinstance(cordon, Cordon) and dict(cordon.annotations)[KEYS.gpu] == f"unknown {UUID}"
    assert isinstance(event, EmitEvent) and event.message.endswith("evidence none (no PCI address)")
    assert isinstance(line, AppendLedgerLine) and " xid-79 unknown " in line.line
    assert isinstance(skip, Skip) and (skip.reason, skip.level) == ("evidence-no-pci", "WARN")


@pytest.mark.parametrize(
    ("other", "same"),
    [
        pytest.param({"held": {"b": 900}}, True, id="held-time-is-not-the-key"),
        pytest.param({"rv": "555"}, True, id="resource-version-is-not-the-key"),
        pytest.param(
            {"ledger": {"b": f"2026-09-10T13:03:59Z xid-79 {PCI} {UUID} manual\n"}},
            True,
            id="history-is-not-the-key",
        ),
        pytest.param({"now": NOW.replace(minute=56)}, False, id="another-cordon-time-another-job"),
    ],
)
def test_evidence_job_name_depends_on_node_and_cordon_time_only(other, same):
    def job(rv: str = "100", now=NOW, **snap_kw):
        snap = replace(snapshot(node("b", rv=rv), candidates=(gpu("b", 79),), **snap_kw), now=now)
        return plan_isolation(snap, settings(), TEMPLATES)[3]

    first = job()
    assert first.name.startswith("gng-ev-b-")
    assert (job(**other).name == first.name) is same


def test_skip_lines_say_why_and_next():
    snap = snapshot(node("b", cordoned=True), candidates=(gpu("b", 79),))
    (skip,) = plan_isolation(snap, settings(), TEMPLATES)
    assert isinstance(skip, Skip)
    assert str(skip) == (
        'skip node=b reason=already-cordoned detail="xid-79 gpu=0000:99:00.0 '
        f'uuid={UUID} (already-cordoned)" next="nothing to do for this node"'
    )


def test_plan_uses_snapshot_time_not_clock():
    snap = snapshot(node("b"), candidates=(gpu("b", 79),))
    cordon = plan_isolation(snap, settings(), TEMPLATES)[0]
    assert dict(cordon.annotations)[KEYS.at] == NOW.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_node_returned_this_cycle_frees_a_breaker_slot():
    from guard.plan import plan_cycle

    full = guarded(5)
    # g0 was uncordoned by a person: the return check clears it, so 4 remain guarded.
    human = node("g0", cordoned=False, guarded_xid=79)
    snap = snapshot(node("b"), human, *full[1:], candidates=(gpu("b", 79),))
    kinds = brief(plan_cycle(snap, settings(), TEMPLATES))
    assert ("clear-annotations", "g0", "human-uncordon") in kinds
    assert ("cordon", "b", "xid-79") in kinds
    # without the release the breaker is open
    still = snapshot(
        node("b"), node("g0", cordoned=True, guarded_xid=79), *full[1:], candidates=(gpu("b", 79),)
    )
    assert ("skip", "b", "breaker-open") in brief(plan_cycle(still, settings(), TEMPLATES))


CANCEL = {KEYS.cancelled: f"boot-1 {UUID} xid-79 2026-09-21T05:10:00Z"}
OTHER_UUID = "GPU-99999999-8888-7777-6666-555555555555"


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(node("b", extra=CANCEL), candidates=(gpu("b", 79),)),
            [("skip", "b", "cancelled")],
            id="same-boot-gpu-xid-stays-cancelled",
        ),
        pytest.param(
            snapshot(node("b", boot="boot-2", extra=CANCEL), candidates=(gpu("b", 79),)),
            xid_cordon("b", 79),
            id="new-boot-re-arms",
        ),
        pytest.param(
            snapshot(node("b", extra=CANCEL), candidates=(gpu("b", 79, index=5, uuid=OTHER_UUID),)),
            xid_cordon("b", 79),
            id="another-gpu-re-arms",
        ),
        pytest.param(
            snapshot(node("b", extra=CANCEL), candidates=(gpu("b", 48),)),
            xid_cordon("b", 48),
            id="another-xid-re-arms",
        ),
        pytest.param(
            snapshot(
                node("b", extra=CANCEL),
                candidates=(gpu("b", 79), gpu("b", 48, index=6, uuid=OTHER_UUID)),
            ),
            xid_cordon("b", 48),
            id="a-second-faulted-gpu-is-cordoned-for",
        ),
        pytest.param(
            snapshot(
                node("b", boot="", extra={KEYS.cancelled: f"unknown {UUID} xid-79 {CORDON_AT}"}),
                candidates=(gpu("b", 79),),
            ),
            [("skip", "b", "cancelled")],
            id="unknown-boot-is-never-a-reboot",
        ),
    ],
)
def test_a_persons_cancel_sticks_for_the_same_incident(snap, expected):
    """No cordon, so no ledger line either, while boot, GPU and Xid are the cancelled ones."""
    assert brief(plan_isolation(snap, settings(), TEMPLATES)) == expected


def test_cancelled_skip_says_when_and_what_re_arms():
    snap = snapshot(node("b", extra=CANCEL), candidates=(gpu("b", 79),))
    assert plan_isolation(snap, settings(), TEMPLATES) == (
        Skip(
            "b",
            "cancelled",
            f"xid-79 on {UUID}: a person uncordoned this incident at 2026-09-21T05:10:00Z",
            "re-arms on a new boot, another GPU or another Xid",
        ),
    )


def test_a_new_cordon_removes_the_records_of_the_last_incident():
    records = {**CANCEL, KEYS.returned: "2026-09-01T00:00:00Z job/gng-lt-b-1"}
    snap = snapshot(node("b", boot="boot-2", extra=records), candidates=(gpu("b", 79),))
    cordon = plan_isolation(snap, settings(), TEMPLATES)[0]
    assert isinstance(cordon, Cordon)
    assert cordon.clear_keys == (KEYS.cancelled, KEYS.returned)
    assert (
        plan_isolation(snapshot(node("b"), candidates=(gpu("b", 79),)), settings(), TEMPLATES)[
            0
        ].clear_keys
        == ()
    )


# ---- candidates the API would refuse, and the fallback after a refused cordon ----------------


@pytest.mark.parametrize(
    "a",
    [
        pytest.param(node("a", gpus=0), id="capacity-0"),
        pytest.param(
            node("a", patch={"status": {"capacity": {"nvidia.com/gpu": None}}}),
            id="no-gpu-resource",
        ),
        pytest.param(node("a", patch={"status": None}), id="no-status"),
    ],
)
def test_a_node_the_api_would_not_let_the_guard_cordon_is_not_eligible(a):
    snap = snapshot(
        a, node("b"), candidates=(gpu("a", 79), gpu("b", 48)), held={"a": 900, "b": 660}
    )
    actions = plan_isolation(snap, settings(), TEMPLATES)
    assert brief(actions) == [("skip", "a", "no-gpu-resource"), *xid_cordon("b", 48)]
    skip = actions[0]
    assert isinstance(skip, Skip) and skip.level == "WARN"
    assert "status.capacity has no nvidia.com/gpu" in skip.detail
    assert "cordon by hand" in skip.next


def test_allocatable_zero_is_a_lost_gpu_not_an_ineligible_node():
    snap = snapshot(node("a", allocatable=0), candidates=(gpu("a", 79),))
    assert brief(plan_isolation(snap, settings(), TEMPLATES)) == xid_cordon("a", 79)


def test_an_nvml_mismatch_without_a_gpu_resource_is_not_eligible():
    snap = snapshot(node("a", gpus=0), signals=Signals(nvml={"a": 900}))
    assert brief(plan_isolation(snap, settings(), TEMPLATES)) == [("skip", "a", "no-gpu-resource")]


def four_candidates():
    names = ("a", "b", "c", "d")
    return snapshot(*(node(n) for n in names), candidates=tuple(gpu(n, 79) for n in names))


def test_the_waiting_candidates_name_the_fallback_order():
    skips = [
        a for a in plan_isolation(four_candidates(), settings(), TEMPLATES) if isinstance(a, Skip)
    ]
    assert [(s.node, s.next) for s in skips] == [
        ("b", "cordoned in this cycle if the API refuses the cordon of a (fallback 1)"),
        ("c", "cordoned in this cycle if the API refuses the cordon of a (fallback 2)"),
        ("d", "considered again next cycle"),
    ]


def test_a_refused_node_is_left_out_and_the_next_one_is_picked():
    actions = plan_isolation(four_candidates(), settings(), TEMPLATES, refused=frozenset("a"))
    assert brief(actions)[:4] == xid_cordon("b", 79)
    assert all(a.node != "a" for a in actions)


def test_plan_fallback_is_the_next_picks_writes_only_and_is_bounded():
    from guard.plan import plan_fallback
    from guard.plan.isolation import MAX_CORDON_TRIES

    snap, s = four_candidates(), settings()
    assert plan_fallback(snap, s, TEMPLATES, frozenset()) == ()
    assert brief(plan_fallback(snap, s, TEMPLATES, frozenset("a"))) == xid_cordon("b", 79)
    assert brief(plan_fallback(snap, s, TEMPLATES, frozenset("ab"))) == xid_cordon("c", 79)
    assert MAX_CORDON_TRIES == 3
    assert plan_fallback(snap, s, TEMPLATES, frozenset("abc")) == ()  # three cordons sent


def test_plan_fallback_respects_the_breaker():
    from guard.plan import plan_fallback

    snap = snapshot(*guarded(5), node("a"), node("b"), candidates=(gpu("a", 79), gpu("b", 79)))
    assert plan_fallback(snap, settings(breaker_max_nodes=5), TEMPLATES, frozenset("a")) == ()


class RefusingExecutor:
    """Refuses the cordon of the nodes in `refuse` (as an admission policy would), else lands."""

    def __init__(self, refuse: set[str], status: str = "failed", reason: str = "refused"):
        import io

        from guard.log import Log

        self.refuse, self.status, self.reason = refuse, status, reason
        self.log = Log("text", io.StringIO(), NOW)
        self.outcomes: list = []

    def apply(self, action):
        from guard.apply.outcome import Outcome

        if isinstance(action, Cordon) and action.node in self.refuse:
            outcome = Outcome(action, self.status, self.reason, "HTTP 422: protected")
        elif action.node in self.refuse:
            outcome = Outcome(action, "skipped", "earlier-write-failed")
        else:
            outcome = Outcome(action, "applied")
        self.outcomes.append(outcome)
        return outcome


def run_cycle_writes(executor, snap):
    """The cycle's turn (guard.run `Run.turn`) with `executor` answering as the API would."""
    from guard.doors.prom import PromClient
    from guard.plan import plan_cycle
    from tests.run_builders import dry_run

    run = dry_run(settings(), PromClient("http://127.0.0.1:9", timeout_s=1), executor.log, NOW)
    executor.outcomes = run.outcomes
    run.executor = lambda _snap: executor
    run.turn(snap, plan_cycle(snap, settings(), TEMPLATES))
    return [(o.action.node, o.status) for o in executor.outcomes if isinstance(o.action, Cordon)]


@pytest.mark.parametrize(
    ("refuse", "cordons"),
    [
        pytest.param(set(), [("a", "applied")], id="first-lands"),
        pytest.param({"a"}, [("a", "failed"), ("b", "applied")], id="one-refused"),
        pytest.param(
            {"a", "b"}, [("a", "failed"), ("b", "failed"), ("c", "applied")], id="two-refused"
        ),
        pytest.param(
            {"a", "b", "c"},
            [("a", "failed"), ("b", "failed"), ("c", "failed")],
            id="three-tries-at-most",
        ),
    ],
)
def test_a_refused_cordon_is_followed_by_the_next_candidate_once_per_try(refuse, cordons):
    executor = RefusingExecutor(refuse)
    assert run_cycle_writes(executor, four_candidates()) == cordons
    lines = [x for x in executor.log.stream.getvalue().splitlines() if "cordon-fallback" in x]
    assert len(lines) == len(cordons) - 1
    for attempt, (line, (node_name, _)) in enumerate(zip(lines, cordons[1:], strict=True), 2):
        assert f" WARN cordon-fallback node={node_name} " in line
        assert f"attempt={attempt} tries=3" in line


def test_a_cordon_not_refused_but_failed_otherwise_is_not_followed():
    executor = RefusingExecutor({"a"}, reason="")  # unreachable until the deadline
    assert run_cycle_writes(executor, four_candidates()) == [("a", "failed")]
