"""Waiting on the real controllers of the `cluster` fixture (kube-controller-manager's Job
controller): the Pods it makes for a Job, and the Job's end once the test, as the kubelet,
ended its Pod."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from tests.apiserver.guard_run import end_pod
from tests.apiserver.kube import JOBS_NS, ControlPlane, as_dict, create

WAIT_S = 60.0


def create_as(plane: ControlPlane, user: str, doc: dict[str, Any]) -> dict[str, Any]:
    with plane.impersonating(user) as api:
        return as_dict(create(api, doc))


def pods_of(api: client.ApiClient, uid: str) -> list[dict[str, Any]]:
    """The Pods labelled as made for the Job of `uid` (its selector), as plain JSON."""
    selector = f"batch.kubernetes.io/controller-uid={uid}"
    found = client.CoreV1Api(api).list_namespaced_pod(JOBS_NS, label_selector=selector)
    return [api.sanitize_for_serialization(p) for p in found.items]


def controller_pod(plane: ControlPlane, job: dict[str, Any]) -> dict[str, Any]:
    """The first Pod the Job controller made for `job`; fails with the Job's Events (its
    FailedCreate refusals) when none came."""
    meta = job["metadata"]
    deadline = time.monotonic() + WAIT_S
    with plane.admin_client() as admin:
        while not (pods := pods_of(admin, meta["uid"])):
            if time.monotonic() > deadline:
                events = client.CoreV1Api(admin).list_namespaced_event(
                    JOBS_NS, field_selector=f"involvedObject.uid={meta['uid']}"
                )
                said = [f"{e.reason}: {e.message}" for e in events.items]
                raise AssertionError(f"no Pod of job/{meta['name']} after {WAIT_S:.0f} s: {said}")
            time.sleep(0.3)
    return pods[0]


def job_condition(admin: client.ApiClient, job: dict[str, Any], wanted: str) -> dict[str, Any]:
    """The stored Job once the Job controller set its condition `wanted` (Complete, Failed)."""
    return job_until(
        admin,
        job,
        wanted,
        lambda status: any(
            c["type"] == wanted and c["status"] == "True" for c in status.get("conditions") or []
        ),
    )


def job_succeeded(admin: client.ApiClient, job: dict[str, Any]) -> dict[str, Any]:
    """The stored Job once the Job controller counted a succeeded Pod of it (what the guard reads
    as succeeded; Complete waits for its other Pods to end, and no kubelet ends them here)."""
    return job_until(admin, job, "succeeded", lambda status: bool(status.get("succeeded")))


def job_until(
    admin: client.ApiClient, job: dict[str, Any], what: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    meta, batch = job["metadata"], client.BatchV1Api(admin)
    deadline = time.monotonic() + WAIT_S
    while True:
        found = admin.sanitize_for_serialization(batch.read_namespaced_job(meta["name"], JOBS_NS))
        if found["metadata"]["uid"] != meta["uid"]:
            raise AssertionError(f"job/{meta['name']} was made again meanwhile")
        if done(found.get("status") or {}):
            return dict(found)
        if time.monotonic() > deadline:
            raise AssertionError(
                f"job/{meta['name']} not {what} after {WAIT_S:.0f} s: {found.get('status')}"
            )
        time.sleep(0.3)


def run_to_the_end(
    plane: ControlPlane, admin: client.ApiClient, job: dict[str, Any], message: str, ok: bool
) -> dict[str, Any]:
    """Play the kubelet for the Pod the Job controller made for `job`: its container ends with
    `message` (exit 0 when `ok`); then the controller ends the Job. The ended Pod."""
    pod = controller_pod(plane, job)
    end_pod(admin, pod, message, ok)
    job_condition(admin, job, "Complete" if ok else "Failed")
    return pod
