"""Cluster objects → plain data, the same way for the API and for a List file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.example import __file__ as example_init
from guard.model import PromView, Snapshot
from guard.names import Annotations
from guard.snapshot import (
    SnapshotError,
    build_snapshot,
    gpu_pod,
    job_info,
    load_cluster_file,
    node_info,
)
from tests.builders import NOW, S

KEYS = Annotations("gpu-node-guard.io/")
EXAMPLE = Path(example_init).with_name("cluster-snapshot.yaml")


def test_bundled_snapshot_loads():
    objs = load_cluster_file(EXAMPLE, S)
    snap = build_snapshot(NOW, objs, PromView(), S)
    assert [n.name for n in snap.nodes] == [f"gpu-node-{c}" for c in "abcde"]
    b = snap.node("gpu-node-b")
    assert (b.gpu_capacity, b.gpu_allocatable, b.unschedulable, b.ready) == (8, 7, False, True)
    a = snap.node("gpu-node-a")
    assert a.unschedulable and a.annotations == ()  # foreign annotations are not the guard's
    assert snap.gpu_pods == ()  # the file's Pods are not read: GPU pods come from PromView
    assert len(snap.ledger) == 1 and snap.ledger[0].entry.recorder == "manual"
    assert snap.ledger_resource_version == "880012"


def test_json_list_file_equals_yaml(tmp_path):
    import yaml

    doc = yaml.safe_load(EXAMPLE.read_text())
    as_json = tmp_path / "snap.json"
    as_json.write_text(json.dumps(doc))
    assert load_cluster_file(as_json, S) == load_cluster_file(EXAMPLE, S)


def test_snapshot_round_trips_through_json():
    snap = build_snapshot(NOW, load_cluster_file(EXAMPLE, S), PromView(), S)
    assert Snapshot.from_json(snap.to_json()) == snap


@pytest.mark.parametrize(
    ("pod", "gpus"),
    [
        pytest.param(
            {
                "status": {"phase": "Running"},
                "metadata": {"name": "p", "namespace": "x"},
                "spec": {
                    "nodeName": "n",
                    "containers": [
                        {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                        {"resources": {"requests": {"nvidia.com/gpu": 1}}},
                    ],
                },
            },
            3,
            id="limits-and-requests-summed",
        ),
        pytest.param(
            {
                "status": {"phase": "Succeeded"},
                "metadata": {"name": "p"},
                "spec": {
                    "nodeName": "n",
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                },
            },
            None,
            id="finished-pod-ignored",
        ),
        pytest.param(
            {
                "status": {"phase": "Running"},
                "metadata": {"name": "p"},
                "spec": {"nodeName": "n", "containers": [{"resources": {}}]},
            },
            None,
            id="cpu-pod-ignored",
        ),
        pytest.param(
            {
                "status": {"phase": "Running"},
                "metadata": {
                    "name": "lt",
                    "namespace": "gpu-node-guard",
                    "labels": {"app.kubernetes.io/name": "gpu-node-guard"},
                },
                "spec": {
                    "nodeName": "n",
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
            },
            None,
            id="guard-load-test-pod-ignored",
        ),
    ],
)
def test_gpu_pods(pod, gpus):
    found = gpu_pod(pod, "gpu-node-guard")
    assert (found.gpus if found else None) == gpus


@pytest.mark.parametrize(
    ("status", "state"),
    [
        pytest.param({}, "running", id="new-job-running"),
        pytest.param({"active": 1}, "running", id="active-running"),
        pytest.param({"succeeded": 1}, "succeeded", id="succeeded"),
        pytest.param({"failed": 1}, "failed", id="failed-count"),
        pytest.param(
            {"conditions": [{"type": "Failed", "status": "True"}]},
            "failed",
            id="failed-deadline-condition",
        ),
    ],
)
def test_job_status(status, state):
    job = {
        "metadata": {
            "name": "j",
            "namespace": "gpu-node-guard",
            "labels": {
                "app.kubernetes.io/name": "gpu-node-guard",
                "app.kubernetes.io/component": "loadtest",
                "gpu-node-guard.io/node": "b",
            },
        },
        "status": status,
    }
    info = job_info(job, KEYS, "gpu-node-guard")
    assert (info.status, info.node, info.kind) == (state, "b", "loadtest")


def test_foreign_jobs_are_not_the_guards():
    job = {"metadata": {"name": "j", "namespace": "gpu-node-guard", "labels": {}}}
    assert job_info(job, KEYS, "gpu-node-guard") is None


def test_node_without_gpu_resources_has_zero():
    info = node_info({"metadata": {"name": "cpu", "resourceVersion": "1"}, "status": {}}, KEYS)
    assert (info.gpu_capacity, info.gpu_allocatable, info.ready) == (0, 0, False)


def test_malformed_ledger_data_is_rejected():
    from guard.snapshot import ClusterObjects

    objs = ClusterObjects(({"metadata": {"name": "n"}},), (), (), {"data": {"n": 5}})
    with pytest.raises(SnapshotError, match="non-text data"):
        build_snapshot(NOW, objs, PromView(), S)
