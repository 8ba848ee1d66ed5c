"""Every Prometheus value is checked where it enters (guard.doors.prom, guard.read.prom_view): one
bad series makes its node unreadable for the cycle and every other node is planned as usual; what is
wrong with an answer as a whole aborts, naming the query and the value.

A fake Prometheus (`responses`) answers each query of one cycle by name; gpu-a has Xid 79 with
its GPU loss held, gpu-b has Xid 48 with its loss held (a second candidate, so a plan that still
sees gpu-b says `one-per-cycle` for it). Each row breaks one series of gpu-b, or one answer.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import pytest
import responses

from guard.actions import Cordon, EmitEvent, Skip
from guard.codec import queries
from guard.doors.prom import PromClient, PromError
from guard.model import PromUnreadable
from guard.names import Annotations
from guard.plan import plan_cycle
from guard.read import ClusterObjects, build_snapshot, parse_nodes
from guard.read.prom_view import missing_input, read_prom
from guard.settings import Settings, SettingsError
from tests.builders import NOW, TEMPLATES

URL = "http://prom.test:9090"
S = Settings(prometheus_url=URL, boot_check=False)  # no conformance Jobs beside the plan
T = NOW.timestamp()
UUID_A = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
UUID_B = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
GPU_B = {"gpu": "2", "UUID": UUID_B, "pci_bus_id": "00000000:3B:00.0", "Hostname": "gpu-b"}
Answers = dict[str, dict[str, Any]]


def vector(*items: tuple[dict[str, str], str]) -> dict[str, Any]:
    result = [{"metric": labels, "value": [T, value]} for labels, value in items]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def held(node: str, minutes: int = 15) -> dict[str, Any]:
    """A loss-history series: loss at every step of the last `minutes`."""
    points = [[T - 60 * m, "1"] for m in range(minutes, -1, -1)]
    return {"metric": {"node": node}, "values": points}


def matrix(*series: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def world() -> Answers:
    """Every query of the cycle answered: two faulted nodes, everything else quiet."""
    answers: Answers = {
        q.name: matrix() if q.kind == "matrix" else vector() for q in queries.guard_queries(S)
    }
    for name in answers:
        if name.startswith("input-"):
            answers[name] = vector(({}, "2"))
    gpu_a = {"gpu": "4", "UUID": UUID_A, "pci_bus_id": "00000000:99:00.0", "Hostname": "gpu-a"}
    answers["hardware-xid"] = vector((gpu_a, "79"), (dict(GPU_B), "48"))
    answers["loss-history"] = matrix(held("gpu-a"), held("gpu-b"))
    answers["nvml-mismatch-history"] = matrix()
    hosts = vector(({"Hostname": "gpu-a"}, "8"), ({"Hostname": "gpu-b"}, "8"))
    answers["xid-hosts"] = answers["exporter-hosts"] = hosts
    return answers


def serve(answers: Answers) -> None:
    by_promql = {q.promql: q.name for q in queries.guard_queries(S)}

    def reply(request: Any) -> tuple[int, dict[str, str], str]:
        import json

        form = parse_qs(request.body)
        assert form["partial_response"] == ["false"]  # Thanos: the whole answer or an error
        return (
            200,
            {"Content-Type": "application/json"},
            json.dumps(answers[by_promql[form["query"][0]]]),
        )

    responses.add_callback(responses.POST, f"{URL}/api/v1/query", callback=reply)


def raw_node(name: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": "boot-1"},
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "7"},
        },
    }


def cycle(answers: Answers) -> tuple[Any, ...]:
    """One cycle's plan over the fake answers (the Nodes from the API: gpu-a, gpu-b)."""
    serve(answers)
    view = read_prom(PromClient(URL, timeout_s=2), S, NOW, {"gpu-a", "gpu-b"})
    raw = (raw_node("gpu-a"), raw_node("gpu-b"))
    nodes = parse_nodes(raw, Annotations(S.annotation_prefix), "the API server")[0]
    objs = ClusterObjects(nodes=nodes, jobs=(), ledger=None)
    return plan_cycle(build_snapshot(NOW, objs, view, S), S, TEMPLATES)


# ---- rows: one change to the world each -------------------------------------------------


def gpu_b_label(label: str, value: str) -> Callable[[Answers], None]:
    def change(a: Answers) -> None:
        a["hardware-xid"]["data"]["result"][1]["metric"][label] = value

    return change


def gpu_b_value(value: str) -> Callable[[Answers], None]:
    def change(a: Answers) -> None:
        a["hardware-xid"]["data"]["result"][1]["value"][1] = value

    return change


def counted_xid(xid: str) -> Callable[[Answers], None]:
    def change(a: Answers) -> None:
        a["hardware-xid-counted"] = vector(({**GPU_B, "xid": xid}, "1"))

    return change


def duplicate(a: Answers) -> None:
    series = a["hardware-xid"]["data"]["result"]
    series.append(copy.deepcopy(series[1]))


def disagreeing(a: Answers) -> None:
    """Two exporters scrape the same GPU and say different Xids."""
    series = a["hardware-xid"]["data"]["result"]
    other = copy.deepcopy(series[1])
    other["metric"]["instance"], other["value"][1] = "10.0.0.9:9400", "79"
    series[1]["metric"]["instance"] = "10.0.0.8:9400"
    series.append(other)


def ksm_node(value: str) -> Callable[[Answers], None]:
    def change(a: Answers) -> None:
        a["loss-history"]["data"]["result"][1]["metric"]["node"] = value

    return change


FORGED = UUID_B + "\n2026-09-21T05:55:00Z xid-79 0000:3b:00.0 GPU-forged gpu-node-guard"
UNREADABLE = [
    # (change, node named by the WARN line, label, the value as the line shows it)
    pytest.param(
        gpu_b_label("UUID", FORGED), "gpu-b", "UUID", repr(FORGED[:60]), id="uuid-newline"
    ),
    pytest.param(
        gpu_b_label("UUID", "GPU-0f1e2d3c 4b5a"),
        "gpu-b",
        "UUID",
        "'GPU-0f1e2d3c 4b5a'",
        id="uuid-space",
    ),
    pytest.param(
        gpu_b_label("UUID", "GPU-" + "a" * 296),
        "gpu-b",
        "UUID",
        "(300 characters)",
        id="uuid-300-characters",
    ),
    pytest.param(
        gpu_b_label("uuid", "MIG-GPU-0f1e2d3c/1/0"),
        "gpu-b",
        "uuid",
        "'MIG-GPU-0f1e2d3c/1/0'",
        id="uuid-not-the-gpu-form",
    ),
    pytest.param(
        gpu_b_label("pci_bus_id", "00000000:3B:00.0\nforged"),
        "gpu-b",
        "pci_bus_id",
        "'00000000:3B:00.0\\nforged'",
        id="pci-newline",
    ),
    pytest.param(
        gpu_b_label("pci_bus_id", "00000000:3B:00.0 "),
        "gpu-b",
        "pci_bus_id",
        "'00000000:3B:00.0 '",
        id="pci-space",
    ),
    pytest.param(
        gpu_b_label("pci_bus_id", "0" * 300),
        "gpu-b",
        "pci_bus_id",
        "(300 characters)",
        id="pci-300-characters",
    ),
    pytest.param(
        gpu_b_label("Hostname", "gpu-b\nreason=xid-79"),
        "",
        "Hostname",
        "'gpu-b\\nreason=xid-79'",
        id="hostname-newline",
    ),
    pytest.param(gpu_b_label("Hostname", "gpu b"), "", "Hostname", "'gpu b'", id="hostname-space"),
    pytest.param(
        gpu_b_label("Hostname", "g" * 300),
        "",
        "Hostname",
        "(300 characters)",
        id="hostname-300-characters",
    ),
    # the node label names gpu-b validly: the bad Hostname is blamed on it
    pytest.param(
        lambda a: (gpu_b_label("node", "gpu-b")(a), gpu_b_label("Hostname", "gpu b")(a)),
        "gpu-b",
        "Hostname",
        "'gpu b'",
        id="hostname-space-beside-a-node-label",
    ),
    pytest.param(ksm_node("gpu-b\nforged"), "", "node", "'gpu-b\\nforged'", id="ksm-node-newline"),
    pytest.param(ksm_node("a" * 254), "", "node", "'aaaa", id="ksm-node-too-long"),
    pytest.param(gpu_b_value("-79"), "gpu-b", "value", "-79", id="xid-negative"),
    pytest.param(gpu_b_value("0.5"), "gpu-b", "value", "0.5", id="xid-fraction"),
    pytest.param(gpu_b_value("79.9"), "gpu-b", "value", "79.9", id="xid-79.9-is-not-79"),
    pytest.param(gpu_b_value("1e300"), "gpu-b", "value", "1e+300", id="xid-1e300"),
    pytest.param(gpu_b_value("NaN"), "gpu-b", "value", "NaN", id="xid-nan"),
    pytest.param(gpu_b_value("+Inf"), "gpu-b", "value", "+Inf", id="xid-inf"),
    pytest.param(counted_xid("²"), "gpu-b", "xid", "'²'", id="xid-label-superscript"),
    pytest.param(counted_xid("-79"), "gpu-b", "xid", "'-79'", id="xid-label-negative"),
    pytest.param(counted_xid("0"), "gpu-b", "xid", "'0'", id="xid-label-zero"),
    pytest.param(duplicate, "gpu-b", "labels", "duplicate series", id="duplicate-series"),
    pytest.param(
        lambda a: a.update({"hardware-xid-counted": vector((GPU_B, "1"))}),
        "gpu-b",
        "xid",
        "lacks label 'xid'",
        id="counted-series-without-its-xid",
    ),
    pytest.param(disagreeing, "gpu-b", "value", "'48 and 79'", id="two-series-of-one-gpu"),
]


@pytest.mark.parametrize(("change", "node", "label", "shown"), UNREADABLE)
@responses.activate
def test_a_bad_series_makes_only_its_node_unreadable(change, node, label, shown):
    answers = world()
    change(answers)
    plan = cycle(answers)
    # gpu-a, faulted beside it, is cordoned as in any cycle
    assert [(a.node, a.reason) for a in plan if isinstance(a, Cordon)] == [("gpu-a", "xid-79")]
    (warn,) = [a for a in plan if isinstance(a, Skip) and a.reason == "unreadable"]
    assert (warn.node, warn.level) == (node, "WARN")
    assert f" {label}=" in warn.detail and shown in warn.detail
    # gpu-b is left alone: no other line, nothing written but its Warning Event (which names
    # the query and label, not the value); nothing forged reaches a line
    others = [a for a in plan if a.node == "gpu-b" and a is not warn]
    event = [("EmitEvent", "unreadable")] if node == "gpu-b" else []  # a series of no node: none
    assert [(type(a).__name__, a.reason) for a in others] == event
    assert all("forged" not in a.message for a in others if isinstance(a, EmitEvent))
    assert all("\n" not in str(a) for a in plan)
    assert "GPU-forged" not in " ".join(str(a) for a in plan if not isinstance(a, Skip))


@responses.activate
def test_without_a_bad_series_both_nodes_are_planned():
    plan = cycle(world())
    assert [(type(a).__name__, a.node, a.reason) for a in plan if isinstance(a, Cordon | Skip)] == [
        ("Skip", "", "fabric-not-applicable"),  # the world's exporter has no fabric field
        ("Cordon", "gpu-a", "xid-79"),
        ("Skip", "gpu-b", "one-per-cycle"),
    ]


@responses.activate
def test_the_view_names_query_label_and_value_and_keeps_no_fact_of_the_node():
    answers = world()
    gpu_b_value("79.9")(answers)
    serve(answers)
    view = read_prom(PromClient(URL, timeout_s=2), S, NOW, {"gpu-a", "gpu-b"})
    assert view.unreadable == (
        PromUnreadable(
            "gpu-b", "hardware-xid", "value", "79.9", "not an Xid (an integer in 1..172)"
        ),
    )
    assert {g.node for g in view.hardware_xids} == {"gpu-a"}
    assert [n for n, _ in view.loss_since] == ["gpu-a"]


def with_answer(query: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Answers], None]:
    def apply(a: Answers) -> None:
        change(a[query])

    return apply


def warnings(*texts: str) -> Callable[[dict[str, Any]], None]:
    return lambda answer: answer.update(warnings=list(texts))


def stamp(value: Any, query: str = "hardware-xid") -> Callable[[Answers], None]:
    def change(a: Answers) -> None:
        data = a[query]["data"]
        if data["resultType"] == "matrix":
            data["result"][0]["values"][-1][0] = value
        else:
            data["result"][0]["value"][0] = value

    return change


ABORTS = [
    pytest.param(
        with_answer("hardware-xid", warnings("store 10.0.0.5:10901 is unavailable")),
        "query hardware-xid: partial answer, the engine warns: store 10.0.0.5:10901 is unavailable",
        id="thanos-partial-response-warning",
    ),
    pytest.param(
        with_answer("loss-history", warnings("PromQL warning: x", "partial response: a", "b")),
        "query loss-history: partial answer, the engine warns: partial response: a",
        id="a-partial-warning-among-others",
    ),
    pytest.param(
        with_answer(
            "cordoned",
            warnings(
                "receive series from Addr: 10.0.0.5:10901: rpc error: code = Unavailable",
                "fetch series for Addr: 10.0.0.6:10901: EOF",
            ),
        ),
        "query cordoned: partial answer, the engine warns: receive series from Addr: 10.0.0.5"
        ":10901: rpc error: code = Unavailable (and 1 more)",
        id="thanos-store-errors",
    ),
    pytest.param(
        with_answer("hardware-xid", warnings("No StoreAPIs matched for this query")),
        "query hardware-xid: partial answer, the engine warns: No StoreAPIs matched",
        id="thanos-no-store",
    ),
    pytest.param(
        with_answer("cordoned", lambda answer: answer.update(isPartial=True)),
        "query cordoned: partial answer (isPartial: true)",
        id="victoriametrics-partial",
    ),
    pytest.param(stamp(-1.0), "query hardware-xid: sample timestamp -1.0", id="stamp-negative"),
    pytest.param(
        stamp(32503680000.0),
        "query hardware-xid: sample timestamp 32503680000.0 (3000-01-01T00:00:00Z) is"
        " not 2026-09-21T05:55:00Z",
        id="stamp-year-3000",
    ),
    pytest.param(stamp(T - 3600), "query hardware-xid: sample timestamp", id="stamp-an-hour-off"),
    pytest.param(
        stamp("48"),
        "query hardware-xid: sample timestamp '48' is not a number",
        id="stamp-a-string",
    ),
    pytest.param(
        stamp(1e300),
        "query hardware-xid: sample timestamp 1e+300 (out of range)",
        id="stamp-out-of-range",
    ),
    pytest.param(
        stamp(32503680000.0, "loss-history"),
        "query loss-history: sample timestamp 32503680000.0",
        id="matrix-stamp-future",
    ),
    pytest.param(
        stamp(T - 86400, "loss-history"),
        "query loss-history: sample timestamp",
        id="matrix-stamp-before-the-range",
    ),
    pytest.param(
        lambda a: a.update({"input-DCGM_FI_DEV_XID_ERRORS": vector(({}, "NaN"))}),
        "query input-DCGM_FI_DEV_XID_ERRORS: value NaN; the series names no node",
        id="nan-naming-no-node",
    ),
    pytest.param(
        with_answer(
            "loss-history",
            lambda answer: answer["data"]["result"][1].update(metric={"instance": "10.0.0.8:8080"}),
        ),
        "query loss-history: a series lacks label 'node'; the series names no node",
        id="ksm-series-without-node",
    ),
    pytest.param(
        lambda a: a.update({"input-kube_pod_status_phase": vector()}),
        "input metric kube_pod_status_phase has no series",
        id="an-input-without-series",
    ),
    pytest.param(
        lambda a: a.update({"hardware-xid": matrix()}),
        "query hardware-xid: expected resultType vector, got 'matrix'",
        id="wrong-result-type",
    ),
]


@pytest.mark.parametrize(("change", "message"), ABORTS)
@responses.activate
def test_a_wrong_answer_aborts_naming_the_query_and_the_value(change, message):
    answers = world()
    change(answers)
    with pytest.raises(PromError) as err:
        cycle(answers)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            with_answer(
                "hardware-xid",
                lambda answer: answer.update(infos=["PromQL info: metric might not be a counter"]),
            ),
            id="prometheus-3-infos",
        ),
        pytest.param(
            with_answer("hardware-xid", warnings("PromQL info: metric might not be a counter")),
            id="prometheus-2.5x-info-in-warnings",
        ),
        pytest.param(with_answer("hardware-xid", warnings()), id="empty-warnings"),
    ],
)
@responses.activate
def test_an_informational_annotation_is_a_whole_answer(change):
    answers = world()
    change(answers)
    assert [a.node for a in cycle(answers) if isinstance(a, Cordon)] == ["gpu-a"]


@responses.activate
def test_a_warning_that_does_not_say_partial_is_reported_once_and_the_answer_used():
    """Before, any warning aborted the cycle; one that does not say data is missing (PromQL's,
    an engine's note) is handed to the run's log once per text and the cycle plans as usual."""
    answers = world()
    note = "PromQL warning: encountered a mix of histograms and floats for metric name"
    for name in ("hardware-xid", "loss-history", "cordoned"):
        answers[name]["warnings"] = [note]
    answers["cordoned"]["warnings"].append("dedup: replica label ignored\non two lines")
    serve(answers)
    warned: list[tuple[str, str]] = []
    client = PromClient(URL, timeout_s=2, warn=lambda q, w: warned.append((q, w)))
    view = read_prom(client, S, NOW, {"gpu-a", "gpu-b"})
    assert warned == [("hardware-xid", note), ("cordoned", "dedup: replica label ignored")]
    assert view.hardware_xids


# ---- the exporter pins -------------------------------------------------------------------


def test_pins_go_into_every_exporter_selector():
    s = Settings(
        dcgm_selector='job="nvidia-dcgm-exporter"', ksm_selector='job="kube-state-metrics"'
    )
    found = {q.name: q.promql for q in queries.guard_queries(s)}
    assert found["hardware-xid"].startswith(
        'DCGM_FI_DEV_XID_ERRORS{job="nvidia-dcgm-exporter"} > 0'
    )
    assert found["input-kube_node_status_capacity"] == (
        'count(kube_node_status_capacity{resource="nvidia_com_gpu", job="kube-state-metrics"})'
    )
    for name, promql in found.items():
        for metric in ("DCGM_FI_DEV_XID_ERRORS", "kube_node_spec_unschedulable", "kube_pod_"):
            for at in range(len(promql)):
                if promql.startswith(metric, at) and not promql.startswith(
                    ("DCGM_FI_DEV_XID_ERRORS|", "kube_pod_status_ready"), at
                ):
                    rest = promql[at:].split("}", 1)[0]
                    assert "job=" in rest, (name, promql[at : at + 80])
    assert Settings() == Settings(dcgm_selector="", ksm_selector="")  # default: no pin


@pytest.mark.parametrize(
    "value",
    [
        "job=kube-state-metrics",
        'job="a"} or vector(1) #',
        'job="a\\"b"',
        'job="a\nb"',
        'job~"a"',
        '"a"',
        'job="a",',
    ],
)
def test_a_bad_pin_is_refused_at_start(value):
    with pytest.raises(SettingsError) as refused:
        Settings(ksm_selector=value)
    ((field, message),) = refused.value.problems
    assert field == "ksm_selector" and message.startswith("must be empty or comma-separated PromQL")


@responses.activate
def test_an_input_without_series_of_the_pinned_job_names_the_pin():
    s = Settings(prometheus_url=URL, ksm_selector='job="kube-state-metrics"')
    answers = world()
    answers["input-kube_node_spec_unschedulable"] = vector()
    by_promql = {q.promql: q.name for q in queries.guard_queries(s)}
    import json

    responses.add_callback(
        responses.POST,
        f"{URL}/api/v1/query",
        callback=lambda r: (200, {}, json.dumps(answers[by_promql[parse_qs(r.body)["query"][0]]])),
    )
    with pytest.raises(PromError) as err:
        read_prom(PromClient(URL), s, NOW, ())
    assert str(err.value) == (
        "input metric kube_node_spec_unschedulable has no series matching --ksm-selector"
        ' job="kube-state-metrics": check the exporter and scrape'
    )


CAPACITY = queries.DEVICE_PLUGIN_INPUT
ALL_INPUTS = {metric: 3.0 for metric, _ in queries.REQUIRED_INPUTS}


@pytest.mark.parametrize(
    ("counts", "dra_gpus", "missing"),
    [
        pytest.param(ALL_INPUTS, False, None, id="device-plugin-cluster"),
        pytest.param({**ALL_INPUTS, CAPACITY: 0.0}, False, CAPACITY, id="no-capacity-no-dra"),
        pytest.param({**ALL_INPUTS, CAPACITY: 0.0}, True, None, id="dra-only-cluster"),
        pytest.param(ALL_INPUTS, True, None, id="mixed-cluster"),
        pytest.param(
            {**ALL_INPUTS, CAPACITY: 0.0, "DCGM_FI_DEV_XID_ERRORS": 0.0},
            True,
            "DCGM_FI_DEV_XID_ERRORS",
            id="dra-only-without-dcgm",
        ),
        pytest.param(
            {**ALL_INPUTS, "kube_node_spec_unschedulable": 0.0},
            True,
            "kube_node_spec_unschedulable",
            id="dra-only-without-ksm-nodes",
        ),
        pytest.param({}, True, "kube_node_spec_unschedulable", id="nothing-answered"),
    ],
)
def test_the_device_plugin_capacity_is_waived_only_where_dra_publishes_gpus(
    counts, dra_gpus, missing
):
    assert missing_input(counts, dra_gpus) == missing


def _slice(driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    spec = {"driver": driver, "nodeName": "d", "pool": {"name": "d"}, "devices": devices}
    return {"kind": "ResourceSlice", "spec": spec}


def test_a_cluster_publishes_dra_gpus_only_with_a_gpu_of_the_nvidia_driver():
    gpu = {"name": "gpu-0", "attributes": {"uuid": {"string": UUID_A}}}
    assert ClusterObjects(
        (), (), None, resource_slices=(_slice("gpu.nvidia.com", [gpu]),)
    ).dra_gpus()
    others = (_slice("example.com", [gpu]), _slice("gpu.nvidia.com", []))
    assert not ClusterObjects((), (), None, resource_slices=others).dra_gpus()
    assert not ClusterObjects((), (), None).dra_gpus()


@responses.activate
def test_a_dra_only_cluster_reads_without_the_capacity_series_and_says_so_without_dra():
    answers = world()
    answers[queries.required_input_name(CAPACITY)] = vector()
    serve(answers)
    assert read_prom(PromClient(URL), S, NOW, ("gpu-a", "gpu-b"), dra_gpus=True).hardware_xids
    with pytest.raises(PromError) as err:
        read_prom(PromClient(URL), S, NOW, ("gpu-a", "gpu-b"))
    assert str(err.value) == (
        "input metric kube_node_status_capacity{resource=nvidia_com_gpu} has no series and no"
        " gpu.nvidia.com ResourceSlice publishes a GPU: check the exporter and scrape"
    )


@responses.activate
def test_a_run_retries_a_503_within_its_budget_and_counts_it(tmp_path):
    """`run` gives the Prometheus door the run's budget: the first query's 503 is retried, the
    cycle plans as usual, and the `done` line counts the retry."""
    from click.testing import CliRunner

    from guard.cli import cli

    responses.add(responses.POST, f"{URL}/api/v1/query", status=503, body="Service Unavailable")
    serve(world())
    snap = tmp_path / "cluster.json"
    snap.write_text(json.dumps({"kind": "List", "items": [raw_node("gpu-a"), raw_node("gpu-b")]}))
    args = ["run", "--prometheus-url", URL, "--cluster-snapshot", str(snap), "--at"]
    args += [NOW.isoformat(), "--output", "json", "--no-boot-check"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert [a["node"] for a in plan["actions"] if a["type"] == "cordon"] == ["gpu-a"]
    assert plan["counts"]["prometheus_retries"] == 1
    assert plan["counts"]["prometheus_requests"] == len(queries.guard_queries(S)) + 1
