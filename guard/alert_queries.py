"""Every alert expression the shipped rules carry; `guard.alerts` renders them into rule files.

Built from the guard's own blocks in `guard.queries` (the Xid metric, the Hostname/hostname
handling, the hardware-Xid filter, GPU loss and "not cordoned"), so alerts and guard agree on a
fault.

Long windows read every raw sample (`min_over_time(m[w])`), not a subquery: no step can skip a
short change, the cost is one range read per series, and a series that changed identity
(kube-state-metrics restart, pod attribution, err_code) still counts once grouped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from guard import metric_names, runbook
from guard.names import COMPONENT_LABEL, Annotations
from guard.queries import (
    XID_COUNT_METRIC,
    XID_METRIC,
    duration,
    gpu_loss,
    hardware_xid,
    ksm_label,
    not_cordoned,
    with_node_label,
)
from guard.settings import Settings

NotRunningSource = Literal["kube-state-metrics", "pushgateway"]


@dataclass(frozen=True, slots=True)
class AlertParams:
    """Alert-only knobs; user-code Xids, breaker limit, prefix and namespace come from Settings."""

    cronjob_name: str = "gpu-node-guard"  # the guard's CronJob, in Settings.namespace
    xid_quiet_after_s: int = 86400  # a hardware-Xid alert ends once the GPU's value is this old
    gpu_drop_for_s: int = 600  # GPU count below capacity this long on an uncordoned node
    cordon_max_s: int = 3 * 86400  # a cordon older than this is re-announced
    not_running_after_s: int = 900  # three five-minute cycles without a successful run
    rule_labels: tuple[tuple[str, str], ...] = (("release", "prometheus"),)  # for ruleSelector
    # Notifications, GPUNodeGuardNotRunning's source, runbook links (docs/alerts.md, runbook.md).
    notify_for_s: int = 60  # a cordon or return must be seen this long before it is announced
    notify_window_s: int = 3600  # an announcement fires this long after the change, then ends
    notify_labels: tuple[tuple[str, str], ...] = (("notify", "gpu-node-guard"),)  # for routing
    not_running_source: NotRunningSource = "kube-state-metrics"  # or "pushgateway"
    runbook_base_url: str = runbook.DEFAULT_BASE_URL  # a site points this at its own copy


GPU_KEY = "node, gpu, UUID, pci_bus_id"


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


# ── Notifications and the pushed-metrics variant ────────────────────────────────────────────────
# The guard's own annotations, as kube-state-metrics exports them (--metric-annotations-allowlist):
# one `kube_node_annotations` series per node, carrying a label only for annotations it has.


def _changed_within(label: str, window_s: int) -> str:
    """Nodes whose `label` took more than one value (absent is one) within the window.

    Grouping by node drops `instance`, so a kube-state-metrics restart changes nothing; a node
    first seen with the label already set has one value, so a new Prometheus announces nothing.
    """
    seen = f"max by (node, {label}) (max_over_time(kube_node_annotations[{duration(window_s)}]))"
    return f"count by (node) {_block(seen)} > 1"


def alert_guard_cordoned(s: Settings, p: AlertParams) -> str:
    """Nodes that gained the guard's reason annotation within the window; `reason`, `pci`, `UUID`.

    `auto-cordon-gpu` is `<PCI address> <GPU UUID>`; without it in the allowlist the two GPU
    labels are simply missing.
    """
    names = Annotations(s.annotation_prefix)
    reason, gpu = ksm_label("annotation", names.reason), ksm_label("annotation", names.gpu)
    now = f'kube_node_annotations{{{reason}!=""}}'
    now = f'label_replace({now}, "reason", "$1", "{reason}", "(.+)")'
    now = f'label_replace({now}, "pci", "$1", "{gpu}", "([^ ]+) .*")'
    now = f'label_replace({now}, "UUID", "$1", "{gpu}", "[^ ]+ (.+)")'
    return (
        f"max by (node, reason, pci, UUID) {_block(now)}\n"
        f"and on (node) {_block(_changed_within(reason, p.notify_window_s))}"
    )


def alert_guard_returned(s: Settings, p: AlertParams) -> str:
    """Nodes whose `returned` annotation changed to its current value within the window.

    Only the uncordon after a passed load test writes `returned`; a person's uncordon writes
    `cancelled` and leaves `returned` alone, so it can never announce a return.
    """
    returned = ksm_label("annotation", Annotations(s.annotation_prefix).returned)
    now = f'kube_node_annotations{{{returned}!=""}}'
    now = f'label_replace({now}, "returned_at", "$1", "{returned}", "([^ ]+) .*")'
    now = f'label_replace({now}, "job_name", "$1", "{returned}", "[^ ]+ job/(.+)")'
    return (
        f"max by (node, returned_at, job_name) {_block(now)}\n"
        f"and on (node) {_block(_changed_within(returned, p.notify_window_s))}"
    )


def alert_guard_not_running_pushed(s: Settings, p: AlertParams) -> str:
    """The guard's pushed last success older than the limit, or no success seen that long.

    The Pushgateway serves the last push until the group is deleted, so a guard that stopped
    still shows its old success time; absent means never succeeded, Pushgateway wiped or not
    scraped (scrape it with honor_labels: true so `namespace` is the guard's).
    """
    sel = f'{metric_names.LAST_SUCCESS.name}{{{metric_names.GROUPING_LABEL}="{s.namespace}"}}'
    return (
        f"time() - max by ({metric_names.GROUPING_LABEL}) ({sel}) > {p.not_running_after_s}\n"
        f"or absent_over_time({sel}[{duration(p.not_running_after_s)}])"
    )


def last_run_age(s: Settings) -> str:
    """Seconds since the last pushed run of any result (the NotRunning description reads it)."""
    sel = f'{metric_names.LAST_RUN.name}{{{metric_names.GROUPING_LABEL}="{s.namespace}"}}'
    return f"time() - max({sel})"
