"""Live mode: the time-to-isolate tables' watch, in real time, through the API.

The tables replay each run as ``run --dry-run --cluster-snapshot … --at …`` in the replayed time,
where the watch makes no API request: they cannot show a watch whose API budget ends before the
watch does (issue 39: the last 40 s of the watch were dead with the defaults). Here the phase
that was worst for the watch then (the tables' phase 104 s: Xid 79 landing `PHASE_S` after the
Job's schedule, 1 s before a scrape, its hold completing 225 s after the schedule: past
`cycle_deadline_s` after the run's start, inside the watch's 240 s) is one real run as the
CronJob runs it: every default setting, no ``--at``, no snapshot file, its Job's name carrying
its schedule, started `DELAY_S` after it, against a real kube-apiserver + etcd (the apiserver
test tier's, tests.apiserver.kube) and Prometheus 2 over the fault written in real time (no
sample later than the real now is ever asked about: the run goes by Prometheus' time,
guard.plan.instant). About five minutes: the watch's 240 s are real.

Reported: the lag (the cordon's ``auto-cordon-at`` less the Xid's instant), the decision's time
after the schedule, the run's exit code and wall time, its ``watch-end`` line (why), the run's
Prometheus and API requests (its cycle's and its watch's), and whether the Lease was released
with the slot recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.apimode import _post, _session, unavailable
from guard.names import CYCLE_LEASE
from guard.settings import Settings
from tests.engines import scenario_server
from tests.scenario_build import KSM_POD, NodeTimeline, Scenario

PHASE_S = 104  # the Xid after the schedule, 1 s before a scrape (the tables' phase 104 s)
DELAY_S = 5  # the pod starts this long after its Job's schedule
HISTORY_S = 30 * 60  # the scenario's history before the schedule
NODE = "live-xid79"
CORDON_AT = "gpu-node-guard.io/auto-cordon-at"
SLOT_KEY = "gpu-node-guard.io/isolated-slot"


@dataclass(frozen=True, slots=True)
class LiveResult:
    phase_s: int  # the Xid after the schedule
    decided_s: int | None  # the cordon's `auto-cordon-at` after the schedule (None: no cordon)
    lag_s: int | None  # the cordon's `auto-cordon-at` less the Xid's instant
    rc: int
    wall_s: float  # the run's own, from its start
    watch_why: str
    prometheus_requests: int  # the whole run's: the cycle's (`done`) and the watch's
    api_requests: int
    released: bool  # the Lease released, this slot recorded in it
    lines: int  # the run's log lines (WARN or ERROR among them: `problems`)
    problems: tuple[str, ...]


def live_worst_phase(say: Any) -> LiveResult:
    """One real run over the worst phase (the module's docstring); needs the envtest binaries."""
    why = unavailable()
    if why:
        raise RuntimeError(f"live mode: {why}")
    from tests.apiserver.guard_run import node_status
    from tests.apiserver.kube import ADMIN_TOKEN, assets_dir, control_plane

    s = Settings()
    assets = assets_dir(os.environ)
    assert assets is not None
    with (
        tempfile.TemporaryDirectory(prefix="gng-live-") as tmp,
        control_plane(assets, Path(tmp)) as plane,
    ):
        session = _session(ADMIN_TOKEN, str(plane.ca_file))
        for ns in (s.namespace, s.jobs_namespace):
            _post(session, f"{plane.url}/api/v1/namespaces", {"metadata": {"name": ns}})
        status = node_status(boot="boot-1", allocatable=7)
        _post(session, f"{plane.url}/api/v1/nodes", {"metadata": {"name": NODE}, "status": status})
        schedule = _next_minute(at_least_s=25)  # Prometheus is up before it
        fault_s = HISTORY_S + PHASE_S  # first scraped at the next scrape, 1 s later
        timeline = NodeTimeline(NODE, gpus=8, xids=((fault_s, 4, 79),), allocatable=((fault_s, 7),))
        scenario = Scenario(
            start=schedule - timedelta(seconds=HISTORY_S),
            duration_s=HISTORY_S + 600,
            nodes=(timeline,),
            pods=(KSM_POD,),
        )
        with scenario_server(scenario) as prom:
            time.sleep(max(0.0, schedule.timestamp() + DELAY_S - time.time()))
            say(f"live run: Job scheduled {schedule:%H:%M:%S}, up to {s.watch_until_s} s …")
            started = time.monotonic()
            run = subprocess.run(
                [
                    *(sys.executable, "-m", "guard", "run", "--prometheus-url", prom.url),
                    *("--kubeconfig", str(plane.kubeconfig), "--log-format", "json"),
                ],
                capture_output=True,
                text=True,
                env={
                    **os.environ,
                    "GUARD_JOB_NAME": f"gpu-node-guard-{int(schedule.timestamp()) // 60}",
                },
                timeout=s.watch_until_s + 60,
                check=False,
            )
            wall_s = time.monotonic() - started
        node = session.get(f"{plane.url}/api/v1/nodes/{NODE}", timeout=30).json()
        lease = session.get(
            f"{plane.url}/apis/coordination.k8s.io/v1/namespaces/{s.namespace}/leases/{CYCLE_LEASE}",
            timeout=30,
        ).json()
    return _result(schedule, run, wall_s, node, lease)


def _result(
    schedule: datetime,
    run: subprocess.CompletedProcess[str],
    wall_s: float,
    node: dict[str, Any],
    lease: dict[str, Any],
) -> LiveResult:
    log = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    end = next((line for line in log if line.get("event") == "watch-end"), {})
    done = next((line for line in log if line.get("event") == "done"), {})
    at = (node.get("metadata", {}).get("annotations") or {}).get(CORDON_AT)
    decided = datetime.fromisoformat(at.replace("Z", "+00:00")) if at else None
    decided_s = int((decided - schedule).total_seconds()) if decided else None
    released = not (lease.get("spec") or {}).get("holderIdentity") and (
        lease.get("metadata", {}).get("annotations") or {}
    ).get(SLOT_KEY) == schedule.strftime("%Y-%m-%dT%H:%M:%SZ")
    return LiveResult(
        PHASE_S,
        decided_s,
        None if decided_s is None else decided_s - PHASE_S,
        run.returncode,
        wall_s,
        str(end.get("why", "-")),
        int(done.get("prometheus_requests", 0)) + int(end.get("prometheus_requests", 0)),
        int(done.get("api_requests", 0)) + int(end.get("api_requests", 0)),
        bool(released),
        len(log),
        tuple(f"{x['event']}" for x in log if x.get("level") in ("WARN", "ERROR")),
    )


def _next_minute(at_least_s: int) -> datetime:
    now = time.time() + at_least_s
    return datetime.fromtimestamp(-(-now // 60) * 60, UTC)
