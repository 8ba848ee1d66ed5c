"""The GPU loss of a DRA node (guard.codec.queries.dra_loss): which Xids stand for it, from
facts."""

from __future__ import annotations

from guard.codec.queries import NO_PINS, dra_loss, dra_loss_xids, gpu_loss, guard_loss
from guard.settings import Settings
from guard.xid_tables import Repair, XidClasses, bundled_classes

S = Settings(prometheus_url="http://unused")


def test_only_the_isolating_classes_of_the_bundled_table_stand_for_loss():
    assert dra_loss_xids(S) == (79, 143)  # power-cycle and rma; 48, 94, 95, 119, 120 reset
    assert all(bundled_classes().verdict_of(c) != Repair.RESET for c in dra_loss_xids(S))


def test_a_site_reset_or_user_code_class_never_stands_for_loss():
    assert dra_loss_xids(
        Settings(prometheus_url="http://unused", reset_class_xids=(79,), fast_path_xids=())
    ) == (143,)
    assert dra_loss_xids(Settings(prometheus_url="http://unused", user_code_xids=(143,))) == (79,)


def test_isolating_is_power_cycle_and_rma_only():
    table = XidClasses(
        {79: Repair.POWER_CYCLE, 94: Repair.RESET, 143: Repair.RMA, 31: Repair.HUMAN}
    )
    assert table.isolating() == (79, 143)


def test_the_dra_term_counts_only_nodes_without_the_gpu_resource():
    promql = dra_loss((79,), ("node", "Hostname"), NO_PINS)
    assert "(DCGM_FI_DEV_XID_ERRORS) == 79" in promql
    assert 'unless on (node) kube_node_status_capacity{resource="nvidia_com_gpu"}' in promql
    assert promql.endswith(" and on (node) kube_node_spec_unschedulable)")


def test_no_codes_no_dra_term():
    assert dra_loss((), ("node",), NO_PINS) == ""
    none = Settings(prometheus_url="http://unused", reset_class_xids=(79, 143), fast_path_xids=())
    assert guard_loss(none, NO_PINS) == gpu_loss(NO_PINS)
    assert guard_loss(S, NO_PINS).startswith(f"({gpu_loss(NO_PINS)} or (count by (node)")
