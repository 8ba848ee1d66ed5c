"""Labels not of their format, served by every real engine: the node is dropped, not the fleet.

The scenario's OpenMetrics writer puts a UUID with a space and a 300-character host name into
dcgm-exporter's series (`BOUNDARY` in conftest); Prometheus stores and serves them as any other.
"""

from __future__ import annotations

import pytest

from guard.doors.prom import PromClient, PromError
from guard.model import PromUnreadable
from guard.plan.hold import candidates
from guard.read.prom_view import read_prom
from guard.settings import Settings
from tests.prometheus.conftest import BOUNDARY_NODES, JOBS_NS, LONG_HOST, ODD_UUID, minutes
from tests.prometheus.test_queries import run_guard

pytestmark = pytest.mark.prometheus
S = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS)
NAMES = frozenset(n.name for n in BOUNDARY_NODES)
HOST_WHY = "not a Node name (DNS-1123 subdomain of at most 253)"


def test_the_bad_series_are_dropped_and_their_nodes_named(prom_boundary):
    view = read_prom(PromClient(prom_boundary.url), S, minutes(5), NAMES)
    assert [c.node for c in candidates(view, minutes(5), S)] == ["fault79"]
    assert set(view.unreadable) == {
        PromUnreadable(
            "odd-uuid", "hardware-xid", "UUID", ODD_UUID, "not a GPU UUID (GPU-8-4-4-4-12 hex)"
        ),
        *(
            PromUnreadable("", query, "Hostname", LONG_HOST, HOST_WHY)
            for query in ("hardware-xid", "xid-hosts", "exporter-hosts")
        ),
    }
    assert {n for n, _ in view.loss_since} == {"fault79", "long-host"}  # "" names no node


def test_a_run_cordons_the_faulted_node_and_warns_once_per_bad_node(prom_boundary, tmp_path):
    proc = run_guard(prom_boundary, [(n.name, 8) for n in BOUNDARY_NODES], minutes(12), tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    cordons = [line for line in lines if " cordon " in line and "reason=xid-" in line]
    assert len(cordons) == 1 and "node=fault79" in cordons[0]
    warned = [line for line in lines if "WARN skip" in line and "reason=unreadable" in line]
    assert len(warned) == 2, warned
    assert any("node=odd-uuid" in line and "'GPU-1a2b3c4d 5e6f" in line for line in warned)
    assert any("(300 characters)" in line and "node=" not in line for line in warned)


PINNED = Settings(
    prometheus_url="http://unused",
    jobs_namespace=JOBS_NS,
    dcgm_selector='job="nvidia-dcgm-exporter"',
    ksm_selector='job="kube-state-metrics"',
)


@pytest.mark.parametrize("after", [5, 12, 30])
def test_the_exporter_pins_read_the_same_view(prom_boundary, after):
    client = PromClient(prom_boundary.url)
    pinned = read_prom(client, PINNED, minutes(after), NAMES)
    assert pinned == read_prom(client, S, minutes(after), NAMES)
    assert [c.node for c in candidates(pinned, minutes(after), S)] == ["fault79"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"dcgm_selector": 'job="dcgm-exporter"'},
            "input metric DCGM_FI_DEV_XID_ERRORS has no series matching --dcgm-selector"
            ' job="dcgm-exporter"',
            id="another-dcgm-job",
        ),
        pytest.param(
            {"ksm_selector": 'namespace="monitoring"'},
            "input metric kube_node_spec_unschedulable has no series matching"
            ' --ksm-selector namespace="monitoring"',
            id="ksm-in-another-namespace",
        ),
    ],
)
def test_a_pin_no_series_matches_aborts_naming_it(prom_boundary, changes, message):
    s = Settings(prometheus_url="http://unused", jobs_namespace=JOBS_NS, **changes)
    with pytest.raises(PromError) as err:
        read_prom(PromClient(prom_boundary.url), s, minutes(12), NAMES)
    assert str(err.value).startswith(message)
