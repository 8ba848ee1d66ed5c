"""The push's samples: every metric of docs/metrics.md with its labels, from what the run saw."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from prometheus_client import generate_latest

from guard import metric_names as m
from guard.actions import Cordon, CreateJob, EmitEvent, Skip
from guard.apply.outcome import Outcome, RunTrace
from guard.apply.push import metrics, push, push_run, registry
from guard.doors.prom import PromClient
from guard.log import Log
from guard.model import TaintRule
from guard.settings import SettingsError
from guard.states import NODE_STATES
from tests.builders import NOW, TEMPLATES, back_node, gpu, node, settings, snapshot

S = settings(pushgateway_url="http://127.0.0.1:9")


def trace(**kw: object) -> RunTrace:
    prom = PromClient("http://prom.test")
    prom.codes.update({"200": 9})
    return RunTrace(prom, **kw)  # type: ignore[arg-type]


def test_a_run_that_saw_the_cluster_pushes_every_metric():
    snap = snapshot(
        back_node("a", boot="boot-1"),
        node("p"),
        hardware=(gpu("p", 48),),
        loss={"p": 60},
    )
    cordon = Cordon("q", "xid-79", "1", (), "0000:99:00.0", 300, "job/x")
    job = CreateJob("q", "xid-79", "evidence", "x", {"metadata": {"namespace": "j"}})
    outcomes = [
        Outcome(cordon, "applied"),
        Outcome(job, "failed", detail="403"),
        Outcome(EmitEvent("q", "xid-79", "Warning", "GuardCordoned", "m"), "already-done"),
        Outcome(Skip("a", "same-boot", "", ""), "noted"),
    ]
    seen = trace(snap=snap, templates=TEMPLATES, outcomes=outcomes, lease_taken=998.0)
    samples = metrics(S, seen, 1, 1000.5, 2.25)
    assert set(samples) == {x.name for x in m.PUSHED} - {m.LAST_SUCCESS.name, m.LEASE_HELD.name}
    assert samples[m.LEASE_TAKEN.name] == {(): 998.0}
    assert samples[m.LAST_RUN.name] == {(): 1000.5}
    assert samples[m.LAST_RUN_EXIT_CODE.name] == {(): 1.0}
    assert samples[m.LAST_RUN_DURATION.name] == {(): 2.25}
    actions = samples[m.LAST_RUN_ACTIONS.name]
    assert actions[(("type", "cordon"), ("outcome", "applied"))] == 1
    assert actions[(("type", "create-job"), ("outcome", "failed"))] == 1
    assert actions[(("type", "event"), ("outcome", "applied"))] == 0  # already done: no write
    assert len(actions) == 13 * 2  # every write type, both outcomes; a skip is no write
    nodes = samples[m.NODES.name]
    assert [dict(k)["state"] for k in nodes] == [s.value for s in NODE_STATES]
    assert nodes[(("state", "isolated-waiting-for-power-cycle"),)] == 1
    assert sum(nodes.values()) == 1
    assert samples[m.PENDING_CANDIDATES.name] == {(): 1.0}
    assert samples[m.BREAKER_LIMIT.name] == {(): 5.0}
    assert samples[m.BREAKER_ISOLATIONS.name] == {(): 1.0}
    assert samples[m.BREAKER_HEADROOM.name] == {(): 4.0}
    assert samples[m.LAST_RUN_REQUESTS.name] == {(("target", "prometheus"), ("code", "200")): 9.0}


def test_the_breaker_count_pushed_is_the_breakers_with_device_taints_and_no_cordon():
    """Issue #38, 6.1: a DRA-only cluster's isolations are device taints; the pushed count the
    breaker alert reads is the guard's own (five rules, no node cordoned)."""
    rules = tuple(
        TaintRule(f"gng-dt-{i}", f"u{i}", True, "gpu.nvidia.com", f"gone-{i}", "gpu-0", "", "", "")
        for i in range(5)
    )
    snap = replace(snapshot(node("a")), taint_rules=rules)
    samples = metrics(S, trace(snap=snap, templates=TEMPLATES), 0, 1000.0, 1.0)
    assert samples[m.BREAKER_ISOLATIONS.name] == {(): 5.0}
    assert samples[m.BREAKER_HEADROOM.name] == {(): 0.0}


def test_only_a_successful_run_pushes_the_success_time():
    samples = metrics(S, trace(snap=snapshot(node("a")), templates=TEMPLATES), 0, 1000.0, 1.0)
    assert samples[m.LAST_SUCCESS.name] == samples[m.LAST_RUN.name] == {(): 1000.0}


def test_a_run_that_aborted_before_its_snapshot_pushes_what_it_knew():
    samples = metrics(S, trace(), 1, 1000.0, 0.5)
    assert set(samples) == {
        m.LAST_RUN.name,
        m.LAST_RUN_EXIT_CODE.name,
        m.LAST_RUN_DURATION.name,
        m.LAST_RUN_ACTIONS.name,
        m.LAST_RUN_REQUESTS.name,
        m.USER_CODE_XID.name,  # settings: known before any read
        m.ALLOWED_DNS_PREFIX.name,
    }


def test_a_run_that_found_the_lease_held_pushes_when_not_when_it_was_taken():
    """Each Lease time is pushed by its runs only: the Pushgateway keeps the other's last value,
    so the two say how many runs in a row found the Lease held (GPUNodeGuardLeaseHeld)."""
    samples = metrics(S, trace(lease_held=1300.0), 0, 1301.0, 1.0)
    assert samples[m.LEASE_HELD.name] == {(): 1300.0}
    assert m.LEASE_TAKEN.name not in samples


def test_a_state_the_runbook_does_not_know_yet_is_counted_under_its_word():
    from guard.model import JobInfo
    from guard.plan.returning import plan_return

    snap = snapshot(back_node("b"))
    (make,) = plan_return(snap, settings(return_conformance=True), TEMPLATES)
    snap = snapshot(back_node("b"), jobs=(JobInfo(make.name, "conformance", "b", "running"),))
    s = settings(return_conformance=True, pushgateway_url="http://x:9091")
    nodes = metrics(s, trace(snap=snap, templates=TEMPLATES), 0, 1.0, 1.0)[m.NODES.name]
    assert nodes[(("state", "conformance-running"),)] == 1


def test_the_registry_exposes_the_names_help_and_labels():
    samples = metrics(
        S, trace(snap=snapshot(node("a")), templates=TEMPLATES), 0, NOW.timestamp(), 1
    )
    text = generate_latest(registry(samples)).decode()
    assert f"# HELP {m.LAST_SUCCESS.name} {m.LAST_SUCCESS.help}\n" in text
    assert f"# TYPE {m.NODES.name} gauge\n" in text
    assert f'{m.NODES.name}{{state="load-test-failed"}} 0.0\n' in text
    assert f'{m.LAST_RUN_ACTIONS.name}{{outcome="applied",type="uncordon"}} 0.0\n' in text


def test_a_failed_push_is_one_warn_line():
    out = io.StringIO()
    assert push(S, metrics(S, trace(), 1, 1.0, 1.0), Log("text", out, NOW)) is False
    (line,) = out.getvalue().splitlines()
    assert line.startswith("2026-09-21T05:55:00Z WARN push-failed url=http://127.0.0.1:9 reason=")
    assert "URLError" in line and "next=\"the run's exit code is unchanged" in line


@pytest.mark.parametrize(
    "url", ["pushgateway:9091", "ftp://p:9091", "http://user:secret@p:9091", "http://p :9091"]
)
def test_a_pushgateway_url_must_be_http_without_credentials(url):
    with pytest.raises(SettingsError, match="pushgateway_url"):
        settings(pushgateway_url=url)


def test_a_bug_building_the_samples_is_one_warn_line_and_leaves_the_exit_code():
    """The samples re-run the planners after the cycle; a bug there once escaped `run` as a
    traceback with exit 1 after a cycle that had exited 0."""
    broken = trace(snap=replace(snapshot(node("a")), nodes=(None,)), templates=TEMPLATES)
    with pytest.raises(AttributeError):
        metrics(S, broken, 0, 1.0, 1.0)
    out = io.StringIO()
    assert push_run(S, broken, 0, 1.0, 1.0, Log("text", out, NOW)) is False
    (line,) = out.getvalue().splitlines()
    assert line.startswith("2026-09-21T05:55:00Z WARN push-failed url=http://127.0.0.1:9 ")
    assert 'reason="the samples could not be built: AttributeError' in line


def test_the_repair_figures_of_a_run() -> None:
    """One guard cordon (Xid 79, 8 GPUs) 55 minutes old, past a half-hour power-cycle budget."""
    from guard.apply.push import repair_figures

    snap = snapshot(node("n", cordoned=True, guarded_xid=79))
    got = repair_figures(settings(budget_power_cycle_h=0.5), snap)
    hours = 55 / 60
    assert got[m.ISOLATIONS.name][(("verdict", "power-cycle"), ("unit", "node"))] == 1.0
    assert sum(got[m.ISOLATIONS.name].values()) == 1.0  # every other verdict and unit: 0
    assert got[m.ISOLATION_OLDEST_AGE.name][(("verdict", "power-cycle"),)] == 55 * 60
    assert got[m.ISOLATION_OLDEST_AGE.name][(("verdict", "reset"),)] == 0.0
    assert got[m.ISOLATIONS_PAST_BUDGET.name] == {
        (("verdict", "power-cycle"),): 1.0,
        (("verdict", "rma"),): 0.0,
        (("verdict", "reset"),): 0.0,
        (("verdict", "human"),): 0.0,
    }
    assert got[m.QUARANTINE_BUDGET.name][(("verdict", "power-cycle"),)] == 1800.0
    lost = got[m.GPU_HOURS_LOST.name]
    assert lost[(("gpus", "faulted"), ("window", "7d"))] == round(hours, 3)
    assert lost[(("gpus", "healthy"), ("window", "30d"))] == round(7 * hours, 3)
    assert got[m.INCIDENTS.name][(("window", "7d"),)] == 1.0
    assert got[m.REPEAT_CARDS.name] == {(): 0.0}
    phases = got[m.REPAIR_PHASE.name]
    assert phases[(("phase", "isolated"),)] != phases[(("phase", "isolated"),)]  # NaN: none ended
    within = repair_figures(settings(), snap)
    assert sum(within[m.ISOLATIONS_PAST_BUDGET.name].values()) == 0.0
