"""Cluster objects → plain data, the same way for the API and for a List file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.example import __file__ as example_init
from guard.ledger import parse_time
from guard.model import CordonRecord, GpuRef, PromView
from guard.names import Annotations
from guard.read import (
    ClusterObjects,
    SnapshotError,
    build_snapshot,
    load_cluster_file,
    parse_nodes,
)
from guard.read.objects import is_guard_job, job_info, node_info
from tests.builders import NOW, S
from tests.snapshot_json import round_trips

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
    assert all(not n.unreadable for n in snap.nodes)


def test_json_list_file_equals_yaml(tmp_path):
    import yaml

    doc = yaml.safe_load(EXAMPLE.read_text())
    as_json = tmp_path / "snap.json"
    as_json.write_text(json.dumps(doc))
    assert load_cluster_file(as_json, S) == load_cluster_file(EXAMPLE, S)


def test_snapshot_round_trips_through_json():
    snap = build_snapshot(NOW, load_cluster_file(EXAMPLE, S), PromView(), S)
    assert round_trips(snap)


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
    assert is_guard_job(job, "gpu-node-guard")
    info = job_info(job, KEYS)
    assert (info.status, info.node, info.kind, info.problem) == (state, "b", "loadtest", "")


@pytest.mark.parametrize(
    ("status", "ended"),
    [
        pytest.param({"active": 1, "startTime": "2026-09-21T05:00:00Z"}, None, id="running"),
        pytest.param(
            {"succeeded": 1, "completionTime": "2026-09-21T05:40:00Z"},
            "2026-09-21T05:40:00Z",
            id="completion-time",
        ),
        pytest.param(
            {
                "failed": 1,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "lastTransitionTime": "2026-09-21T05:41:00Z",
                    }
                ],
            },
            "2026-09-21T05:41:00Z",
            id="failed-condition-time",
        ),
        pytest.param({"succeeded": 1}, None, id="no-time"),
    ],
)
def test_a_finished_jobs_end_is_its_completion_or_its_end_conditions_time(status, ended):
    """A fence lift's end, not its creation, tells whether it ran after the guard's read-back."""
    job = {"metadata": {"name": "j", "labels": {"app.kubernetes.io/component": "fence"}}}
    info = job_info({**job, "status": status}, KEYS)
    assert info.ended == (parse_time(ended) if ended else None)


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        pytest.param("Complete", "status is not an object: 'Complete'", id="status-a-string"),
        pytest.param(
            {"succeeded": "1"}, "status.succeeded is not a number: '1'", id="counter-a-string"
        ),
        pytest.param(
            {"conditions": {"type": "Failed"}},
            "status.conditions is not a list",
            id="conditions-not-a-list",
        ),
    ],
)
def test_malformed_job_is_unreadable_not_fatal(status, problem):
    job = {
        "metadata": {"name": "j", "labels": {"app.kubernetes.io/name": "gpu-node-guard"}},
        "status": status,
    }
    info = job_info(job, KEYS)
    assert info.status == "unreadable"
    assert info.problem.startswith(problem)


def test_foreign_jobs_are_not_the_guards():
    job = {"metadata": {"name": "j", "namespace": "gpu-node-guard", "labels": {}}}
    assert not is_guard_job(job, "gpu-node-guard")
    assert not is_guard_job({"metadata": {"labels": ["x"]}}, "gpu-node-guard")


def test_node_without_gpu_resources_has_zero():
    info = node_info({"metadata": {"name": "cpu", "resourceVersion": "1"}, "status": {}}, KEYS)
    assert (info.gpu_capacity, info.gpu_allocatable, info.ready) == (0, 0, False)
    assert info.unreadable == ()


def test_guard_annotations_become_typed_fields_once():
    notes = {
        KEYS.reason: "xid-79",
        KEYS.at: "2026-09-21T14:55:00+09:00",
        KEYS.boot_id: "boot-1",
        KEYS.gpu_capacity: "8",
        KEYS.gpu: "00000000:99:00.0 GPU-1a2b",
        "ops/other": "x",
    }
    info = node_info({"metadata": {"name": "b", "uid": "u-1", "annotations": notes}}, KEYS)
    assert info.cordon == CordonRecord(
        "xid-79", 79, NOW, "boot-1", 8, GpuRef("0000:99:00.0", "GPU-1a2b")
    )
    assert info.uid == "u-1"
    assert dict(info.annotations) == {k: v for k, v in notes.items() if k != "ops/other"}


def test_nodes_and_jobs_without_a_name_are_reported_and_the_rest_read():
    guard_job = {
        "kind": "Job",
        "metadata": {"labels": {"app.kubernetes.io/name": "gpu-node-guard"}},
    }
    nodes, ignored = parse_nodes(
        ({"kind": "Node", "metadata": {}}, {"metadata": {"name": "n"}}), KEYS, "test"
    )
    objs = ClusterObjects(nodes, (guard_job,), None, ignored=ignored)
    snap = build_snapshot(NOW, objs, PromView(), S)
    assert [n.name for n in snap.nodes] == ["n"]
    assert snap.ignored == ("Node without metadata.name", "guard Job without metadata.name")


def _one_node():
    return parse_nodes(({"metadata": {"name": "n"}},), KEYS, "test")[0]


def test_non_text_ledger_value_is_one_unreadable_line_of_its_key():
    objs = ClusterObjects(_one_node(), (), {"data": {"n": 5, "m": "power cycled\n"}})
    snap = build_snapshot(NOW, objs, PromView(), S)
    assert [(ln.node, ln.problem) for ln in snap.ledger] == [
        ("m", "not a ledger line"),
        ("n", "value is not text"),
    ]


def test_ledger_data_that_is_not_a_mapping_is_rejected():
    objs = ClusterObjects(_one_node(), (), {"data": ["n"]})
    with pytest.raises(SnapshotError, match="data is not a mapping"):
        build_snapshot(NOW, objs, PromView(), S)


def test_typed_records_and_unreadable_values_round_trip_through_json():
    from tests.builders import KEYS as K
    from tests.builders import UUID, node, snapshot

    records = {
        K.cancelled: f"boot-1 {UUID} xid-79 2026-09-21T05:10:00Z",
        K.returned: "2026-09-01T00:00:00Z job/gng-lt-b-1",
        K.reset_done: "2026-09-21T05:20:00Z by alice",
    }
    snap = snapshot(
        node("b", cordoned=True, guarded_xid=79, extra=records),
        node("bad", guarded_xid=79, extra={K.at: "9999-12-31T23:59:59-23:59"}),
    )
    assert snap.node("b").cancelled is not None and snap.node("bad").unreadable
    assert round_trips(snap)


def _json_list(tmp_path, items):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "items": items, "kind": "List"}))
    return path


def test_a_streamed_node_with_a_deeply_nested_value_is_unreadable_not_a_crash(tmp_path):
    deep: object = "x"
    for _ in range(600):
        deep = [deep]
    node = {"kind": "Node", "metadata": {"name": "n"}, "spec": {"taints": deep}}
    (info,) = load_cluster_file(_json_list(tmp_path, [node]), S).nodes
    assert [u.where for u in info.unreadable] == ["spec.taints"]


def test_a_kept_object_nested_too_deep_is_refused_in_one_line(tmp_path):
    deep: object = {}
    for _ in range(120):
        deep = {"a": deep}
    job = {
        "kind": "Job",
        "metadata": {
            "name": "j",
            "namespace": S.jobs_namespace,
            "labels": {"app.kubernetes.io/name": "gpu-node-guard"},
        },
        "spec": deep,
    }
    with pytest.raises(SnapshotError, match="nested deeper than 100 levels"):
        load_cluster_file(
            _json_list(tmp_path, [{"kind": "Node", "metadata": {"name": "n"}}, job]), S
        )
