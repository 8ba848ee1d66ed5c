"""Every PromQL string the guard runs, built in one place from the settings.

Tests in tests/prometheus evaluate these exact strings against a real Prometheus, so a change
here is a change to what the guard decides.

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

from guard.names import COMPONENT_LABEL, Annotations
from guard.settings import Settings

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
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


def hardware_xid_now(user_code_xids: Iterable[int]) -> str:
    """Every GPU with a hardware Xid right now (return check condition 4)."""
    return hardware_xid(user_code_xids)


def row_remap_nonzero() -> str:
    """GPUs whose row remapping is pending or failed (ECC models only; absent elsewhere)."""
    return " or ".join(with_node_label(f"{m} > 0") for m in ROW_REMAP_METRICS)


# A broken scrape must not look like a healthy cluster: each input must have at least one series.
REQUIRED_INPUTS: tuple[tuple[str, str], ...] = (
    ("kube_node_spec_unschedulable", f"count({UNSCHEDULABLE_METRIC})"),
    ("DCGM_FI_DEV_XID_ERRORS", f"count({XID_METRIC})"),
    ("kube_node_status_capacity{resource=nvidia_com_gpu}", f"count({CAPACITY_METRIC})"),
)


# ── Alert rules: guard/alerts.py renders these into the shipped rule files ─────────────────────


@dataclass(frozen=True, slots=True)
class AlertParams:
    """Alert-only knobs; user-code Xids, breaker limit, prefix and namespace come from Settings."""

    cronjob_name: str = "gpu-node-guard"  # the guard's CronJob, in Settings.namespace
    xid_quiet_after_s: int = 86400  # a hardware-Xid alert ends once the GPU's value is this old
    gpu_drop_for_s: int = 600  # GPU count below capacity this long on an uncordoned node
    cordon_max_s: int = 3 * 86400  # a cordon older than this is re-announced
    not_running_after_s: int = 900  # three five-minute cycles without a successful run
    rule_labels: tuple[tuple[str, str], ...] = (("release", "prometheus"),)  # for ruleSelector


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


# ── PromQL: every alert expression ──────────────────────────────────────────────────────────────
# Shared with the guard through guard/py: the Xid metric, the Hostname/hostname handling,
# the hardware-Xid filter, GPU loss and "not cordoned", so alerts and guard agree on a fault.
# Long windows read every raw sample (`min_over_time(m[w])`), not a subquery: no step can skip a
# short change, the cost is one range read per series, and a series that changed identity
# (kube-state-metrics restart, pod attribution, err_code) still counts once grouped.

GPU_KEY = "node, gpu, UUID, pci_bus_id"
XID_COUNT_METRIC = "DCGM_EXP_XID_ERRORS_COUNT"


def _block(expr: str) -> str:
    return "(\n" + "\n".join(f"  {line}" for line in expr.splitlines()) + "\n)"


def _per_gpu(expr: str, agg: str = "max", extra: str = "") -> str:
    """One series per GPU of a dcgm-exporter expression already carrying `node`.

    `UUID` also comes from the old-namespace `uuid`; pod-attribution and err_* labels drop out.
    """
    key = f"{GPU_KEY}, {extra}" if extra else GPU_KEY
    relabeled = f'label_replace({expr}, "UUID", "$1", "uuid", "(.+)")'
    return f"{agg} by ({key}) {_block(relabeled)}"


def alert_xid_settled(p: AlertParams) -> str:
    """GPUs whose last Xid had the same value at the window's start and in every sample since.

    Comparing values, not presence, closes the blind spot of the incident write-up's rule (any
    Xid a day ago, user-code ones included, hid every later hardware Xid); every sample also
    catches 79 → 13 → 79 and a repeat after the exporter restarted (79 → 0 → 79).
    """
    w, m, node = duration(p.xid_quiet_after_s), XID_METRIC, with_node_label
    now = _per_gpu(node(m))
    return (
        f"{now}\n== {_per_gpu(node(f'{m} offset {w}'))}\n"
        f"and {now}\n== {_per_gpu(node(f'min_over_time({m}[{w}])'), 'min')}\n"
        f"and {now}\n== {_per_gpu(node(f'max_over_time({m}[{w}])'))}"
    )


def alert_hardware_xid_count(s: Settings, p: AlertParams) -> str:
    """Hardware Xids counted by dcgm-exporter's windowed counter (collected only when enabled)."""
    codes = "|".join(str(code) for code in sorted(set(s.user_code_xids)))
    window = f'{XID_COUNT_METRIC}{{xid!~"{codes}"}}[{duration(p.xid_quiet_after_s)}]'
    return f"{_per_gpu(with_node_label(f'max_over_time({window})'), extra='xid')} > 0"


def alert_hardware_xid(s: Settings, p: AlertParams) -> str:
    """Current hardware Xid per GPU until settled; silent where the counted variant speaks."""
    now = _per_gpu(hardware_xid(s.user_code_xids))
    return (
        f"{now}\nunless {_block(alert_xid_settled(p))}\n"
        f"unless on ({GPU_KEY}) {_block(alert_hardware_xid_count(s, p))}"
    )


def alert_gpu_count_dropped() -> str:
    return f"{gpu_loss()} > 0\nand on (node) {not_cordoned()}"


def alert_cordoned_too_long(p: AlertParams) -> str:
    """Unschedulable now, at the window's start and in every sample since (docs/alerts.md)."""
    w, m = duration(p.cordon_max_s), "kube_node_spec_unschedulable"
    return (
        f"max by (node) ({m}) == 1\n"
        f"and on (node) max by (node) ({m} offset {w}) == 1\n"
        f"and on (node) min by (node) (min_over_time({m}[{w}])) == 1"
    )


def alert_breaker_open(s: Settings) -> str:
    label = ksm_label("annotation", Annotations(s.annotation_prefix).reason)
    return f'count(max by (node) (kube_node_annotations{{{label}!=""}})) >= {s.breaker_max_nodes}'


def alert_guard_not_running(s: Settings, p: AlertParams) -> str:
    """Seconds since the later of the last success and the CronJob's creation; absent = alert."""
    sel = f'{{namespace="{s.namespace}", cronjob="{p.cronjob_name}"}}'
    since = f"kube_cronjob_status_last_successful_time{sel}\nor kube_cronjob_created{sel}"
    return (
        f"time() - max by (namespace, cronjob) {_block(since)} > {p.not_running_after_s}\n"
        f"or absent_over_time(kube_cronjob_created{sel}[{duration(p.not_running_after_s)}])"
    )


def alert_guard_job_failed(s: Settings) -> str:
    """Failed Jobs the guard created (its namespace, not the CronJob's runs), node from labels.

    Without the kube-state-metrics label allowlist the join finds nothing; `or on` then keeps
    the alert, only without `node` and `component`, so a missing flag never silences it.
    """
    ns, node = s.namespace, ksm_label("label", Annotations(s.annotation_prefix).node_label)
    component = ksm_label("label", COMPONENT_LABEL)
    failed = (
        f'sum by (namespace, job_name) (kube_job_status_failed{{namespace="{ns}"}}) > 0\n'
        f'unless on (namespace, job_name) kube_job_owner{{namespace="{ns}", owner_kind="CronJob"}}'
    )
    labels = f'kube_job_labels{{namespace="{ns}"}}'
    labels = f'label_replace({labels}, "node", "$1", "{node}", "(.*)")'
    labels = f'label_replace({labels}, "component", "$1", "{component}", "(.*)")'
    return (
        f"{_block(failed)}\n* on (namespace, job_name) group_left (node, component)\n"
        f"max by (namespace, job_name, node, component) {_block(labels)}\n"
        f"or on (namespace, job_name) {_block(failed)}"
    )
