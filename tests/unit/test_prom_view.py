"""The loss history and the DCGM join, read at the snapshot boundary (guard.read.prom_view)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guard.codec.series import loss_since
from guard.doors.prom import Series
from guard.model import NodeInfo, PromView
from guard.read.prom_view import JoinError, check_join, coverage_pairs
from guard.settings import Settings

NOW = datetime(2026, 9, 21, 5, 55, 0, tzinfo=UTC)
S = Settings(prometheus_url="http://unused")


def steps(*minutes_ago: float, node: str = "n") -> Series:
    return Series((("node", node),), tuple((NOW.timestamp() - 60 * m, 1.0) for m in minutes_ago))


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("series", "at", "expected"),
    [
        pytest.param(steps(3, 2, 1, 0), NOW, ago(180), id="run-up-to-now"),
        pytest.param(steps(9, 8, 2, 1, 0), NOW, ago(120), id="a-gap-breaks-the-run"),
        pytest.param(steps(3, 2, 1), NOW, None, id="no-loss-at-the-last-step"),
        pytest.param(steps(3, 2, 1, 0), NOW + timedelta(seconds=59), ago(180), id="off-minute"),
        pytest.param(steps(*range(30, -1, -1)), NOW, ago(1740), id="capped-at-the-history"),
        pytest.param(steps(0), NOW, NOW, id="one-step-is-zero-held"),
    ],
)
def test_loss_since(series, at, expected):
    found = dict(loss_since([series], at, 60, 1800))
    assert found.get("n") == expected


def node(name: str, gpus: int = 8) -> NodeInfo:
    return NodeInfo(name, "1", False, True, "boot", gpus, gpus)


def test_xid_series_that_name_no_node_abort_with_an_example_and_the_fix():
    view = PromView(xid_hosts=((("Hostname", "nvidia-dcgm-exporter-cwbcm"),),))
    with pytest.raises(JoinError) as err:
        check_join(view, (node("gpu-1"),))
    text = str(err.value)
    assert (
        'DCGM_FI_DEV_XID_ERRORS series names a Node (e.g. {Hostname="nvidia-dcgm-exporter-cwbcm"}'
        in text
    )
    assert "NODE_NAME" in text and "--dcgm-node-labels" in text and "\n" not in text


def test_one_naming_series_is_enough_and_missing_gpu_nodes_are_listed():
    hosts = ((("Hostname", "gpu-1"),), (("Hostname", "nvidia-dcgm-exporter-x"),))
    view = PromView(xid_hosts=hosts, exporter_hosts=hosts)
    nodes = (node("gpu-1"), node("gpu-2"), node("cpu-1", gpus=0))
    assert check_join(view, nodes) == ("gpu-2",)


def test_a_node_label_naming_a_node_wins_over_the_host_label():
    hosts = ((("node", "gpu-1"), ("Hostname", "nvidia-dcgm-exporter-x")),)
    assert check_join(PromView(xid_hosts=hosts, exporter_hosts=hosts), (node("gpu-1"),)) == ()


def test_no_xid_series_at_all_is_left_to_the_required_inputs():
    assert check_join(PromView(), (node("gpu-1"),)) == ("gpu-1",)


def test_coverage_line_names_five_nodes_and_counts_all():
    pairs = coverage_pairs(tuple(f"gpu-{i}" for i in range(7)))
    assert pairs["missing"] == 7
    assert pairs["nodes"] == "gpu-0,gpu-1,gpu-2,gpu-3,gpu-4,…"
