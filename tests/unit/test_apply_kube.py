"""KubeExecutor over HTTP failures a real API server will not give on demand (`responses`).

Real behaviour (409 on a changed node, admission, Events, the ledger under concurrency) is tested
against a real kube-apiserver in tests/apiserver/. Here: 500s, resets, timeouts, garbage, and the
blast radius of one refused write, on plans made by the real planners.
"""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import replace
from typing import Any

import pytest
import requests
import responses

from guard.actions import Action, Cordon, Uncordon
from guard.apply import KubeExecutor
from guard.apply.outcome import tally
from guard.doors.kube import Kube
from guard.doors.retry import FORBIDDEN_GRACE_S, Backoff
from guard.jobs import job_name, spec_digest
from guard.log import Log
from guard.model import NodeInfo
from guard.plan import plan_cycle
from guard.plan.return_jobs import job_key
from tests.builders import KEYS, NOW, TEMPLATES, gpu, node, passed_job, settings, snapshot

API = "https://api.test"
NODES = f"{API}/api/v1/nodes"
JOBS = f"{API}/apis/batch/v1/namespaces/gpu-node-guard-jobs/jobs"  # the jobs namespace
CMS = f"{API}/api/v1/namespaces/gpu-node-guard/configmaps"
EVENTS = f"{API}/apis/events.k8s.io/v1/namespaces/default/events"


class Clock:
    """A monotonic clock that moves only when the code sleeps; records each sleep."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def node_json(name: str, rv: str = "101", **annotations: str) -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": rv, "annotations": annotations}
    return {"kind": "Node", "metadata": meta, "spec": {"unschedulable": bool(annotations)}}


def run(actions: tuple[Action, ...], nodes: tuple[NodeInfo, ...], deadline_s: float = 30):
    clock = Clock()
    backoff = Backoff(
        clock.now + deadline_s, clock=clock.time, sleep=clock.sleep, rng=random.Random(1)
    )
    kube = Kube(requests.Session(), API, backoff)
    out = io.StringIO()
    executor = KubeExecutor(kube, Log("text", out, NOW), settings(), snapshot(*nodes), "pod-1")
    outcomes = [executor.apply(a) for a in actions]
    text = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]  # without the time
    return outcomes, text, clock, kube


def with_uid(n: NodeInfo) -> NodeInfo:
    return replace(n, uid=f"uid-{n.name}")


def cordon_plan(name: str = "a") -> tuple[tuple[Action, ...], tuple[NodeInfo, ...]]:
    nodes = (with_uid(node(name, allocatable=7)),)
    return plan_cycle(snapshot(*nodes, candidates=(gpu(name, 79),)), settings(), TEMPLATES), nodes


def fresh_writes_succeed(rsps: responses.RequestsMock) -> None:
    """Event, ledger and Job writes answered as a healthy server answers them."""
    rsps.add(
        responses.GET,
        re.compile(f"{EVENTS}/.+"),
        status=404,
        json=status(404, "NotFound", "not found"),
    )
    rsps.add(responses.POST, EVENTS, status=201, json={"metadata": {"name": "e"}})
    rsps.add(
        responses.GET,
        f"{CMS}/gpu-fault-ledger",
        status=404,
        json=status(404, "NotFound", "not found"),
    )
    rsps.add(responses.POST, CMS, status=201, json={"metadata": {"name": "gpu-fault-ledger"}})
    rsps.add(
        responses.POST,
        JOBS,
        status=201,
        json={"metadata": {"name": "j", "uid": "0b9c6d1e-0000-4000-8000-0000000000e1"}},
    )


@responses.activate
def test_500_and_a_reset_are_retried_with_backoff_until_the_cordon_lands():
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", status=500, body="etcdserver: leader changed")
    responses.add(
        responses.PATCH, f"{NODES}/a", body=requests.ConnectionError("Connection reset by peer")
    )
    responses.add(responses.PATCH, f"{NODES}/a", json=node_json("a", **{KEYS.reason: "xid-79"}))
    fresh_writes_succeed(responses.mock)
    outcomes, text, clock, _ = run(actions, nodes)
    assert [o.status for o in outcomes] == ["applied"] * 4
    assert len(clock.slept) == 2 and all(0 <= s <= 2.0 for s in clock.slept)
    assert text[0].startswith("INFO cordon node=a reason=xid-79 gpu=0000:99:00.0 ")
    assert len(text) == 4, "one line per action, none for the retries"


@responses.activate
def test_api_server_unreachable_until_the_deadline_fails_that_write_with_the_reason():
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", body=requests.ReadTimeout("read timed out"))
    outcomes, text, clock, _ = run(actions, nodes, deadline_s=5)
    assert [o.status for o in outcomes] == ["failed", "skipped", "skipped", "skipped"]
    assert clock.now - 1000.0 < 5, "never sleeps past the cycle's deadline"
    assert "no answer within" in outcomes[0].detail and "gave up after" in outcomes[0].detail
    assert text[0].startswith("ERROR write-failed node=a action=cordon reason=xid-79 error=")
    assert text[1] == (
        'WARN skip node=a reason=earlier-write-failed detail="event: cordon of this node did not '
        "land: " + outcomes[0].detail.replace('"', '\\"') + '" '
        'next="next cycle re-reads the node and plans again"'
    )


@responses.activate
def test_an_answer_that_is_not_json_fails_the_write_and_is_not_resent():
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", json=node_json("a"))
    fresh_writes_succeed(responses.mock)
    responses.replace(responses.POST, JOBS, body="<html>proxy error</html>", status=200)
    outcomes, _, _, _ = run(actions, nodes)
    assert [o.status for o in outcomes] == ["applied", "applied", "applied", "failed"]
    assert "the answer is not JSON (24 bytes: '<html>proxy error</html>')" in outcomes[3].detail
    assert [c.request.method for c in responses.calls if c.request.url.startswith(JOBS)] == ["POST"]


@responses.activate
def test_a_lost_answer_to_the_cordon_is_already_done_and_the_rest_goes_on():
    """The first PATCH landed but its answer was lost; the retry meets 409, the node holds it."""
    actions, nodes = cordon_plan()
    cordon = actions[0]
    mine = dict(cordon.annotations)  # type: ignore[union-attr]
    responses.add(
        responses.PATCH, f"{NODES}/a", body=requests.ConnectionError("Connection aborted")
    )
    responses.add(
        responses.PATCH,
        f"{NODES}/a",
        status=409,
        json=status(409, "Conflict", "the object has been modified"),
    )
    held = node_json("a", "102", **{KEYS.reason: mine[KEYS.reason], KEYS.at: mine[KEYS.at]})
    responses.add(responses.GET, f"{NODES}/a", json=held)
    responses.add(responses.PATCH, f"{NODES}/a", json=held)  # the evidence Job's record
    fresh_writes_succeed(responses.mock)
    outcomes, text, _, _ = run(actions, nodes)
    assert [o.status for o in outcomes] == ["already-done", "applied", "applied", "applied"]
    assert text[0] == (
        'INFO skip node=a reason=already-done detail="cordon: the node holds it" '
        f"next=job/{cordon.next.split('/')[1]}"  # type: ignore[union-attr]
    )


@responses.activate
def test_existing_job_is_one_already_done_line_not_a_skip_and_a_created():
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", json=node_json("a"))
    fresh_writes_succeed(responses.mock)
    exists = status(409, "AlreadyExists", 'jobs.batch "j" already exists')
    responses.replace(responses.POST, JOBS, status=409, json=exists)
    job = actions[3]
    uid = "0b9c6d1e-0000-4000-8000-0000000000e2"
    meta = {"name": job.name, "uid": uid}  # type: ignore[union-attr]
    other = {"kind": "Job", "metadata": meta, "spec": {}}  # not what the guard rendered
    responses.add(responses.GET, f"{JOBS}/{job.name}", json=other)  # type: ignore[union-attr]
    outcomes, text, _, _ = run(actions, nodes)
    assert outcomes[3].status == "already-done"
    assert [line for line in text if "job" in line.split()[1]] == []
    assert text[3] == (
        f'INFO skip node=a reason=job-exists detail="create-job: job/{job.name} exists" '  # type: ignore[union-attr]
        f'next="kubectl -n gpu-node-guard-jobs logs job/{job.name}"'  # type: ignore[union-attr]
    )


def returning_and_cordon_plan():
    """Node r passed its load test (return check); node c has Xid 79 (isolation), one cycle."""
    back = with_uid(node("r", cordoned=True, guarded_xid=79, boot="boot-2", cordon_boot="boot-1"))
    faulted = with_uid(node("c", allocatable=7))
    passed = passed_job(job_name("loadtest", "r", job_key(back)), "loadtest", "r")
    snap = snapshot(back, faulted, candidates=(gpu("c", 79),), jobs=(passed,))
    return plan_cycle(snap, settings(), TEMPLATES), (back, faulted)


@responses.activate
def test_a_refused_uncordon_skips_its_event_while_the_other_nodes_cordon_lands():
    actions, nodes = returning_and_cordon_plan()
    assert [(type(a).__name__, a.node) for a in actions] == [
        ("Uncordon", "r"),
        ("EmitEvent", "r"),
        ("Cordon", "c"),
        ("EmitEvent", "c"),
        ("AppendLedgerLine", "c"),
        ("CreateJob", "c"),
    ]
    refusal = "nodes \"r\" is forbidden: ValidatingAdmissionPolicy 'gpu-node-guard-hold' denied"
    responses.add(responses.PATCH, f"{NODES}/r", status=422, json=status(422, "Invalid", refusal))
    responses.add(responses.PATCH, f"{NODES}/c", json=node_json("c", **{KEYS.reason: "xid-79"}))
    fresh_writes_succeed(responses.mock)
    outcomes, text, _, _ = run(actions, nodes)
    assert [o.status for o in outcomes] == [
        "failed",
        "skipped",
        "applied",
        "applied",
        "applied",
        "applied",
    ]
    quoted = refusal.replace('"', '\\"')
    assert text[0] == (
        "ERROR write-failed node=r action=uncordon reason=loadtest-passed "
        f'error="patch node r: HTTP 422 Unprocessable Entity: {quoted}" '
        'next="later writes on this node are skipped; the run exits 1; the next cycle reads '
        'the cluster again"'
    )
    counts = tally(outcomes)
    assert counts["applied"] == 4 and counts["failed"] == 1 and counts["skipped"] == 1
    assert counts["failed_uncordon"] == 1 and counts["applied_cordon"] == 1
    assert "applied_uncordon" not in counts


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        pytest.param([{"status": 503, "body": "overloaded"}] * 2, 2, id="503-twice"),
        pytest.param(
            [{"status": 429, "json": status(429, "TooManyRequests", "slow down")}], 1, id="429"
        ),
        pytest.param(
            [{"body": requests.ConnectionError("[Errno 111] Connection refused")}], 1, id="refused"
        ),
    ],
)
@responses.activate
def test_transient_answers_to_the_ledger_write_are_retried(answers, expected):
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", json=node_json("a"))
    fresh_writes_succeed(responses.mock)
    responses.remove(responses.POST, CMS)
    for answer in answers:
        responses.add(responses.POST, CMS, **answer)
    responses.add(responses.POST, CMS, status=201, json={"metadata": {"name": "gpu-fault-ledger"}})
    outcomes, _, clock, kube = run(actions, nodes)
    assert outcomes[2].status == "applied"
    assert len(clock.slept) == expected == kube.backoff.waits


@responses.activate
def test_ledger_conflicts_are_retried_after_reading_again():
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", json=node_json("a"))
    fresh_writes_succeed(responses.mock)
    ledger = {
        "metadata": {"name": "gpu-fault-ledger", "resourceVersion": "5"},
        "data": {"z": "someone else's line\n"},
    }
    responses.replace(responses.GET, f"{CMS}/gpu-fault-ledger", json=ledger)
    responses.add(
        responses.PUT,
        f"{CMS}/gpu-fault-ledger",
        status=409,
        json=status(409, "Conflict", "the object has been modified"),
    )
    responses.add(responses.PUT, f"{CMS}/gpu-fault-ledger", json=ledger)
    outcomes, _, clock, _ = run(actions, nodes)
    assert outcomes[2].status == "applied" and len(clock.slept) == 1
    puts = [json.loads(c.request.body) for c in responses.calls if c.request.method == "PUT"]
    assert len(puts) == 2
    for put in puts:  # each write is built from the ledger as read, never a stale copy
        assert put["metadata"]["resourceVersion"] == "5"
        assert put["data"]["z"] == "someone else's line\n"
        assert put["data"]["a"].endswith(
            "xid-79 0000:99:00.0 GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d gpu-node-guard\n"
        )


@responses.activate
def test_node_patches_clear_and_set_in_one_body_and_a_landed_uncordon_is_already_done():
    """The uncordon clears the guard's keys and writes its `returned` record in the same patch;
    when its answer is lost, the re-read node (record there, keys gone) means it landed."""
    record = ((f"{KEYS.prefix}returned", "2026-09-21T06:15:00Z job/gng-lt-r"),)
    uncordon = Uncordon("r", "loadtest-passed", "7", (KEYS.reason, KEYS.at), "passed", record)
    cordon = Cordon(
        "c",
        "xid-79",
        "8",
        ((KEYS.reason, "xid-79"),),
        "0000:99:00.0",
        0,
        "job/e",
        clear_keys=(f"{KEYS.prefix}returned",),
    )
    responses.add(responses.PATCH, f"{NODES}/r", body=requests.ConnectionError("reset"))
    responses.add(
        responses.PATCH,
        f"{NODES}/r",
        status=409,
        json=status(409, "Conflict", "the object has been modified"),
    )
    returned = node_json("r", "9", **dict(record))
    returned["spec"]["unschedulable"] = False
    responses.add(responses.GET, f"{NODES}/r", json=returned)
    responses.add(responses.PATCH, f"{NODES}/c", json=node_json("c"))
    outcomes, _, _, _ = run((uncordon, cordon), (with_uid(node("r")), with_uid(node("c"))))
    assert [o.status for o in outcomes] == ["already-done", "applied"]
    bodies = [json.loads(c.request.body) for c in responses.calls if c.request.method == "PATCH"]
    assert bodies[0]["metadata"]["annotations"] == {
        KEYS.reason: None,
        KEYS.at: None,
        **dict(record),
    }
    assert bodies[0]["spec"] == {"unschedulable": False}
    assert bodies[2]["metadata"]["annotations"] == {
        f"{KEYS.prefix}returned": None,
        KEYS.reason: "xid-79",
    }


@responses.activate
def test_an_unreachable_api_is_not_a_refusal():
    actions, nodes = cordon_plan()
    responses.add(responses.PATCH, f"{NODES}/a", body=requests.ReadTimeout("read timed out"))
    outcomes, _, _, _ = run(actions, nodes, deadline_s=5)
    assert (outcomes[0].status, outcomes[0].reason) == ("failed", "")


JOB_UID = "0b9c6d1e-0000-4000-8000-000000000001"


def load_test_create() -> tuple[Action, NodeInfo]:
    back = with_uid(node("r", cordoned=True, guarded_xid=79, boot="boot-2", cordon_boot="boot-1"))
    (create,) = plan_cycle(snapshot(back), settings(), TEMPLATES)
    return create, back


@responses.activate
def test_a_created_load_test_job_is_recorded_on_its_node_with_the_uid_the_api_answered():
    """What the guard made, written where the next cycle reads it: one node patch with the
    node's resourceVersion (docs/lifecycle.md, "Job results")."""
    create, back = load_test_create()
    responses.add(
        responses.POST, JOBS, status=201, json={"metadata": {"name": create.name, "uid": JOB_UID}}
    )
    responses.add(responses.PATCH, f"{NODES}/r", json=node_json("r", **{KEYS.reason: "xid-79"}))
    (outcome,), text, _, _ = run((create,), (back,))
    assert outcome.status == "applied" and JOB_UID in outcome.detail
    body = json.loads(responses.calls[1].request.body)
    value = f"{create.name} {JOB_UID} {spec_digest(create.manifest)}"
    assert body == {
        "metadata": {
            "annotations": {KEYS.loadtest_job: value},
            "resourceVersion": back.resource_version,
        }
    }
    assert f"record={KEYS.loadtest_job}" in text[0]


@responses.activate
def test_a_record_that_cannot_be_written_fails_the_run():
    """The Job exists but the guard could not record it: the next cycle names it as not the
    guard's (delete it and the guard makes its own again); this run exits 1."""
    create, back = load_test_create()
    responses.add(
        responses.POST, JOBS, status=201, json={"metadata": {"name": create.name, "uid": JOB_UID}}
    )
    responses.add(responses.PATCH, f"{NODES}/r", status=422, json=status(422, "Invalid", "denied"))
    (outcome,), _, _, _ = run((create,), (back,))
    assert outcome.status == "failed" and "its record" in outcome.detail


@pytest.mark.parametrize(
    ("same_spec", "recorded"),
    [
        pytest.param(True, True, id="the-guards-own-retried-create-is-recorded"),
        pytest.param(False, False, id="another-spec-of-that-name-is-left-unrecorded"),
    ],
)
@responses.activate
def test_a_create_answered_409_records_the_job_only_when_it_is_what_the_guard_rendered(
    same_spec, recorded
):
    create, back = load_test_create()
    responses.add(responses.POST, JOBS, status=409, json=status(409, "AlreadyExists", "exists"))
    found = json.loads(json.dumps(create.manifest))
    if not same_spec:
        found["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "1"]
    found["metadata"]["uid"] = JOB_UID
    responses.add(responses.GET, f"{JOBS}/{create.name}", json=found)
    responses.add(responses.PATCH, f"{NODES}/r", json=node_json("r", **{KEYS.reason: "xid-79"}))
    (outcome,), _, _, _ = run((create,), (back,))
    patched = [c for c in responses.calls if c.request.method == "PATCH"]
    assert bool(patched) is recorded
    assert outcome.status == "already-done"
    assert ("recorded uid" in outcome.detail) is recorded


RBAC_LOADING = (
    'nodes "a" is forbidden: User "system:serviceaccount:gpu-node-guard:gpu-node-guard" cannot'
    ' patch resource "nodes" in API group "" at the cluster scope'
)


@responses.activate
def test_a_403_while_a_restarted_api_servers_rbac_loads_is_retried_and_the_cordon_lands():
    """A restarted kube-apiserver denies every ServiceAccount until its RBAC caches fill: the
    authorizer's 403 is retried (within FORBIDDEN_GRACE_S), and the cordon lands."""
    actions, nodes = cordon_plan()
    for _ in range(3):
        responses.add(
            responses.PATCH, f"{NODES}/a", status=403, json=status(403, "Forbidden", RBAC_LOADING)
        )
    responses.add(responses.PATCH, f"{NODES}/a", json=node_json("a", **{KEYS.reason: "xid-79"}))
    fresh_writes_succeed(responses.mock)
    outcomes, _, clock, kube = run(actions, nodes)
    assert [o.status for o in outcomes] == ["applied"] * 4
    assert len(clock.slept) == 3 and kube.codes["403"] == 3


@responses.activate
def test_a_403_that_lasts_is_final_after_the_grace_window_not_the_cycles_deadline():
    actions, nodes = cordon_plan()
    responses.add(
        responses.PATCH, f"{NODES}/a", status=403, json=status(403, "Forbidden", RBAC_LOADING)
    )
    outcomes, _, clock, _ = run(actions, nodes, deadline_s=120)
    assert (outcomes[0].status, outcomes[0].reason) == ("failed", "refused")
    assert "cannot patch resource" in outcomes[0].detail
    assert len(clock.slept) > 1 and sum(clock.slept) <= FORBIDDEN_GRACE_S


@responses.activate
def test_a_403_from_an_admission_webhook_is_final_at_once():
    actions, nodes = cordon_plan()
    denied = 'admission webhook "site.example.com" denied the request: node is protected'
    responses.add(responses.PATCH, f"{NODES}/a", status=403, json=status(403, "Forbidden", denied))
    outcomes, _, clock, _ = run(actions, nodes)
    assert (outcomes[0].status, outcomes[0].reason) == ("failed", "refused")
    assert clock.slept == []
