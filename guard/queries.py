"""Every PromQL string the guard runs, and the building blocks the alert rules share with it.

Tests in tests/prometheus evaluate these exact strings against a real Prometheus, so a change
here is a change to what the guard decides. The alert expressions live in
`guard.alert_queries`, built from the same blocks (metric names, the host-label join, the
hardware-Xid filter, GPU loss, "not cordoned"), so alerts and guard agree on what a fault is.

Inputs:
  * dcgm-exporter ``DCGM_FI_DEV_XID_ERRORS`` — a gauge holding the *last* Xid of each GPU
    (0 = none). Its host label is ``Hostname``; newer exporters say ``hostname``.
  * kube-state-metrics ``kube_node_status_capacity`` / ``_allocatable`` with
    ``resource="nvidia_com_gpu"`` and ``kube_node_spec_unschedulable``, keyed by ``node``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT_METRIC = "DCGM_EXP_XID_ERRORS_COUNT"
CAPACITY_METRIC = 'kube_node_status_capacity{resource="nvidia_com_gpu"}'
ALLOCATABLE_METRIC = 'kube_node_status_allocatable{resource="nvidia_com_gpu"}'
UNSCHEDULABLE_METRIC = "kube_node_spec_unschedulable"
ROW_REMAP_METRICS = ("DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE")
NODE_LABEL = "node"
HOST_LABELS = ("Hostname", "hostname")


def with_node_label(metric: str) -> str:
    """Copy dcgm-exporter's host label (either spelling) into ``node`` to join kube-state-metrics.

    label_replace leaves the series unchanged when the source label is absent or empty,
    so the two calls cover both exporter generations.
    """
    expr = metric
    for label in HOST_LABELS:
        expr = f'label_replace({expr}, "{NODE_LABEL}", "$1", "{label}", "(.+)")'
    return expr


def hardware_xid(user_code_xids: Iterable[int]) -> str:
    """Per-GPU series whose last Xid is set and is not caused by user code; value = Xid.

    Filter first, relabel after: comparisons keep every label, and relabelling only the few
    faulted GPUs instead of all of them makes the loss-history subquery ~3× cheaper at 5,000 nodes.
    """
    filters = "".join(f" != {code}" for code in sorted(set(user_code_xids)))
    return with_node_label(f"{XID_METRIC} > 0{filters}")


def gpu_loss() -> str:
    """Per-node number of GPUs the node advertises but cannot allocate."""
    return (
        f"(max by ({NODE_LABEL}) ({CAPACITY_METRIC})"
        f" - max by ({NODE_LABEL}) ({ALLOCATABLE_METRIC}))"
    )


def loss_held(window_s: int, step_s: int) -> str:
    """Nodes whose GPU loss stayed above zero at every step of the window (filters brief dips)."""
    return f"(min_over_time({gpu_loss()}[{window_s}s:{step_s}s]) > 0)"


def not_cordoned() -> str:
    return f"(max by ({NODE_LABEL}) ({UNSCHEDULABLE_METRIC}) == 0)"


@dataclass(frozen=True, slots=True)
class IsolationParams:
    user_code_xids: tuple[int, ...]
    fast_path_xids: tuple[int, ...]
    hold_window_s: int
    fast_hold_window_s: int
    step_s: int


def isolation_candidates(p: IsolationParams) -> str:
    """Per-GPU hardware-Xid series on uncordoned nodes whose GPU loss held long enough.

    Hardware-certain Xids (fast path, default 79) need the short hold; every other hardware Xid
    needs the full window. ``or`` keeps the fast-path series when both sides match.
    """
    hw = hardware_xid(p.user_code_xids)
    slow = f"(({hw}) and on ({NODE_LABEL}) {loss_held(p.hold_window_s, p.step_s)})"
    if p.fast_path_xids:
        fast_filter = " or ".join(f"({hw}) == {code}" for code in sorted(set(p.fast_path_xids)))
        fast = (
            f"(({fast_filter}) and on ({NODE_LABEL}) {loss_held(p.fast_hold_window_s, p.step_s)})"
        )
        selected = f"({fast} or {slow})"
    else:
        selected = slow
    return f"{selected} and on ({NODE_LABEL}) {not_cordoned()}"


def loss_history(user_code_xids: Iterable[int], lookback_s: int, step_s: int) -> str:
    """GPU loss over the lookback for nodes with a hardware Xid (a matrix; few nodes by design).

    Used to order candidates by how long the loss has held and to log it.
    """
    hw_nodes = f"max by ({NODE_LABEL}) ({hardware_xid(user_code_xids)})"
    return f"({gpu_loss()} and on ({NODE_LABEL}) {hw_nodes})[{lookback_s}s:{step_s}s]"


def row_remap_nonzero() -> str:
    """GPUs whose row remapping is pending or failed (ECC models only; absent elsewhere)."""
    return " or ".join(with_node_label(f"{m} > 0") for m in ROW_REMAP_METRICS)


# A broken scrape must not look like a healthy cluster: each input must have at least one series.
REQUIRED_INPUTS: tuple[tuple[str, str], ...] = (
    ("kube_node_spec_unschedulable", f"count({UNSCHEDULABLE_METRIC})"),
    ("DCGM_FI_DEV_XID_ERRORS", f"count({XID_METRIC})"),
    ("kube_node_status_capacity{resource=nvidia_com_gpu}", f"count({CAPACITY_METRIC})"),
)


def duration(seconds: int) -> str:
    """A PromQL / rule-file duration.

    >>> duration(86400), duration(600), duration(90)
    ('24h', '10m', '90s')
    """
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def ksm_label(kind: str, key: str) -> str:
    """The label kube-state-metrics makes of an allowlisted Kubernetes label or annotation key.

    >>> ksm_label("annotation", "gpu-node-guard.io/auto-cordon-reason")
    'annotation_gpu_node_guard_io_auto_cordon_reason'
    """
    sanitized = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return f"{kind}_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", sanitized).lower()
