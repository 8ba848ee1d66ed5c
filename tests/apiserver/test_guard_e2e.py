"""The guard end to end: a real kube-apiserver (RBAC + admission policies) and a real Prometheus.

The guard runs as its own ServiceAccount (a TokenRequest token in a kubeconfig), exactly as the
CronJob does in a cluster. Each scenario owns one node name that exists in both servers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client, watch

from guard.actions import Action, AppendLedgerLine, Cordon, CreateJob, EmitEvent
from guard.apply import KubeExecutor, PrintExecutor
from guard.apply.outcome import Outcome
from guard.doors.kube import Kube
from guard.example.promserver import LocalPrometheus
from guard.log import Log
from guard.settings import Settings
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    NO_CF,
    NS,
    RETURN_AT,
    T0,
    cycle_in_process,
    faulted,
    finish,
    guard_jobs,
    guard_kube,
    ledger_text,
    mine,
    node_events,
    read_and_plan,
    run_guard,
    scenario_prometheus,
    set_status,
)
from tests.apiserver.kube import JOBS_NS, MERGE_PATCH
from tests.scenario_build import PodTimeline

pytestmark = pytest.mark.apiserver

SCENARIO_NODES = (
    "e2e-cordon",
    "e2e-race-label",
    "e2e-race-cordon",
    "e2e-ledger",
    "e2e-return",
    "e2e-executors",
    "e2e-diverging",
    "e2e-dry-run",
    "e2e-busy",
)


# kube-state-metrics' view of e2e-busy: cordoned at its next scrape after the guard's cordon,
# and a Running training pod holding one of its GPUs when the return check looks.
BUSY_POD = PodTimeline("research", "train-0", "e2e-busy", gpus=1)
CORDONED_S = int((ISOLATE_AT - T0).total_seconds()) + 15


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    nodes = (faulted(n, ((CORDONED_S, 1),) if n == BUSY_POD.node else ()) for n in SCENARIO_NODES)
    with scenario_prometheus(*nodes, pods=(BUSY_POD,)) as server:
        yield server


def test_cycle_cordons_in_one_write_then_second_cycle_does_nothing(
    prom, guard_kubeconfig, gpu_node, core, admin
):
    node = gpu_node("e2e-cordon", boot="boot-1")
    before = core.read_node(node).metadata.resource_version
    plan = run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan
    assert mine(plan, node) == [
        ("cordon", "xid-79"),
        ("event", "xid-79"),
        ("append-ledger", "xid-79"),
        ("create-job", "xid-79"),
    ]
    counted = (
        "applied",
        "failed",
        "applied_cordon",
        "applied_event",
        "applied_append_ledger",
        "applied_create_job",
    )
    assert [plan["counts"][k] for k in counted] == [4, 0, 1, 1, 1, 1]
    changes = list(
        watch.Watch().stream(
            core.list_node,
            field_selector=f"metadata.name={node}",
            resource_version=before,
            timeout_seconds=1,
        )
    )
    modified = [c["object"] for c in changes if c["type"] == "MODIFIED"]
    # The cordon is one write; the evidence Job's record follows the Job's create, a write of
    # its own that changes nothing but that record.
    assert len(modified) == 2, "cordon and annotations must be one write, then the Job's record"
    written, recorded = modified
    assert recorded.spec.unschedulable is True
    assert {
        k: v
        for k, v in recorded.metadata.annotations.items()
        if written.metadata.annotations.get(k) != v
    } == {KEYS.evidence_job: recorded.metadata.annotations[KEYS.evidence_job]}
    assert written.spec.unschedulable is True
    notes = written.metadata.annotations
    assert notes[KEYS.reason] == "xid-79"
    assert notes[KEYS.at] == ISOLATE_AT.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert notes[KEYS.boot_id] == "boot-1"
    assert notes[KEYS.gpu_capacity] == "8"
    assert notes[KEYS.gpu].startswith("0000:58:00.0 GPU-")
    assert "xid-79 0000:58:00.0 GPU-" in ledger_text(core, node)
    (job,) = guard_jobs(admin, node)
    assert job.spec.template.spec.node_name == node
    assert job.spec.template.spec.containers[0].command[:3] == [
        "gpu-node-guard",
        "evidence",
        "collect",
    ]

    again = run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan
    assert mine(again, node) == [
        ("skip", "same-boot"),
        ("event", "same-boot"),
        ("skip", "already-cordoned"),
    ]
    assert len(guard_jobs(admin, node)) == 1
    assert ledger_text(core, node).count("\n") == 1


@dataclass
class RacingKube(Kube):
    """A real client whose first write is preceded by someone else's write to the same object."""

    race: Callable[[], None] = lambda: None
    raced: bool = False

    @classmethod
    def around(cls, base: Kube, race: Callable[[], None]) -> RacingKube:
        return cls(base.session, base.base_url, base.backoff, refresh=base.refresh, race=race)

    def _once(self) -> None:
        if not self.raced:
            self.raced = True
            self.race()

    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._once()
        return super().patch_node(name, body)

    def replace_configmap(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._once()
        return super().replace_configmap(namespace, name, body)


def one_cycle(kube: Kube, prom: LocalPrometheus, at: datetime) -> list[Any]:
    """One cycle in process; the actions whose writes landed."""
    return [o.action for o in cycle_in_process(kube, prom, at) if o.status == "applied"]


def test_cordon_racing_a_human_label_edit_keeps_the_label(prom, guard_kubeconfig, gpu_node, core):
    node = gpu_node("e2e-race-label")

    def human() -> None:
        core.patch_node(
            node, {"metadata": {"labels": {"owner": "alice"}}}, _content_type=MERGE_PATCH
        )

    kube = RacingKube.around(guard_kube(guard_kubeconfig), human)
    one_cycle(kube, prom, ISOLATE_AT)
    found = core.read_node(node)
    assert kube.raced
    assert found.metadata.labels["owner"] == "alice"
    assert found.spec.unschedulable is True
    assert found.metadata.annotations[KEYS.reason] == "xid-79"


def test_cordon_racing_a_human_cordon_backs_off(prom, guard_kubeconfig, gpu_node, core, admin):
    node = gpu_node("e2e-race-cordon")

    def human() -> None:
        core.patch_node(
            node,
            {
                "spec": {"unschedulable": True},
                "metadata": {"annotations": {"ops/why": "smoke test"}},
            },
            _content_type=MERGE_PATCH,
        )

    kube = RacingKube.around(guard_kube(guard_kubeconfig), human)
    applied = one_cycle(kube, prom, ISOLATE_AT)
    found = core.read_node(node)
    assert found.metadata.annotations == {"ops/why": "smoke test"}
    assert [a for a in applied if a.node == node] == []
    assert guard_jobs(admin, node) == []


def test_ledger_survives_a_concurrent_writer(prom, guard_kubeconfig, gpu_node, core):
    node = gpu_node("e2e-ledger")
    other = (
        "2026-09-20T00:00:00Z xid-48 0000:18:00.0 GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee manual"
    )
    core.create_namespaced_config_map(
        NS,
        {
            "metadata": {"name": "gpu-fault-ledger"},
            "data": {"gpu-node-z": "unparseable note kept\n"},
        },
    )

    def writer() -> None:
        cm = core.read_namespaced_config_map("gpu-fault-ledger", NS)
        cm.data["gpu-node-z"] += other + "\n"
        core.replace_namespaced_config_map("gpu-fault-ledger", NS, cm)

    kube = RacingKube.around(guard_kube(guard_kubeconfig), writer)
    # Only the ledger write races here: cordon first with a plain client, then the append.
    applied = one_cycle(kube, prom, ISOLATE_AT)
    assert kube.raced
    cm = core.read_namespaced_config_map("gpu-fault-ledger", NS)
    assert cm.data["gpu-node-z"] == f"unparseable note kept\n{other}\n"
    assert "gpu-node-guard" in cm.data[node]
    assert any(type(a).__name__ == "AppendLedgerLine" for a in applied)


Write = tuple[str, str]


def planned_writes(printed: list[Outcome], node: str) -> set[Write]:
    """What the dry run said it would write on `node`: the objects and guard annotations."""
    out: set[Write] = set()
    for o in printed:
        a = o.action
        if a.node != node or o.status != "would-apply":
            continue
        match a:
            case Cordon():
                out |= {("cordon", node), *(("annotation", k) for k, _ in a.annotations)}
            case CreateJob():
                out |= {("job", a.name), *(("annotation", a.record[0]),) * bool(a.record)}
            case AppendLedgerLine():
                out.add(("ledger", a.line))
            case EmitEvent():
                out.add(("event", f"{a.name} {a.event_reason}"))
            case _:
                raise AssertionError(f"no read-back for {type(a).__name__} yet")
    return out


def observed_writes(core: client.CoreV1Api, admin: client.ApiClient, node: str) -> set[Write]:
    """What the API server holds about `node` that the guard wrote, read back from it."""
    found = core.read_node(node)
    notes = found.metadata.annotations or {}
    ledger = ledger_text_or_empty(core).get(node, "")
    return {
        *((("cordon", node),) if found.spec.unschedulable else ()),
        *(("annotation", k) for k in notes if k.startswith("gpu-node-guard.io/")),
        *(("job", j.metadata.name) for j in guard_jobs(admin, node)),
        *(("ledger", line) for line in ledger.splitlines()),
        *(("event", f"{e['metadata']['name']} {e['reason']}") for e in node_events(admin, node)),
    }


def assert_writes_match(planned: set[Write], observed: set[Write]) -> None:
    assert planned == observed, (
        f"planned, not written: {sorted(planned - observed)}; "
        f"written, not planned: {sorted(observed - planned)}"
    )


class DivergingExecutor(KubeExecutor):
    """An executor that says it sent the cordon Event but sends nothing: what the comparison
    below must catch."""

    def _write(self, action: Action) -> Outcome:
        if isinstance(action, EmitEvent):
            return Outcome(action, "applied")
        return super()._write(action)


@pytest.mark.parametrize(
    ("node_name", "executor"),
    [("e2e-executors", KubeExecutor), ("e2e-diverging", DivergingExecutor)],
)
def test_the_dry_run_shows_exactly_the_writes_found_on_the_api_server(
    prom, guard_kubeconfig, gpu_node, core, admin, node_name, executor
):
    node = gpu_node(node_name)
    kube = guard_kube(guard_kubeconfig)
    s = Settings(prometheus_url=prom.url)
    snap, actions = read_and_plan(kube, prom, ISOLATE_AT, s)
    printer = PrintExecutor(Log("text"), show_manifests=False)
    for action in actions:
        printer.apply(action)
    planned = planned_writes(printer.outcomes, node)
    assert ("cordon", node) in planned and any(k == "event" for k, _ in planned)
    real = executor(kube, Log("text"), s, snap, "test")
    for action in actions:
        real.apply(action)
    observed = observed_writes(core, admin, node)
    if executor is KubeExecutor:
        assert_writes_match(planned, observed)
    else:
        with pytest.raises(AssertionError, match=r"planned, not written: \[\('event'"):
            assert_writes_match(planned, observed)


def complete(admin: client.ApiClient, name: str) -> None:
    at = "2026-09-21T06:12:00Z"
    status = {
        "startTime": "2026-09-21T06:10:00Z",
        "completionTime": at,
        "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": at},
            {"type": "Complete", "status": "True", "lastTransitionTime": at},
        ],
    }
    client.BatchV1Api(admin).patch_namespaced_job_status(
        name, JOBS_NS, {"status": status}, _content_type=MERGE_PATCH
    )


LOADTEST_PASS = json.dumps({"kind": "loadtest", "verdict": "pass", "reasons": [], "notes": []})


def test_return_cycle_load_tests_then_uncordons(
    prom, guard_kubeconfig, gpu_node, core, admin, deployed
):
    node = gpu_node("e2e-return", boot="boot-1")
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    set_status(core, node, boot="boot-2", allocatable=8)  # power cycled, all GPUs back
    # The load-test step alone; the default return conformance before it is
    # test_lifecycle_e2e.py's test_a_power_cycled_node_passes_the_conformance_…
    first = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert mine(first, node) == [("create-job", "conditions-met")]
    (loadtest,) = [
        j
        for j in guard_jobs(admin, node)
        if j.metadata.labels["app.kubernetes.io/component"] == "loadtest"
    ]
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan, node) == [
        ("skip", "loadtest-running")
    ]
    complete(admin, loadtest.metadata.name)  # succeeded, but no Pod said pass: no return
    assert mine(run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan, node) == [
        ("skip", "loadtest-unreadable")
    ]
    stored = client.BatchV1Api(admin).read_namespaced_job(
        loadtest.metadata.name, JOBS_NS, _preload_content=False
    )
    finish(deployed, admin, json.loads(stored.data), LOADTEST_PASS, ok=True, mark_job=False)
    done = run_guard(prom, guard_kubeconfig, RETURN_AT, NO_CF).plan
    assert mine(done, node) == [("uncordon", "loadtest-passed"), ("event", "returned")]
    found = core.read_node(node)
    assert not found.spec.unschedulable
    notes = {
        k: v
        for k, v in (found.metadata.annotations or {}).items()
        if k.startswith("gpu-node-guard.io/")
    }
    made = f"{loadtest.metadata.name} {loadtest.metadata.uid} "
    assert notes.pop(KEYS.loadtest_job).startswith(made)  # what the guard made, kept
    assert notes.pop(KEYS.evidence_job).startswith("gng-ev-e2e-return-")
    assert notes == {KEYS.returned: f"{RETURN_AT:%Y-%m-%dT%H:%M:%SZ} job/{loadtest.metadata.name}"}


def test_dry_run_against_the_api_writes_nothing(prom, guard_kubeconfig, gpu_node, core, admin):
    node = gpu_node("e2e-dry-run")
    before = core.read_node(node)
    plan = run_guard(prom, guard_kubeconfig, ISOLATE_AT, "--dry-run").plan
    assert plan["dry_run"] is True
    assert mine(plan, node)[0] == ("cordon", "xid-79")
    after = core.read_node(node)
    assert after.metadata.resource_version == before.metadata.resource_version
    assert guard_jobs(admin, node) == []
    names = [c.metadata.name for c in core.list_namespaced_config_map(NS).items]
    assert "gpu-fault-ledger" not in names or node not in ledger_text_or_empty(core)


def ledger_text_or_empty(core: client.CoreV1Api) -> dict[str, str]:
    return dict(core.read_namespaced_config_map("gpu-fault-ledger", NS).data or {})


def test_gpu_pod_on_the_repaired_node_blocks_the_return(prom, guard_kubeconfig, gpu_node, core):
    # The pod reaches the guard as kube-state-metrics series through Prometheus (BUSY_POD).
    node = gpu_node(BUSY_POD.node, boot="boot-1")
    assert mine(run_guard(prom, guard_kubeconfig, ISOLATE_AT).plan, node)[0] == ("cordon", "xid-79")
    set_status(core, node, boot="boot-2", allocatable=8)
    plan = run_guard(prom, guard_kubeconfig, RETURN_AT).plan
    assert mine(plan, node) == [("skip", "gpu-pods-running")]
    (skip,) = [a for a in plan["actions"] if a["node"] == node]
    assert f"{BUSY_POD.namespace}/{BUSY_POD.name}" in skip["detail"]


def test_node_list_follows_continue_tokens(monkeypatch, guard_kubeconfig, make_node):
    import guard.doors.kube

    made = {make_node() for _ in range(5)}
    monkeypatch.setattr(guard.doors.kube, "PAGE", 2)
    kube = guard_kube(guard_kubeconfig)
    names = {n["metadata"]["name"] for n in kube.nodes()}
    assert made <= names
    assert kube.requests_made == -(-len(names) // 2)  # one request per page of two
