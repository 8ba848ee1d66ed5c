"""Job results: each finished Pod's termination message → a typed JobResult on its JobInfo, an
explicit `unreadable` for anything else, never an exception."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from guard.jobs import run_digest
from guard.model import Finding, JobInfo, JobResult, PromView, RecordedLink
from guard.names import Annotations
from guard.read import ClusterObjects, build_snapshot, parse_nodes
from guard.read.job_results import attach, result, slim_pod
from guard.wire import FenceSummary, Summary, render_fence_summary, render_summary
from guard.wire import Finding as ConformanceFinding
from tests.builders import NOW, S, job_uid
from tests.snapshot_json import round_trips

FAILED = (
    ConformanceFinding("ipvs-loaded", "ip_vs is not loaded"),
    ConformanceFinding("ipvs-persist", "no modules-load.d file"),
)
FAIL = render_summary(Summary(False, failed=FAILED))
PASS = render_summary(Summary(True))
REASONS = [
    "slow gpu=3 ratio=0.61 min_ratio=0.8",
    "pcie-below-recorded pci=0000:2a:00.0 now=16GT/s,x8 recorded=16GT/s,x16",
]
LOADTEST_FAIL = json.dumps(
    {"kind": "loadtest", "verdict": "fail", "expected_gpus": 8, "reasons": REASONS}
)
EVIDENCE = json.dumps(
    {
        "schema": "gpu-node-guard/evidence-summary/v1",
        "pci": "0000:99:00.0",
        "verdict": "power-cycle",
        "links": [{"pci": "0000:18:00.0", "link": "16GT/s,x16"}],
    }
)
FENCED = render_fence_summary(FenceSummary("set", "0000:99:00.0", "GPU-1", "fenced", "Prohibited"))
ABSENT = render_fence_summary(
    FenceSummary(
        "set", "0000:99:00.0", "GPU-1", "gpu-absent", why="lspci -s 0000:99:00.0 reads all ff"
    )
)


def run(kind: str) -> dict[str, Any]:
    """What the Job's template container runs (and so its Pod's)."""
    return {
        "name": kind,
        "image": f"registry.example/gpu-node-guard:{kind}",
        "command": ["gpu-node-guard", kind, "--termination-log", "/dev/termination-log"],
    }


def pod(
    job: str,
    kind: str,
    message: str | None,
    phase: str = "Failed",
    created: str = "2026-09-21T05:00:00Z",
    name: str = "",
    why: tuple[str, str] = ("", ""),
    owner: str | None = None,
    image: str = "",
    ran_on: str = "b",
) -> dict[str, Any]:
    """A finished Pod of `job` as the API lists it (a terminated container unless message None),
    controlled by the Job (`owner`: another controller uid; "" none) and running its template's
    container (`image`: another one) on the Job's node b (`ran_on`: another one)."""
    container: dict[str, Any] = {"name": kind, "state": {}}
    if message is not None:
        exit_code = 0 if phase == "Succeeded" else 1
        container["state"] = {
            "terminated": {"exitCode": exit_code, "reason": "Completed", "message": message}
        }
    owner = job_uid(job) if owner is None else owner
    return {
        "kind": "Pod",
        "metadata": {
            "name": name or f"{job}-abcde",
            "namespace": "gpu-node-guard-jobs",
            "creationTimestamp": created,
            "labels": {
                "app.kubernetes.io/name": "gpu-node-guard",
                "app.kubernetes.io/component": kind,
                "batch.kubernetes.io/job-name": job,
                "job-name": job,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job,
                    "uid": owner,
                    "controller": True,
                }
            ]
            if owner != ""
            else [],
        },
        "spec": {
            "nodeName": ran_on,
            "containers": [
                {
                    **run(kind),
                    "image": image or run(kind)["image"],
                    "resources": {"limits": {"cpu": "1"}},
                }
            ],
        },
        "status": {
            "phase": phase,
            "containerStatuses": [container],
            **({"reason": why[0], "message": why[1]} if why[0] else {}),
        },
    }


OUT_OF_CPU = (
    "OutOfcpu",
    "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, "
    "capacity: 2000",
)


def kubelet_rejected(job: str, kind: str, reason: str, message: str) -> dict[str, Any]:
    """A Pod of `job` as a kubelet leaves one it refused at admission (pkg/kubelet rejectPod):
    phase Failed, its reason and message, and no container status at all."""
    the_pod = pod(job, kind, None)
    the_pod["status"] = {
        "phase": "Failed",
        "reason": reason,
        "message": message,
        "qosClass": "Burstable",
    }
    return the_pod


@pytest.mark.parametrize(
    ("kind", "the_pod", "expected"),
    [
        pytest.param(
            "conformance",
            pod("j", "conformance", FAIL),
            JobResult(
                "read",
                failed=(
                    Finding("ipvs-loaded", "ip_vs is not loaded"),
                    Finding("ipvs-persist", "no modules-load.d file"),
                ),
            ),
            id="conformance-fail-names-its-items",
        ),
        pytest.param(
            "conformance",
            pod("j", "conformance", PASS, "Succeeded"),
            JobResult("read", passed=True),
            id="conformance-pass",
        ),
        pytest.param(
            "conformance",
            pod("j", "conformance", ""),
            JobResult(
                "unreadable",
                "pod j-abcde: empty termination message: the conformance program did not finish",
            ),
            id="killed-no-message",
        ),
        pytest.param(
            "conformance",
            pod("j", "conformance", '{"schema":"x"}'),
            JobResult(
                "unreadable",
                "pod j-abcde: conformance summary schema is 'x', "
                "not 'gpu-node-guard/conformance-summary/v1'",
            ),
            id="other-schema",
        ),
        pytest.param(
            "conformance",
            pod("j", "conformance", FAIL.replace("ipvs-loaded", "IPVS!")),
            JobResult(
                "unreadable",
                "pod j-abcde: conformance summary names a failed item that is no word: 'IPVS!'",
            ),
            id="item-is-no-reason-word",
        ),
        pytest.param(
            "conformance",
            pod("j", "conformance", None, why=("DeadlineExceeded", "Job was active too long")),
            JobResult(
                "unreadable",
                "pod j-abcde Failed before its conformance container "
                "ended (DeadlineExceeded: Job was active too long)",
            ),
            id="pod-failed-before-its-container-ended",
        ),
        *(
            pytest.param(
                kind,
                kubelet_rejected("j", kind, *why),
                JobResult(
                    "rejected",
                    f"pod j-abcde was rejected by the node's kubelet ({why[0]}: {why[1]})",
                ),
                id=f"{kind}-pod-rejected-{why[0]}",
            )
            for kind, why in (
                ("loadtest", OUT_OF_CPU),
                (
                    "loadtest",
                    (
                        "OutOfnvidia.com/gpu",
                        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
                        "requested: 8, used: 0, capacity: 0",
                    ),
                ),
                ("evidence", ("NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed")),
                ("conformance", ("OutOfmemory", "Pod was rejected: Node didn't have enough")),
                ("fence", ("UnexpectedAdmissionError", "Pod was rejected: Allocate failed")),
            )
        ),
        pytest.param(
            "loadtest",
            pod("j", "loadtest", LOADTEST_FAIL),
            JobResult(
                "read",
                failed=(
                    Finding("slow", "slow gpu=3 ratio=0.61 min_ratio=0.8"),
                    Finding(
                        "pcie-below-recorded",
                        "pcie-below-recorded pci=0000:2a:00.0 now=16GT/s,x8 recorded=16GT/s,x16",
                    ),
                ),
            ),
            id="loadtest-reasons",
        ),
        pytest.param(
            "loadtest",
            pod("j", "loadtest", '{"kind":"loadtest","verdict":"maybe"}'),
            JobResult(
                "unreadable",
                "pod j-abcde: not a load-test summary (kind 'loadtest', verdict 'maybe')",
            ),
            id="loadtest-bad-verdict",
        ),
        pytest.param(
            "evidence",
            pod("j", "evidence", EVIDENCE, "Succeeded"),
            JobResult("read", links=(RecordedLink("0000:18:00.0", "16GT/s,x16"),)),
            id="evidence-links",
        ),
        pytest.param(
            "fence",
            pod("j", "fence", FENCED, "Succeeded"),
            JobResult("read", passed=True),
            id="fence-read-back",
        ),
        pytest.param(
            "fence",
            pod("j", "fence", ABSENT),
            JobResult(
                "read", failed=(Finding("gpu-absent", "lspci -s 0000:99:00.0 reads all ff"),)
            ),
            id="fence-gpu-absent",
        ),
        pytest.param(
            "fence",
            pod("j", "fence", FENCED.replace('"fenced"', '"lifted"')),
            JobResult("unreadable", "pod j-abcde: fence summary of mode 'set' says 'lifted'"),
            id="fence-outcome-of-the-other-mode",
        ),
        pytest.param(
            "evidence",
            {"metadata": "x", "status": ["odd"]},
            JobResult("unreadable", "pod (no name) finished before its evidence container ended"),
            id="malformed-pod-never-raises",
        ),
    ],
)
def test_a_finished_pod_becomes_one_result(kind: str, the_pod: Any, expected: JobResult) -> None:
    assert result(kind, the_pod) == expected
    assert (
        result(kind, slim_pod(the_pod) if isinstance(the_pod["metadata"], dict) else the_pod)
        == expected
    )


def job(name: str, kind: str = "conformance", status: str = "failed") -> JobInfo:
    """The guard's Job `name`: its uid and what its template runs."""
    return JobInfo(
        name,
        kind,
        "b",
        status,
        uid=job_uid(name),  # type: ignore[arg-type]
        run=run_digest({"containers": [run(kind)]}),
    )


def test_the_newest_finished_pod_of_each_job_counts() -> None:
    pods = [
        pod("a", "conformance", FAIL, created="2026-09-21T05:00:00Z", name="a-1"),
        pod("a", "conformance", "", created="2026-09-21T05:01:00Z", name="a-2"),
        pod("b", "conformance", PASS, "Succeeded"),
        {"metadata": {"name": "agent-x", "labels": {}}, "status": {"phase": "Failed"}},
    ]
    jobs = attach([job("a"), job("b", status="succeeded"), job("c")], pods)
    assert [(j.name, j.result and j.result.state) for j in jobs] == [
        ("a", "unreadable"),
        ("b", "read"),
        ("c", None),
    ]
    assert jobs[0].result and "pod a-2" in jobs[0].result.problem


@pytest.mark.parametrize(
    ("status", "message", "problem"),
    [
        ("succeeded", FAIL, "job succeeded but its summary says it failed"),
        ("failed", PASS, "job failed but its summary says it passed"),
        pytest.param(
            "succeeded",
            ABSENT,
            "job succeeded but its summary says it failed",
            id="fence-absent-but-succeeded",
        ),
    ],
)
def test_a_summary_that_contradicts_its_job_is_not_trusted(
    status: str, message: str, problem: str
) -> None:
    kind = "fence" if "fence-summary" in message else "conformance"
    (found,) = attach([job("a", kind, status=status)], [pod("a", kind, message)])
    assert found.result == JobResult("unreadable", problem)


LOADTEST_PASS = json.dumps({"kind": "loadtest", "verdict": "pass", "reasons": []})
NOT_OWNED = "is not controlled by job/a"


@pytest.mark.parametrize(
    ("kind", "status", "the_pod", "problem"),
    [
        pytest.param(
            "loadtest",
            "succeeded",
            pod("a", "loadtest", LOADTEST_FAIL, "Succeeded"),
            "job succeeded but its summary says it failed",
            id="loadtest-verdict-fail",
        ),
        pytest.param(
            "loadtest",
            "succeeded",
            pod("a", "loadtest", "verdict: pass", "Succeeded"),
            "pod a-abcde: ",
            id="loadtest-garbage",
        ),
        pytest.param(
            "loadtest",
            "succeeded",
            pod(
                "a",
                "loadtest",
                LOADTEST_PASS,
                "Succeeded",
                owner="0b9c6d1e-0000-4000-8000-00000000dead",
            ),
            NOT_OWNED,
            id="loadtest-pod-of-another-controller",
        ),
        pytest.param(
            "loadtest",
            "succeeded",
            pod("a", "loadtest", LOADTEST_PASS, "Succeeded", owner=""),
            NOT_OWNED,
            id="loadtest-orphan-pod-no-controller",
        ),
        pytest.param(
            "loadtest",
            "succeeded",
            pod("a", "loadtest", LOADTEST_PASS, "Succeeded", image="registry.example/easy:1"),
            "runs other containers than job/a",
            id="loadtest-pod-runs-another-image",
        ),
        pytest.param(
            "loadtest",
            "succeeded",
            pod("a", "loadtest", LOADTEST_PASS, "Succeeded", ran_on="gpu-healthy"),
            "ran on node gpu-healthy, not on job/a's node b",
            id="loadtest-pod-adopted-from-another-node",
        ),
        pytest.param(
            "conformance",
            "succeeded",
            pod("a", "conformance", PASS, "Succeeded", ran_on=""),
            "ran on node (none)",
            id="conformance-pod-never-placed",
        ),
        pytest.param(
            "conformance",
            "succeeded",
            pod(
                "a", "conformance", PASS, "Succeeded", owner="0b9c6d1e-0000-4000-8000-00000000dead"
            ),
            NOT_OWNED,
            id="conformance-pod-of-another-controller",
        ),
        pytest.param(
            "conformance",
            "succeeded",
            pod("a", "conformance", "PASS", "Succeeded"),
            "pod a-abcde: ",
            id="conformance-garbage",
        ),
    ],
)
def test_a_result_counts_only_from_a_pod_the_job_controls_and_its_own_pass(
    kind: str, status: str, the_pod: dict[str, Any], problem: str
) -> None:
    """The Job's status alone is never the result: the Pod must be the Job's (controller uid,
    containers) and its summary must say pass (docs/security.md, "Job results")."""
    (found,) = attach([job("a", kind, status)], [slim_pod(the_pod)])
    assert found.result is not None and found.result.state == "unreadable"
    assert problem in found.result.problem
    # a Pod that is not the Job's own makes the Job one the guard did not make (check_jobs)
    assert found.result.foreign == (
        problem not in ("pod a-abcde: ", "job succeeded but its summary says it failed")
    )


def test_a_pod_the_job_controls_with_a_pass_is_read() -> None:
    (found,) = attach(
        [job("a", "loadtest", "succeeded")],
        [slim_pod(pod("a", "loadtest", LOADTEST_PASS, "Succeeded"))],
    )
    assert found.result == JobResult("read", passed=True)


def test_results_reach_the_snapshot_and_round_trip_through_json() -> None:
    s = S
    labels = {
        "app.kubernetes.io/name": "gpu-node-guard",
        "app.kubernetes.io/component": "conformance",
    }
    meta = {
        "name": "a",
        "namespace": s.jobs_namespace,
        "labels": labels,
        "uid": job_uid("a"),
        "annotations": {"gpu-node-guard.io/node": "b"},
    }
    template = {"spec": {"containers": [run("conformance")]}}
    jobs = (
        {"kind": "Job", "metadata": meta, "spec": {"template": template}, "status": {"failed": 1}},
    )
    node = {"kind": "Node", "metadata": {"name": "b"}, "status": {}}
    nodes = parse_nodes((node,), Annotations(s.annotation_prefix), "test")[0]
    objs = ClusterObjects(nodes, jobs, None, pods=(slim_pod(pod("a", "conformance", FAIL)),))
    snap = build_snapshot(NOW, objs, PromView(), s)
    assert snap.jobs[0].result and snap.jobs[0].result.failed[0].item == "ipvs-loaded"
    assert round_trips(snap)


@pytest.mark.parametrize(
    ("expected_gpus", "passes"),
    [(2, True), (3, False)],  # the numpy backend shows 2 GPUs
)
def test_the_load_tests_own_termination_message_is_what_the_guard_reads(
    tmp_path: Path, expected_gpus: int, passes: bool
) -> None:
    """The contract from both sides: `loadtest run` writes it, guard.read.job_results reads it."""
    from click.testing import CliRunner

    from guard.loadtest.cli import loadtest
    from tests.numpy_backend import cpu

    log = tmp_path / "termination-log"
    log.write_text("")
    args = [
        "run",
        "--size",
        "32",
        "--min-ratio",
        "0.05",
        "--no-allreduce",
        "--expected-gpus",
        str(expected_gpus),
        "--duration-s",
        "0.1",
        "--termination-log",
        str(log),
    ]
    run = CliRunner().invoke(loadtest, args, obj=cpu())
    assert run.exit_code == (0 if passes else 1), run.output
    found = result(
        "loadtest", pod("j", "loadtest", log.read_text(), "Succeeded" if passes else "Failed")
    )
    assert (found.state, found.passed) == ("read", passes)
    assert [f.item for f in found.failed] == ([] if passes else ["gpu-count"])
