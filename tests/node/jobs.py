"""The guard's Jobs on the node, through the guard's own path: `gpu-node-guard render`, created
with the guard's ServiceAccount token (RBAC, the admission policies), Pods made by the real Job
controller and run by the kubelet, the result read back as a cycle reads it (`read_cluster`,
`job_info`, `attach`). Every wait polls with a deadline."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from guard.model import JobInfo
from guard.names import Annotations
from guard.read import read_cluster
from guard.read.job_results import attach
from guard.read.objects import is_guard_job, job_info
from guard.settings import Settings
from tests.apiserver.guard_run import guard_kube
from tests.apiserver.kube import JOBS_NS, as_dict, create

END_TIMEOUT_S = 180.0
# What each test measured, for the session's summary (tests/node/conftest.py).
MEASURED: list[tuple[str, dict[str, float]]] = []


@dataclass(frozen=True, slots=True)
class Ran:
    """A Job the guard made, and how long each step took (s): created → Pod running (or
    rejected) → ended → read back by the guard."""

    job: dict[str, Any]
    pod: dict[str, Any]
    read: JobInfo
    timings: dict[str, float]


def render(kind: str, node: str, *args: str) -> dict[str, Any]:
    """The Job exactly as `gpu-node-guard render` prints it."""
    done = subprocess.run(
        [sys.executable, "-m", "guard", "render", kind, "--node", node, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(yaml.safe_load(done.stdout))


def create_as_guard(kubeconfig: Path, job: dict[str, Any]) -> dict[str, Any]:
    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        return as_dict(create(api, job))


def pods_of(admin: client.ApiClient, job: dict[str, Any]) -> list[dict[str, Any]]:
    selector = f"batch.kubernetes.io/controller-uid={job['metadata']['uid']}"
    found = client.CoreV1Api(admin).list_namespaced_pod(JOBS_NS, label_selector=selector)
    return [admin.sanitize_for_serialization(p) for p in found.items]


def _started(pod: dict[str, Any]) -> bool:
    """Running, or already past it (or rejected by the kubelet: Failed without starting)."""
    return pod.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed")


def _ended(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)


def wait_for(what: str, probe: Any, timeout_s: float = END_TIMEOUT_S) -> Any:
    """The first truthy answer of `probe()`; fails after `timeout_s` with the last answer."""
    deadline = time.monotonic() + timeout_s
    while not (answer := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(0.2)
    return answer


def guard_reads(kubeconfig: Path, name: str) -> JobInfo:
    """The Job `name` with its result, as a cycle of the guard reads it with its own token."""
    s = Settings()
    objs = read_cluster(guard_kube(kubeconfig), s)
    keys = Annotations(s.annotation_prefix)
    jobs = [job_info(o, keys) for o in objs.jobs if is_guard_job(o, s.jobs_namespace)]
    (found,) = [j for j in attach(jobs, objs.pods) if j.name == name]
    return found


def run_job(admin: client.ApiClient, kubeconfig: Path, job: dict[str, Any]) -> Ran:
    """Create `job` as the guard, wait for its Pod to start and the Job to end, read it back."""
    began = time.monotonic()
    made = create_as_guard(kubeconfig, job)
    return follow(admin, kubeconfig, made, began)


def follow(admin: client.ApiClient, kubeconfig: Path, made: dict[str, Any], began: float) -> Ran:
    """The Job `made` (created at monotonic `began`, or just before): its Pod started, the Job
    ended, its result read by the guard; each step's seconds since `began`."""
    timings: dict[str, float] = {}
    name, batch = made["metadata"]["name"], client.BatchV1Api(admin)
    wait_for(
        f"a started Pod of job/{name}", lambda: [p for p in pods_of(admin, made) if _started(p)]
    )
    timings["created → Pod running"] = time.monotonic() - began

    def ended() -> dict[str, Any] | None:
        stored = admin.sanitize_for_serialization(batch.read_namespaced_job(name, JOBS_NS))
        return stored if _ended(stored) else None

    stored = wait_for(f"job/{name} Complete or Failed", ended)
    timings["created → Job ended"] = time.monotonic() - began
    read = wait_for(f"the guard's read of job/{name}", lambda: _with_result(kubeconfig, name))
    timings["created → result read"] = time.monotonic() - began
    (pod,) = pods_of(admin, made)
    return Ran(stored, pod, read, timings)


def _with_result(kubeconfig: Path, name: str) -> JobInfo | None:
    found = guard_reads(kubeconfig, name)
    return found if found.result is not None else None


def record(what: str, ran: Ran) -> Ran:
    MEASURED.append((what, ran.timings))
    return ran


def termination_message(pod: dict[str, Any]) -> str:
    (status,) = pod["status"]["containerStatuses"]
    return str(status["state"]["terminated"].get("message", ""))
