"""The in-run watch and the cycle's Lease on a real kube-apiserver and a real Prometheus.

`run --at T --watch` watches in the replayed time (guard.watch.ReplayClock): each wait passes at
once, every query is evaluated at the instant the watch has reached, so a hold that completes
inside the run is decided then — by the same process, not by the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client

from guard.doors.lease import slot_key
from guard.example.promserver import LocalPrometheus
from guard.ledger import format_time, parse_time
from guard.metric_names import LAST_RUN, LEASE_TAKEN
from guard.names import CYCLE_LEASE
from guard.settings import Settings
from tests.apiserver.guard_run import (
    KEYS,
    NO_CF,
    NS,
    ONSET_S,
    T0,
    faulted,
    forget_guard_state,
    ledger_text,
    make_gpu_node,
    mine,
    node_events,
    run_guard,
    scenario_prometheus,
)
from tests.engines import scenario_server
from tests.scenario_build import KSM_POD, NodeTimeline, Scenario
from tests.tiers import require_engine

pytestmark = pytest.mark.apiserver

ONSET = T0 + timedelta(seconds=ONSET_S)
FAST_HOLD_S = Settings().fast_hold_window_s
SCRAPE_S = Settings().scrape_interval_s
LATE_S = 30  # w-late's Xid 79 and GPU loss begin this long after the run starts
RUN_AT = ONSET + timedelta(seconds=60)  # w-fast: 60 s of its 120 s hold have passed


def late(name: str) -> NodeTimeline:
    at = ONSET_S + 60 + LATE_S
    return NodeTimeline(name, gpus=8, xids=((at, 4, 79),), allocatable=((at, 7),))


def slow(name: str) -> NodeTimeline:
    """Xid 48 with GPU loss from ONSET: the full 10-minute hold, after the run's end."""
    return NodeTimeline(name, gpus=8, xids=((ONSET_S, 4, 48),), allocatable=((ONSET_S, 7),))


RACE = tuple(f"w-race-{i}" for i in range(2))
SLOT_KEY = slot_key(KEYS.prefix)


@pytest.fixture(scope="module")
def prom() -> Iterator[LocalPrometheus]:
    nodes = (faulted("w-fast"), late("w-late"), slow("w-slow"))
    with scenario_prometheus(*nodes) as server:
        yield server


def cordon_at(core: client.CoreV1Api, node: str) -> datetime | None:
    found = (core.read_node(node).metadata.annotations or {}).get(KEYS.at)
    return parse_time(found) if found else None


def test_a_hold_that_completes_during_the_watch_is_cordoned_in_the_same_run(
    prom, guard_kubeconfig, gpu_node, core
):
    node = gpu_node("w-fast")
    run = run_guard(prom, guard_kubeconfig, RUN_AT, NO_CF, "--watch")
    (pending,) = [line for line in run.lines("pending") if line["node"] == node]
    decides = ONSET + timedelta(seconds=FAST_HOLD_S)
    assert pending["decides_at"] == decides.strftime("%Y-%m-%dT%H:%M:%SZ")
    events = [line["event"] for line in run.log]
    assert events.index("done") < events.index("watch-start") < events.index("cordon")
    assert events.index("cordon") < events.index("watch-end")
    (cordon,) = run.lines("cordon")
    assert cordon["node"] == node and cordon["held_s"] >= FAST_HOLD_S
    # The watch woke when the hold could first have completed on the scrape grid (the cycle
    # read the minute grid), re-read the node there and waited for the instant it named.
    (wait,) = run.lines("watch-wait")
    assert (wait["node"], wait["hold"]) == (node, "waits")
    assert wait["next"] == f"decides at {pending['decides_at']}"
    (end,) = run.lines("watch-end")
    assert (end["why"], end["cordoned"], end["decisions"]) == ("cordon-landed", node, 2)
    # cordoned when the hold had passed, not before, and within one scrape of it
    at = cordon_at(core, node)
    assert at is not None and decides <= at <= decides + timedelta(seconds=SCRAPE_S)
    assert ("cordon", "xid-79") in mine(run.plan, node)  # --output json has the watch's writes


def test_without_the_watch_the_hold_waits_for_the_next_run(prom, guard_kubeconfig, gpu_node, core):
    node = gpu_node("w-fast")
    run = run_guard(prom, guard_kubeconfig, RUN_AT, NO_CF)  # --at: no watch unless asked
    assert not run.lines("watch-start") and not run.lines("cordon")
    assert cordon_at(core, node) is None


def test_a_fault_that_appears_during_the_watch_is_polled_and_cordoned(
    prom, guard_kubeconfig, gpu_node, core
):
    node = gpu_node("w-late")
    run = run_guard(prom, guard_kubeconfig, RUN_AT, NO_CF, "--watch")
    assert node not in {line["node"] for line in run.lines("pending")}  # nothing yet
    (start,) = run.lines("watch-start")
    assert start["waiting"] == 0
    at = cordon_at(core, node)
    fault = RUN_AT + timedelta(seconds=LATE_S)
    assert at is not None and at >= fault + timedelta(seconds=FAST_HOLD_S)
    (end,) = run.lines("watch-end")
    assert end["cordoned"] == node and end["polls"] >= 1


def test_a_hold_past_the_runs_end_is_left_to_the_next_run(prom, guard_kubeconfig, gpu_node, core):
    node = gpu_node("w-slow")
    run = run_guard(prom, guard_kubeconfig, RUN_AT, NO_CF, "--watch")
    (start,) = run.lines("watch-start")
    assert (start["waiting"], start["left"]) == (0, 1)
    (end,) = run.lines("watch-end")
    assert (end["why"], end["cordoned"], end["left"]) == ("deadline", "-", 1)
    assert cordon_at(core, node) is None


def lease_holder(admin: client.ApiClient) -> str:
    lease = client.CoordinationV1Api(admin).read_namespaced_lease(CYCLE_LEASE, NS)
    return str(lease.spec.holder_identity or "")


def test_a_run_releases_the_lease_and_one_that_finds_it_held_exits_0(
    prom, guard_kubeconfig, gpu_node, core, admin
):
    gpu_node("w-fast")
    run_guard(prom, guard_kubeconfig, RUN_AT, NO_CF)
    assert lease_holder(admin) == ""  # released at the end
    leases = client.CoordinationV1Api(admin)
    lease = leases.read_namespaced_lease(CYCLE_LEASE, NS)
    lease.spec.holder_identity = "a-run-elsewhere"
    lease.spec.lease_duration_seconds = 90
    lease.spec.renew_time = datetime.now().astimezone()
    leases.replace_namespaced_lease(CYCLE_LEASE, NS, lease)
    run = run_guard(prom, guard_kubeconfig, ONSET + timedelta(seconds=180), NO_CF, ok=False)
    assert run.rc == 0 and run.plan == {}
    (held,) = run.lines("lease-held")
    assert held["holder"] == "a-run-elsewhere" and not run.lines("cordon")
    assert [line["event"] for line in run.log][-1] == "lease-held"
    # a Lease its holder stopped renewing (a killed run) is taken once it expired
    lease = leases.read_namespaced_lease(CYCLE_LEASE, NS)
    lease.spec.renew_time = datetime.now().astimezone() - timedelta(seconds=91)
    leases.replace_namespaced_lease(CYCLE_LEASE, NS, lease)
    run = run_guard(prom, guard_kubeconfig, ONSET + timedelta(seconds=180), NO_CF)
    assert [line["node"] for line in run.lines("cordon")] == ["w-fast"]
    assert lease_holder(admin) == ""


TRIALS = 20
WATCH_S = 6  # the live runs' watch: the first run holds the Lease this long after its start


@contextmanager
def live_faults() -> Iterator[LocalPrometheus]:
    """The race nodes' faults in real time: Xid 79 and GPU loss for 5 minutes now."""
    require_engine("prometheus2")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(seconds=ONSET_S + 300)
    scenario = Scenario(
        start=start,
        duration_s=ONSET_S + 600,
        nodes=tuple(faulted(n) for n in RACE),
        pods=(KSM_POD,),
    )
    with scenario_server(scenario) as server:
        yield server


@pytest.fixture(scope="module")
def live_prom() -> Iterator[LocalPrometheus]:
    with live_faults() as server:
        yield server


@pytest.fixture
def slot_prom() -> Iterator[LocalPrometheus]:
    with live_faults() as server:
        yield server


def test_two_runs_started_together_never_cordon_two_nodes_in_one_slot(
    live_prom, guard_kubeconfig, core, admin
):
    """Two live runs (the CronJob's way: no --at, the watch on) started at once, both able to
    see two held faults: one takes the Lease and decides, the other logs `lease-held` and exits
    0 — never two cordons, in every trial."""
    held = 0
    for _ in range(TRIALS):
        # Both runs start well inside one slot: a run that starts after the boundary is the
        # next slot's, and may isolate again (one isolation per slot, not per minute).
        slot = _slot_with_room(70)
        # Runs by hand: the watch ends `watch_until_s` after their slot, WATCH_S from now.
        into_s = int(time.time() - slot.timestamp())
        env = {"GUARD_WATCH_UNTIL_S": str(into_s + 1 + WATCH_S)}
        for name in RACE:
            make_gpu_node(core, name)
        try:
            procs = [_start(live_prom, guard_kubeconfig, env=env) for _ in range(2)]
            logs = [p.communicate(timeout=120)[1] for p in procs]
            assert [p.returncode for p in procs] == [0, 0], logs
            cordoned = [n for n in RACE if core.read_node(n).spec.unschedulable]
            assert len(cordoned) == 1, (cordoned, logs)
            # lost the race: found it held, or lost it at the renewal before its writes
            held += sum(
                '"event": "lease-held"' in log or '"event": "lease-lost"' in log for log in logs
            )
        finally:
            for name in RACE:
                core.delete_node(name)
            forget_guard_state(core, admin)
    assert held == TRIALS  # every trial raced: one of the two found the Lease held


def test_a_run_after_another_in_the_same_slot_does_not_cordon_again(
    slot_prom, guard_kubeconfig, core, admin
):
    """One cordon per cron slot also one run after the other (a run by hand after the
    CronJob's): the first run's cordon writes its slot into the Lease; the second, in the same
    slot and able to see the other held fault, logs `slot-isolated` and exits 0; a run of the
    next slot cordons the other node."""
    slot = _slot_with_room()
    job = f"gpu-node-guard-{int(slot.timestamp()) // 60}"  # the CronJob's Job of this slot
    for name in RACE:
        make_gpu_node(core, name)
    try:
        first = _start(slot_prom, guard_kubeconfig, "--no-watch", env={"GUARD_JOB_NAME": job})
        assert first.wait(timeout=120) == 0
        (done,) = [n for n in RACE if core.read_node(n).spec.unschedulable]
        lease = client.CoordinationV1Api(admin).read_namespaced_lease(CYCLE_LEASE, NS)
        assert lease.metadata.annotations[SLOT_KEY] == format_time(slot)
        assert lease.spec.holder_identity in ("", None)  # released, the record kept
        second = _start(slot_prom, guard_kubeconfig, "--no-watch")  # by hand: no Job name
        log = second.communicate(timeout=120)[1]
        assert second.returncode == 0, log
        events = [json.loads(line)["event"] for line in log.splitlines() if line.startswith("{")]
        assert events[-1] == "slot-isolated" and "cordon" not in events, log
        assert [n for n in RACE if core.read_node(n).spec.unschedulable] == [done]
        # The next slot: the record is of an older one, so that run decides.
        lease = client.CoordinationV1Api(admin).read_namespaced_lease(CYCLE_LEASE, NS)
        older = format_time(slot - timedelta(seconds=Settings().cadence_s))
        lease.metadata.annotations[SLOT_KEY] = older
        client.CoordinationV1Api(admin).replace_namespaced_lease(CYCLE_LEASE, NS, lease)
        third = _start(slot_prom, guard_kubeconfig, "--no-watch")
        assert third.wait(timeout=120) == 0
        assert all(core.read_node(n).spec.unschedulable for n in RACE)
    finally:
        for name in RACE:
            core.delete_node(name)
        forget_guard_state(core, admin)


def _slot_with_room(room_s: int = 60) -> datetime:
    """The current cron slot, waiting for the next one when less than `room_s` of it is left:
    the test's runs must all start in the slot they name."""
    cadence = Settings().cadence_s
    now = time.time()
    if cadence - now % cadence < room_s:
        time.sleep(cadence - now % cadence + 1)
        now = time.time()
    return datetime.fromtimestamp(now // cadence * cadence, UTC)


def _start(
    prom: LocalPrometheus, kubeconfig: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A live run; `env`: the CronJob's own values (its Job's name, the timing) as its manifest
    gives them, the watch's end WATCH_S unless given."""
    own = {"GUARD_WATCH_UNTIL_S": str(WATCH_S), **(env or {})}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "guard",
            "run",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            str(kubeconfig),
            "--log-format",
            "json",
            NO_CF,
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **own},
    )


def test_a_run_that_loses_the_lease_before_its_writes_writes_nothing(
    prom, guard_kubeconfig, gpu_node, core, admin, monkeypatch
):
    """Another run takes the Lease between this run's reads and its writes (its own expired
    during a long cycle): the renewal right before the writes meets the API's 409, and the run
    writes nothing, says `lease-lost` and exits 0."""
    from click.testing import CliRunner

    from guard.cli import cli
    from guard.doors.lease import CycleLease

    node = gpu_node("w-fast")
    renew = CycleLease.renew

    def taken_first(self: CycleLease, now: datetime) -> bool:
        leases = client.CoordinationV1Api(admin)
        lease = leases.read_namespaced_lease(CYCLE_LEASE, NS)
        lease.spec.holder_identity = "a-run-elsewhere"
        lease.spec.renew_time = datetime.now().astimezone()
        leases.replace_namespaced_lease(CYCLE_LEASE, NS, lease)
        return renew(self, now)

    monkeypatch.setattr(CycleLease, "renew", taken_first)
    args = ["run", "--prometheus-url", prom.url, "--kubeconfig", str(guard_kubeconfig)]
    at = ONSET + timedelta(seconds=180)  # w-fast's hold has passed: the cycle plans a cordon
    args += ["--at", at.isoformat(), "--log-format", "json", NO_CF]
    result = CliRunner().invoke(cli, args, prog_name="gpu-node-guard")
    log = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert result.exit_code == 0, result.stderr
    events = [line["event"] for line in log]
    assert events[-1] == "lease-lost" and "cordon" not in events, events
    assert not core.read_node(node).spec.unschedulable
    assert cordon_at(core, node) is None
    assert lease_holder(admin) == "a-run-elsewhere"  # the other run's, untouched


def test_a_killed_runs_lease_is_free_for_the_next_slot(live_prom, guard_kubeconfig, core, admin):
    """A run killed while it holds the Lease (its pod past the deadline, the node gone) leaves a
    Lease that expires no later than the next cron slot's start, whatever `lease_duration_s`
    says: a run in the same slot still finds it held, the next slot's run takes it (and cordons
    the second held fault). A one-minute cadence keeps the wait short; the Lease's 90 s would
    outlive the slot."""
    cadence = 60
    timing = {
        "GUARD_CADENCE_S": str(cadence),
        "GUARD_LEASE_DURATION_S": "90",
        "GUARD_WATCH_UNTIL_S": "55",
    }
    if cadence - time.time() % cadence < 20:
        time.sleep(cadence - time.time() % cadence + 1)
    for name in RACE:
        make_gpu_node(core, name)
    try:
        killed = _start(live_prom, guard_kubeconfig, "--watch", env=timing)
        assert killed.stderr is not None
        for line in killed.stderr:  # killed once it holds the Lease in its watch
            if '"event": "watch-start"' in line:
                break
        killed.kill()
        killed.wait(timeout=10)
        lease = client.CoordinationV1Api(admin).read_namespaced_lease(CYCLE_LEASE, NS)
        spec = lease.spec
        assert spec.holder_identity, "the killed run still holds the Lease"
        slot_start = spec.acquire_time.timestamp() // cadence * cadence
        expires = spec.renew_time.timestamp() + spec.lease_duration_seconds
        assert spec.lease_duration_seconds < 90
        assert expires <= slot_start + cadence
        same_slot = _start(live_prom, guard_kubeconfig, "--no-watch", env=timing)
        log = same_slot.communicate(timeout=120)[1]
        assert same_slot.returncode == 0 and '"event": "lease-held"' in log, log
        time.sleep(max(0.0, slot_start + cadence + 1 - time.time()))
        next_slot = _start(live_prom, guard_kubeconfig, "--no-watch", env=timing)
        log = next_slot.communicate(timeout=120)[1]
        assert next_slot.returncode == 0, log
        assert '"event": "lease-held"' not in log and '"event": "done"' in log, log
        assert lease_holder(admin) == ""  # taken, then released
    finally:
        for name in RACE:
            core.delete_node(name)
        forget_guard_state(core, admin)


def test_a_hold_completing_in_the_watchs_last_seconds_is_cordoned_by_that_run(
    guard_kubeconfig, gpu_node, core, admin
):
    """Real time, every default setting (the CronJob's run: its Job's name only): a fault whose
    hold completes 225 s after the Job's schedule — past `cycle_deadline_s` (200 s) after the
    run's start, inside the watch (240 s) — is cordoned by that same run, which renews and
    releases the Lease after it: the watch's API requests live in the run's budget, not the
    cycle's. About four and a half minutes."""
    node = gpu_node("w-last")
    schedule = _next_minute(at_least_s=20)  # Prometheus starts before it
    onset_s = 30 * 60  # history before the schedule
    fault_s = onset_s + 95  # first scraped 105 s after the schedule: the hold completes at 225 s
    scenario = Scenario(
        start=schedule - timedelta(seconds=onset_s),
        duration_s=onset_s + 600,
        nodes=(NodeTimeline(node, gpus=8, xids=((fault_s, 4, 79),), allocatable=((fault_s, 7),)),),
        pods=(KSM_POD,),
    )
    require_engine("prometheus2")
    with scenario_server(scenario) as server:
        time.sleep(max(0.0, schedule.timestamp() - time.time()))
        job = f"gpu-node-guard-{int(schedule.timestamp()) // 60}"  # the CronJob's Job
        run = subprocess.run(
            [
                *(sys.executable, "-m", "guard", "run", "--prometheus-url", server.url),
                *("--kubeconfig", str(guard_kubeconfig), "--log-format", "json"),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "GUARD_JOB_NAME": job},
            timeout=Settings().watch_until_s + 60,
            check=False,
        )
    log = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    events = [line["event"] for line in log]
    assert run.returncode == 0, run.stderr
    assert "lease-release-failed" not in events and "abort" not in events, run.stderr
    (end,) = [line for line in log if line["event"] == "watch-end"]
    assert (end["why"], end["cordoned"]) == ("cordon-landed", node), run.stderr
    (cordon,) = [line for line in log if line["event"] == "cordon"]
    assert cordon["node"] == node and cordon["held_s"] >= FAST_HOLD_S
    at = cordon_at(core, node)
    hold_done = schedule + timedelta(seconds=fault_s - onset_s + 10 + FAST_HOLD_S)
    assert at is not None and hold_done <= at <= schedule + timedelta(
        seconds=Settings().watch_until_s
    )
    assert at > schedule + timedelta(seconds=Settings().cycle_deadline_s)  # past the old budget
    lease = client.CoordinationV1Api(admin).read_namespaced_lease(CYCLE_LEASE, NS)
    assert lease.spec.holder_identity in ("", None)  # released at the end
    assert lease.metadata.annotations[SLOT_KEY] == format_time(schedule)


def _next_minute(at_least_s: int) -> datetime:
    """The first whole minute at least `at_least_s` from now."""
    now = time.time() + at_least_s
    return datetime.fromtimestamp(-(-now // 60) * 60, UTC)


# `gpu-node-guard run`, killed (SIGKILL: no finally, no release) the moment one of its writes has
# landed (KILL_AFTER: the cordon patch, the Event, the evidence Job, the ledger line): what a pod
# past its deadline, or a node gone, does at the worst instant.
KILLED_AFTER_A_WRITE = """
import os, signal, sys
from guard.cli import main
from guard.doors.kube import Kube
WRITES = {
    "cordon": (("patch_node", lambda body: (body.get("spec") or {}).get("unschedulable")),),
    "event": (("create_event", lambda body: True),),
    "evidence-job": (("create_job", lambda body: True),),
    "ledger": (("create_configmap", lambda body: True), ("replace_configmap", lambda body: True)),
}
def die_after(name, landed):
    write = getattr(Kube, name)
    def write_then_die(self, *args):
        answer = write(self, *args)
        if landed(args[-1]):
            os.kill(os.getpid(), signal.SIGKILL)
        return answer
    setattr(Kube, name, write_then_die)
for name, landed in WRITES[os.environ["KILL_AFTER"]]:
    die_after(name, landed)
sys.argv[0] = "gpu-node-guard"
main()
"""


@pytest.mark.parametrize("write", ["cordon", "event", "evidence-job", "ledger"])
def test_a_run_killed_right_after_any_write_leaves_its_slot_recorded(
    slot_prom, guard_kubeconfig, core, admin, write
):
    """The slot goes into the Lease with the renewal right before the isolation's writes, not
    after them: a run killed right after any one of them (its cordon patch, its Event, its
    evidence Job, its ledger line) leaves the record, so a run of the same slot that takes the
    Lease once it expired logs `slot-isolated` and cordons no second node — one isolation in the
    slot, whatever the write the kill came after."""
    slot = _slot_with_room()
    job = f"gpu-node-guard-{int(slot.timestamp()) // 60}"
    for name in RACE:
        make_gpu_node(core, name)
    leases = client.CoordinationV1Api(admin)
    try:
        killed = subprocess.run(
            [
                *(sys.executable, "-c", KILLED_AFTER_A_WRITE, "run"),
                *("--prometheus-url", slot_prom.url, "--kubeconfig", str(guard_kubeconfig)),
                *("--log-format", "json", "--no-watch", NO_CF),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "GUARD_JOB_NAME": job, "KILL_AFTER": write},
            timeout=120,
            check=False,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        # at most the one node (none when the kill came after a write before the cordon)
        done = [n for n in RACE if core.read_node(n).spec.unschedulable]
        assert len(done) <= 1, killed.stderr
        lease = leases.read_namespaced_lease(CYCLE_LEASE, NS)
        assert lease.spec.holder_identity  # never released
        assert (lease.metadata.annotations or {}).get(SLOT_KEY) == format_time(slot)
        # Its Lease expires (lease_duration_s after that renewal): a run of the slot takes it.
        lease.spec.renew_time = datetime.now().astimezone() - timedelta(seconds=91)
        leases.replace_namespaced_lease(CYCLE_LEASE, NS, lease)
        second = _start(slot_prom, guard_kubeconfig, "--no-watch", env={"GUARD_JOB_NAME": job})
        log = second.communicate(timeout=120)[1]
        assert second.returncode == 0, log
        events = [json.loads(line)["event"] for line in log.splitlines() if line.startswith("{")]
        assert events[-1] == "slot-isolated" and "cordon" not in events, log
        assert [n for n in RACE if core.read_node(n).spec.unschedulable] == done
    finally:
        for name in RACE:
            core.delete_node(name)
        forget_guard_state(core, admin)


def test_a_run_by_hand_never_watches_into_the_next_slot(guard_kubeconfig, gpu_node, core):
    """A live run whose Job names no schedule (by hand, `kubectl create job --from=cronjob/…`),
    started late in its slot, with a hold that completes just after the slot's end: its watch
    ends `watch_until_s` after its slot on the cadence's grid, as that slot's CronJob run's
    does, and leaves the hold to the next slot's run — before, it watched `watch_until_s` after
    its own start and cordoned in the next slot's time, beside that slot's run. A 30 s cadence
    (watch 25 s) keeps it short: started at S+15, the hold completes at S+30."""
    node = gpu_node("w-hand")
    cadence, until = 30, 25
    slot = datetime.fromtimestamp(-(-(time.time() + 40) // cadence) * cadence, UTC)  # S
    history_s = 30 * 60
    onset_s = history_s - 90  # S-90 on the scrape grid: Xid 79's 120 s hold completes at S+30
    scenario = Scenario(
        start=slot - timedelta(seconds=history_s),
        duration_s=history_s + 600,
        nodes=(NodeTimeline(node, gpus=8, xids=((onset_s, 4, 79),), allocatable=((onset_s, 7),)),),
        pods=(KSM_POD,),
    )
    require_engine("prometheus2")
    with scenario_server(scenario) as server:
        time.sleep(max(0.0, slot.timestamp() + 15 - time.time()))
        env = {"GUARD_CADENCE_S": str(cadence), "GUARD_WATCH_UNTIL_S": str(until)}
        run = _start(server, guard_kubeconfig, env=env)  # no GUARD_JOB_NAME: by hand
        log = [json.loads(line) for line in run.communicate(timeout=120)[1].splitlines()]
    assert run.returncode == 0, log
    (start,) = [line for line in log if line["event"] == "watch-start"]
    assert start["until"] == format_time(slot + timedelta(seconds=until)), start
    (end,) = [line for line in log if line["event"] == "watch-end"]
    assert (end["why"], end["cordoned"], end["left"]) == ("deadline", "-", 1), end
    assert not [line for line in log if line["event"] == "cordon"], log
    assert cordon_at(core, node) is None


SKEW_S = 120  # the pod's clock ahead of Prometheus'


class PodTime:
    """guard.run's `time` module on a pod whose clock runs SKEW_S ahead."""

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def time() -> float:
        return time.time() + SKEW_S


def test_a_pod_clock_two_minutes_ahead_neither_shortens_a_hold_nor_dates_the_writes(
    guard_kubeconfig, gpu_node, core, admin, monkeypatch
):
    """A live run (no --at, the guard's token) whose pod clock runs two minutes ahead of
    Prometheus': a loss that has held about a minute of Xid 79's two-minute hold is pending,
    not cordoned as three minutes old (Prometheus answers a future instant with the last
    sample); the node whose hold completed is cordoned, and every write of it — the cordon's
    annotation, its ledger line, its Event — and the Lease carry Prometheus' time, the instant
    the decision was made on, not the pod's; one `clock-skew` WARN line says so."""
    from click.testing import CliRunner

    from guard import cli as cli_module
    from guard.doors.retry import Anchor

    require_engine("prometheus2")
    end = datetime.fromtimestamp(time.time() // 15 * 15, UTC)  # no sample after the real now
    history_s = 30 * 60
    held, young = gpu_node("w-skew-held"), gpu_node("w-skew-young")
    forget_guard_state(core, admin)  # an earlier test's slot record
    nodes = tuple(
        NodeTimeline(
            name, gpus=8, xids=((history_s - ago, 4, 79),), allocatable=((history_s - ago, 7),)
        )
        for name, ago in ((held, 300), (young, 60))
    )
    scenario = Scenario(end - timedelta(seconds=history_s), history_s, nodes, pods=(KSM_POD,))
    with scenario_server(scenario) as server, pushgateway() as pushed:
        before = datetime.now(UTC).replace(microsecond=0)
        pod = Anchor(datetime.now(UTC) + timedelta(seconds=SKEW_S), time.monotonic())
        monkeypatch.setattr(cli_module.Anchor, "start", classmethod(lambda _cls: pod))
        monkeypatch.setattr("guard.run.time", PodTime)
        args = ["run", "--prometheus-url", server.url, "--kubeconfig", str(guard_kubeconfig)]
        args += ["--no-watch", "--output", "json", "--log-format", "json", NO_CF]
        args += ["--pushgateway-url", pushed.url]
        result = CliRunner().invoke(cli_module.cli, args, prog_name="gpu-node-guard")
        after = datetime.now(UTC) + timedelta(seconds=1)
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    log = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    (skew,) = [line for line in log if line["event"] == "clock-skew"]
    assert skew["level"] == "WARN" and abs(skew["skew_s"] - SKEW_S) < 5, skew
    assert [line["node"] for line in log if line["event"] == "cordon"] == [held], result.stderr
    assert [p["node"] for p in plan["pending"]] == [young], plan["pending"]
    assert not core.read_node(young).spec.unschedulable

    def on_prometheus_clock(at: datetime | None) -> bool:
        return at is not None and before <= at <= after

    assert on_prometheus_clock(datetime.fromisoformat(plan["counts"]["at"]))
    assert on_prometheus_clock(cordon_at(core, held))
    (line,) = ledger_text(core, held).splitlines()
    assert on_prometheus_clock(parse_time(line.split()[0])), line
    events = node_events(admin, held)
    assert events and all(
        on_prometheus_clock(datetime.fromisoformat(e["eventTime"].replace("Z", "+00:00")))
        for e in events
    ), events
    lease = client.CoordinationV1Api(admin).read_namespaced_lease(CYCLE_LEASE, NS)
    assert on_prometheus_clock(lease.spec.acquire_time) and on_prometheus_clock(
        lease.spec.renew_time
    ), lease.spec
    # the push too: the alerts compare its times with Prometheus' time()
    for metric in (LAST_RUN, LEASE_TAKEN):
        assert on_prometheus_clock(datetime.fromtimestamp(pushed.value(metric.name), UTC)), metric


@dataclass
class Pushed:
    url: str
    bodies: list[str] = field(default_factory=list)

    def value(self, name: str) -> float:
        """The last push's sample of `name` (the text format's `name{…} value` row)."""
        (row,) = [r for r in self.bodies[-1].splitlines() if r.split("{")[0].split()[0] == name]
        return float(row.split()[-1])


@contextmanager
def pushgateway() -> Iterator[Pushed]:
    """A stand-in Pushgateway on loopback that keeps each pushed body (the text format)."""
    pushed = Pushed("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            pushed.bodies.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    pushed.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield pushed
    finally:
        server.shutdown()
        server.server_close()
