"""The exact PromQL of guard/queries.py, evaluated by a real Prometheus over known scenarios."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guard import queries
from guard.prom import PromClient, PromError
from guard.settings import Settings
from guard.snapshot import read_prom
from tests.prometheus.conftest import ONSET, T0

pytestmark = pytest.mark.prometheus
S = Settings(prometheus_url="unused")
PARAMS = queries.IsolationParams(
    S.user_code_xids, S.fast_path_xids, S.hold_window_s, S.fast_hold_window_s, S.query_step_s
)


def selected(prom, after: timedelta) -> set[str]:
    client = PromClient(prom.url)
    found = client.vector(
        "isolation-candidates", queries.isolation_candidates(PARAMS), ONSET + after, ("node",)
    )
    return {s.label("node") for s in found}


@pytest.mark.parametrize(
    ("node", "after", "expected"),
    [
        pytest.param("fast79", timedelta(minutes=2, seconds=30), True, id="xid79-loss-2m-selected"),
        pytest.param("fast79", timedelta(minutes=1), False, id="xid79-loss-1m-not-yet"),
        pytest.param("slow48", timedelta(minutes=5), False, id="xid48-loss-5m-not-yet"),
        pytest.param("slow48", timedelta(minutes=11), True, id="xid48-loss-11m-selected"),
        pytest.param("dip48", timedelta(minutes=11), False, id="dip-recovering-in-window-never"),
        pytest.param("dip48", timedelta(minutes=30), False, id="dip-recovered-never"),
        pytest.param("dip79", timedelta(minutes=3), False, id="xid79-short-dip-never"),
        pytest.param("user13", timedelta(minutes=30), False, id="user-code-xid-never"),
        pytest.param("cordoned79", timedelta(minutes=30), False, id="already-cordoned-never"),
        pytest.param("lower79", timedelta(minutes=3), True, id="hostname-label-works"),
        pytest.param("healthy", timedelta(minutes=30), False, id="healthy-never"),
    ],
)
def test_isolation_query(prom, node, after, expected):
    assert (node in selected(prom, after)) is expected


def test_candidate_series_carry_gpu_identity(prom):
    client = PromClient(prom.url)
    found = client.vector("c", queries.isolation_candidates(PARAMS), ONSET + timedelta(minutes=3))
    (fast,) = [s for s in found if s.label("node") == "fast79"]
    assert fast.value == 79
    assert fast.label("gpu") == "4"
    assert fast.label("UUID").startswith("GPU-")
    assert fast.label("pci_bus_id").startswith("00000000:")


def test_read_prom_builds_the_view(prom):
    view = read_prom(PromClient(prom.url), S, ONSET + timedelta(minutes=12))
    assert {c.node for c in view.candidates} == {"fast79", "slow48", "lower79"}
    assert {g.node for g in view.hardware_xids} >= {"fast79", "slow48", "dip48", "cordoned79"}
    assert "user13" not in {g.node for g in view.hardware_xids}
    # loss began at the onset scrape; held is measured at the query step (60 s)
    assert 11 * 60 <= view.held_s("slow48") <= 12 * 60
    assert view.held_s("dip48") == 0
    assert view.row_remap == ()


def test_missing_dcgm_series_is_abnormal(prom_without_dcgm):
    with pytest.raises(PromError, match="DCGM_FI_DEV_XID_ERRORS has no series"):
        read_prom(PromClient(prom_without_dcgm.url), S, T0 + timedelta(minutes=10))


def test_query_syntax_is_accepted_for_every_settings_shape(prom):
    shapes = [
        S,
        Settings(prometheus_url="x", fast_path_xids=()),
        Settings(prometheus_url="x", fast_path_xids=(79, 74), user_code_xids=()),
    ]
    for s in shapes:
        read_prom(PromClient(prom.url), s, ONSET)
