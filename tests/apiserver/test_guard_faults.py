"""Fault tier: the API server goes away mid-cycle, two guard runs race, a policy refuses a write.

This module runs its own etcd + kube-apiserver so it can stop and restart the API server (etcd
keeps the data), with manifests/ and policies/ applied as in the session tier. After every fault
the next cycles must finish the cordon (ledger line, cordon Event, evidence Job or a WARN saying
why not), and nothing may be written twice.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.apply import KubeExecutor
from guard.apply.outcome import Outcome
from guard.doors.kube import Kube
from guard.doors.retry import Backoff
from guard.example.promserver import LocalPrometheus, free_port, stop
from guard.log import Log
from guard.settings import Settings
from tests.apiserver.conftest import wait_for_enforcement
from tests.apiserver.deploy import BASE, Kubectl
from tests.apiserver.guard_run import (
    CYCLE,
    ISOLATE_AT,
    KEYS,
    LEDGER,
    NO_CF,
    NS,
    T0,
    cycle_in_process,
    faulted,
    guard_cordoned,
    guard_jobs,
    guard_kube,
    healthy,
    mine,
    node_events,
    outcomes,
    read_and_plan,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import (
    ADMIN_TOKEN,
    ControlPlane,
    apiserver_argv,
    etcd_argv,
    http_ok,
    required_assets,
    wait_until,
    write_kubeconfig,
    write_signing_key,
)

pytestmark = pytest.mark.apiserver

NODES = ("f-cordon", "f-ledger", "f-race-a", "f-race-b", "f-faulted")


@dataclass
class Restartable:
    """etcd and a kube-apiserver that a test may stop and start again on the same port."""

    assets: Path
    workdir: Path
    etcd_port: int
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.workdir / "kube-apiserver.log"
        argv = apiserver_argv(
            self.assets / "kube-apiserver", self.workdir, self.etcd_port, self.port
        )
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        ca = self.workdir / "certs" / "apiserver.crt"
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        ready = lambda: ca.exists() and http_ok(f"{self.url}/readyz", headers=auth, verify=str(ca))  # noqa: E731
        wait_until(ready, self.proc, log)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


@contextmanager
def restartable_plane(tmp: Path) -> Iterator[tuple[ControlPlane, Restartable]]:
    assets = required_assets()
    (tmp / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
    write_signing_key(tmp / "sa.key")
    etcd_port = free_port()
    with ExitStack() as stack, (tmp / "etcd.log").open("wb") as etcd_log:
        etcd = subprocess.Popen(
            etcd_argv(assets / "etcd", tmp / "etcd", etcd_port, free_port()),
            stdout=etcd_log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(stop, etcd)
        wait_until(lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"), etcd, tmp / "etcd.log")
        server = Restartable(assets, tmp, etcd_port)
        server.start()
        stack.callback(server.stop)
        kubeconfig = tmp / "kubeconfig-admin"
        write_kubeconfig(kubeconfig, server.url, tmp / "certs" / "apiserver.crt", ADMIN_TOKEN)
        yield (
            ControlPlane(server.url, tmp / "certs" / "apiserver.crt", kubeconfig, tmp, 0.0),
            server,
        )


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory, kubectl_binary: Path
) -> Iterator[tuple[ControlPlane, Restartable]]:
    with restartable_plane(tmp_path_factory.mktemp("faults")) as (plane, server):
        Kubectl(kubectl_binary, plane.kubeconfig).apply(BASE)
        with plane.admin_client() as admin:
            wait_for_enforcement(plane, admin)
        yield plane, server


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    nodes = (*(faulted(n) for n in NODES), healthy("f-return"))
    with scenario_prometheus(*nodes) as server:
        yield server


@pytest.fixture(scope="module")
def guard_kubeconfig(plane: tuple[ControlPlane, Restartable]) -> Path:
    return plane[0].service_account_kubeconfig(NS, "gpu-node-guard")


@pytest.fixture
def admin(plane: tuple[ControlPlane, Restartable]) -> Iterator[client.ApiClient]:
    with plane[0].admin_client() as api:
        yield api


@pytest.fixture
def gpu_node(
    plane: tuple[ControlPlane, Restartable], admin: client.ApiClient, gpu_node: Any
) -> Iterator[Any]:
    """The conftest's `gpu_node`; a test that failed while the API server was down has it started
    again before that fixture's clean-up, so the module's later tests do not fail with it."""
    yield gpu_node
    if plane[1].proc is None:
        back_up(plane, admin)


@dataclass
class DownAfter(Kube):
    """A real client that stops the API server right after one kind of write returns."""

    after: str = ""
    down: Callable[[], None] = lambda: None

    @classmethod
    def around(cls, base: Kube, after: str, down: Callable[[], None]) -> DownAfter:
        backoff = Backoff.for_seconds(3)  # the cycle's deadline: the rest fails fast
        return cls(
            base.session, base.base_url, backoff, refresh=base.refresh, after=after, down=down
        )

    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().patch_node(name, body)
        if self.after == "cordon":
            self.down()
        return answer

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().create_configmap(namespace, body)
        if self.after == "ledger":
            self.down()
        return answer


def statuses(found: list[Outcome], node: str) -> list[tuple[str, str]]:
    return [(o.type_word, o.status) for o in found if o.action.node == node]


def cordon_writes(*status: str) -> list[tuple[str, str]]:
    """The writes of one cordon in order (the cordon, its Event, its ledger line, its evidence
    Job), each with its outcome's status."""
    kinds = ("cordon", "event", "append-ledger", "create-job")
    return list(zip(kinds, status, strict=True))


def ledger_lines(admin: client.ApiClient, node: str) -> list[str]:
    cm = client.CoreV1Api(admin).read_namespaced_config_map(LEDGER, NS)
    return [line for line in (cm.data or {}).get(node, "").splitlines() if line.strip()]


def cordon_events(admin: client.ApiClient, node: str) -> list[dict[str, Any]]:
    """The guard's GuardCordoned Events about `node` (the return check adds others once the node
    is cordoned: waiting for a power cycle)."""
    return [e for e in node_events(admin, node) if e["reason"] == "GuardCordoned"]


def cycle_then_down(
    plane: tuple[ControlPlane, Restartable], prom: LocalPrometheus, kubeconfig: Path, after: str
) -> list[Outcome]:
    """One cycle in process whose API server stops right after its first `after` write returns."""
    kube = DownAfter.around(guard_kube(kubeconfig), after, plane[1].stop)
    return cycle_in_process(kube, prom, ISOLATE_AT)


def back_up(plane: tuple[ControlPlane, Restartable], admin: client.ApiClient) -> None:
    plane[1].start()
    wait_for_enforcement(plane[0], admin)


def test_api_server_gone_after_the_cordon_and_two_more_cycles_then_repaired_once(
    plane, prom, guard_kubeconfig, gpu_node, admin
):
    node = gpu_node("f-cordon")
    first = cycle_then_down(plane, prom, guard_kubeconfig, "cordon")
    assert statuses(first, node) == cordon_writes("applied", "failed", "failed", "failed")
    failed = [o.detail for o in first if o.status == "failed"]
    # The first failed write retries a refused connection until the cycle's budget is spent; a
    # later one may find it spent already (how much is left depends on the machine's load).
    assert failed and "cannot reach the API server: [Errno 111]" in failed[0]
    spent = "the cycle's deadline has passed"
    assert all("cannot reach the API server: [Errno 111]" in d or spent in d for d in failed)
    for n in (1, 2):  # two more cycles while it is down: each stops at its first read, exit 1
        down = run_guard(
            prom,
            guard_kubeconfig,
            ISOLATE_AT + n * CYCLE,
            ok=False,
            # longer than importing the Kubernetes client on a busy machine (>2 s), so the run
            # reaches its first read and says why it stopped
            env={"GUARD_CYCLE_DEADLINE_S": "5"},
        )
        assert down.rc == 1
        (abort,) = down.lines("abort")
        assert "cannot reach the API server" in abort["reason"]
    back_up(plane, admin)

    late = run_guard(prom, guard_kubeconfig, ISOLATE_AT + 3 * CYCLE)  # 15 min after the cordon
    assert mine(late.plan, node) == [
        ("append-ledger", "repair-ledger"),
        ("skip", "evidence-missing"),
        ("event", "repair-event"),
        ("skip", "same-boot"),
        ("event", "same-boot"),
        ("skip", "already-cordoned"),
    ]
    assert late.plan["counts"]["applied"] == 3  # the line, the cordon Event, the same-boot Event
    (warn,) = [w for w in late.lines("skip") if w["reason"] == "evidence-missing"]
    assert warn["level"] == "WARN" and "900s old" in warn["detail"]
    (event,) = cordon_events(admin, node)
    assert "written late" in event["note"]
    (line,) = ledger_lines(admin, node)
    assert line.startswith(ISOLATE_AT.strftime("%Y-%m-%dT%H:%M:%SZ") + " xid-79 ")
    assert guard_jobs(admin, node) == []  # too late for evidence: the WARN says so
    found = client.CoreV1Api(admin).read_node(node)
    assert found.spec.unschedulable and found.metadata.annotations[KEYS.reason] == "xid-79"

    again = run_guard(prom, guard_kubeconfig, ISOLATE_AT + 4 * CYCLE)
    assert ("event", "repair-event") not in mine(again.plan, node)
    assert len(cordon_events(admin, node)) == 1 and len(ledger_lines(admin, node)) == 1


def test_api_server_gone_after_the_ledger_write_then_the_evidence_job_is_created_once(
    plane, prom, guard_kubeconfig, gpu_node, admin
):
    node = gpu_node("f-ledger")
    first = cycle_then_down(plane, prom, guard_kubeconfig, "ledger")
    assert statuses(first, node) == cordon_writes("applied", "applied", "applied", "failed")
    back_up(plane, admin)

    repaired = run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE)
    assert mine(repaired.plan, node) == [
        ("create-job", "repair-evidence"),
        ("skip", "same-boot"),
        ("event", "same-boot"),
        ("skip", "already-cordoned"),
    ]
    assert outcomes(repaired.plan, node)[0] == ("create-job", "applied")
    (job,) = guard_jobs(admin, node)
    assert job.metadata.labels["app.kubernetes.io/component"] == "evidence"
    (event,) = cordon_events(admin, node)
    assert "series" not in event or event["series"] is None  # written once, not counted again
    assert len(ledger_lines(admin, node)) == 1
    run_guard(prom, guard_kubeconfig, ISOLATE_AT + 2 * CYCLE)
    assert len(guard_jobs(admin, node)) == 1 and len(cordon_events(admin, node)) == 1


@pytest.mark.parametrize("apart_s", [0, 1], ids=["same-instant", "one-second-apart"])
def test_two_guard_runs_at_once_cordon_one_node_with_one_job_line_and_event(
    prom, guard_kubeconfig, gpu_node, admin, apart_s
):
    a, b = gpu_node("f-race-a"), gpu_node("f-race-b")

    def argv(at: Any) -> list[str]:
        return [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            str(guard_kubeconfig),
            "--at",
            at.isoformat(),
            "--breaker-max-nodes",
            "1",
        ]

    instants = (ISOLATE_AT, ISOLATE_AT + timedelta(seconds=apart_s))
    runs = [
        subprocess.Popen(argv(at), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for at in instants
    ]
    results = [(p.wait(timeout=120), p.stderr.read().decode() if p.stderr else "") for p in runs]
    assert [rc for rc, _ in results] == [0, 0], results
    one_per_cordon(admin, (a, b))


def test_a_replay_that_writes_takes_the_slot_guard(prom, guard_kubeconfig, gpu_node, admin):
    """`run --at` without --dry-run writes like any run, so it is one cordon per cron slot like
    any run: the slot of its instant. A second replay in that slot, able to see the other held
    fault, logs `slot-isolated` and writes nothing (before: it cordoned it, with no slot guard);
    a replay in the next slot decides."""
    a, b = gpu_node("f-race-a"), gpu_node("f-race-b")
    core = client.CoreV1Api(admin)
    run_guard(prom, guard_kubeconfig, ISOLATE_AT, NO_CF)
    (first,) = [n for n in (a, b) if core.read_node(n).spec.unschedulable]
    later = ISOLATE_AT + timedelta(seconds=60)
    same = run_guard(prom, guard_kubeconfig, later, NO_CF, ok=False, keep_slot=True)
    assert same.rc == 0 and same.log[-1]["event"] == "slot-isolated", same.log
    assert same.log[-1]["slot"] == "2026-09-21T05:30:00Z" and not same.lines("cordon")
    assert [n for n in (a, b) if core.read_node(n).spec.unschedulable] == [first]
    run_guard(prom, guard_kubeconfig, ISOLATE_AT + CYCLE, NO_CF, keep_slot=True)
    assert all(core.read_node(n).spec.unschedulable for n in (a, b))


def one_per_cordon(admin: client.ApiClient, nodes: tuple[str, ...]) -> str:
    """The one node cordoned, having one evidence Job, one ledger line and one unrepeated Event."""
    core = client.CoreV1Api(admin)
    cordoned = [n for n in nodes if core.read_node(n).spec.unschedulable]
    assert len(cordoned) == 1, "the breaker (limit 1) was exceeded"
    (node,) = cordoned
    assert len(guard_jobs(admin, node)) == 1
    assert len(ledger_lines(admin, node)) == 1
    (event,) = cordon_events(admin, node)  # a run that read it cordoned adds a same-boot Event
    assert not (event.get("series") or {}).get("count"), "the second run counted the same cordon"
    return node


@pytest.mark.parametrize("apart_s", [0, 1], ids=["same-instant", "one-second-apart"])
def test_two_runs_planned_from_one_read_and_written_in_lockstep_cordon_once(
    prom, guard_kubeconfig, gpu_node, admin, apart_s
):
    """The worst interleaving, forced: both runs read before either writes, then alternate."""
    a, b = gpu_node("f-race-a"), gpu_node("f-race-b")
    s = Settings(prometheus_url=prom.url, breaker_max_nodes=1)
    executors, plans = [], []
    for at in (ISOLATE_AT, ISOLATE_AT + timedelta(seconds=apart_s)):
        kube = guard_kube(guard_kubeconfig)
        snap, plan = read_and_plan(kube, prom, at, s)
        executors.append(KubeExecutor(kube, Log("text"), s, snap, "test"))
        plans.append(plan)
    assert [type(x).__name__ for x in plans[0]] == [type(x).__name__ for x in plans[1]]
    for first, second in zip(*plans, strict=True):
        executors[0].apply(first)
        executors[1].apply(second)
    node = one_per_cordon(admin, (a, b))
    late = [(o.type_word, o.status) for o in executors[1].outcomes if o.action.node == node]
    if apart_s:  # its own cordon (another time) met ours: it backs off, and so does the rest
        assert late == cordon_writes("skipped", "skipped", "skipped", "skipped")
    else:  # the very same cordon: each of its writes finds it done
        assert {status for _, status in late} == {"already-done"}


def test_a_policy_refusing_one_nodes_write_does_not_stop_the_cordon_of_another(
    prom, guard_kubeconfig, gpu_node, admin
):
    # f-return passed the checks for its load test; the loadtest-job policy refuses the Job's image.
    returning = gpu_node(
        "f-return",
        boot="boot-2",
        allocatable=8,
        annotations=guard_cordoned(T0 - timedelta(hours=1), boot="boot-1"),
    )
    victim = gpu_node("f-faulted")
    run = run_guard(
        prom,
        guard_kubeconfig,
        ISOLATE_AT,
        NO_CF,
        ok=False,
        env={"GUARD_LOADTEST_IMAGE": "registry.invalid/loadtest:0"},
    )
    assert run.rc == 1
    (failed,) = run.lines("write-failed")
    assert (failed["node"], failed["action"], failed["level"]) == (returning, "create-job", "ERROR")
    assert "HTTP 422" in failed["error"] and "gpu-node-guard-loadtest-job" in failed["error"]
    assert outcomes(run.plan, victim) == cordon_writes("applied", "applied", "applied", "applied")
    (done,) = run.lines("done")
    assert (done["level"], done["failed"], done["failed_create_job"]) == ("ERROR", 1, 1)
    assert done["applied_cordon"] == 1
    assert client.CoreV1Api(admin).read_node(victim).spec.unschedulable is True
