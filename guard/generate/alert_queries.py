"""Every alert expression of the shipped rules, built from the guard's own blocks
(`guard.codec.queries`) so alerts and guard agree on a fault; the site's filters are pushed series
or strings the overlay fills (docs/alerts.md). Long windows read every raw sample, not a subquery:
no step can skip a short change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from guard import metric_names
from guard.actions import TYPE_WORDS, TaintDevice
from guard.codec.queries import (
    CAPACITY_METRIC,
    XID_COUNT_METRIC,
    XID_METRIC,
    duration,
    gpu_loss,
    grown_by,
    ksm_label,
    not_cordoned,
    with_node_label,
)
from guard.generate.policies import params
from guard.metric_names import AGENT_CHECK_OK, AGENT_CHECK_STATUS, AGENT_LAST_RUN
from guard.names import COMPONENT_LABEL, Annotations
from guard.runbook import Section
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
    # Notifications and GPUNodeGuardNotRunning's source (docs/alerts.md); runbook links: Settings.
    notify_for_s: int = 60  # a cordon or return must be seen this long before it is announced
    notify_window_s: int = 3600  # an announcement fires this long after the change, then ends
    notify_labels: tuple[tuple[str, str], ...] = (("notify", "gpu-node-guard"),)  # for routing
    not_running_source: NotRunningSource = "kube-state-metrics"  # or "pushgateway"


GPU_KEY = "node, gpu, UUID, pci_bus_id"


def _block(expr: str) -> str:
    return "(\n" + "\n".join(f"  {line}" for line in expr.splitlines()) + "\n)"


def _per_gpu(expr: str, agg: str = "max", extra: str = "") -> str:
    """One series per GPU (`UUID` also from the old-namespace `uuid`; pod labels drop out)."""
    key = f"{GPU_KEY}, {extra}" if extra else GPU_KEY
    relabeled = f'label_replace({expr}, "UUID", "$1", "uuid", "(.+)")'
    return f"{agg} by ({key}) {_block(relabeled)}"


def alert_xid_settled(p: AlertParams) -> str:
    """GPUs whose last Xid had the same value at the window's start and in every sample since:
    values, not presence, so a user-code Xid hides no later hardware one, and 79 → 13 → 79 or an
    exporter restart (79 → 0 → 79) is still a change."""
    w, m, node = duration(p.xid_quiet_after_s), XID_METRIC, with_node_label
    now = _per_gpu(node(m))
    return (
        f"{now}\n== {_per_gpu(node(f'{m} offset {w}'))}\n"
        f"and {now}\n== {_per_gpu(node(f'min_over_time({m}[{w}])'), 'min')}\n"
        f"and {now}\n== {_per_gpu(node(f'max_over_time({m}[{w}])'))}"
    )


# ── The site's filters as series (docs/alerts.md, "The site's values") ─────────────────────────
# The alerts join on the user-code Xids and allowed DNS prefixes the guard pushes; until its first
# push, on the overlay's GUARD_USER_CODE_XIDS, split by `USER_CODE_XID` (the first 16 entries).
USER_CODE_XIDS_SETTING = "gpu_node_guard:user_code_xids"  # one series, `xids` = the setting
USER_CODE_XID = "gpu_node_guard:user_code_xid"  # one series per user-code Xid, `xid` = the code
USER_CODE_FALLBACK_MAX = 16


def user_code_xids_setting(t: SiteText) -> str:
    return f'label_replace(vector(1), "xids", "{t["user_code_xids"]}", "", "")'


def user_code_xid(p: AlertParams) -> str:
    """The pushed user-code Xids, else the recorded setting split into one series per code."""
    # Entry i becomes `xid`, and `xids` is removed where it matched: a term whose entry is
    # missing leaves the series as it was, which `unless on (xids)` drops (a join on the list
    # itself, not on an empty label: VictoriaMetrics matches those differently).
    one = (
        'label_replace(label_replace({rec}, "xid", "$1", "xids", "{regex}"), "xids", "",'
        ' "xids", "{regex}")'
    )
    entry = "(?:[^,]*,){{{i}}} *([0-9]+) *(?:,.*)?"
    split = "\nor ".join(
        one.format(rec=USER_CODE_XIDS_SETTING, regex=entry.format(i=i))
        for i in range(USER_CODE_FALLBACK_MAX)
    )
    unsplit = f"{_block(split)}\nunless on (xids) {USER_CODE_XIDS_SETTING}"
    return (
        f"max by (xid) ({metric_names.USER_CODE_XID.name})\nor on () max by (xid) {_block(unsplit)}"
    )


def not_user_code(selector: str) -> str:
    """The series of `selector` (an Xid gauge) whose value is not a user-code Xid (count_values
    makes the value a label to join on)."""
    by_value = f'count_values without () ("xid", {selector})\nunless on (xid) {USER_CODE_XID}'
    return f"{selector}\nand ignoring (xid) {_block(by_value)}"


def alert_hardware_xid_count(s: Settings, p: AlertParams) -> str:
    window = f"max_over_time({XID_COUNT_METRIC}[{duration(p.xid_quiet_after_s)}])"
    hardware = f"{window}\nunless on (xid) {USER_CODE_XID}"
    return f"{_per_gpu(with_node_label(hardware), extra='xid')} > 0"


def alert_hardware_xid(s: Settings, p: AlertParams) -> str:
    """Current hardware Xid per GPU until settled; silent where the counted variant speaks."""
    now = _per_gpu(with_node_label(not_user_code(f"{XID_METRIC} > 0")))
    return (
        f"{now}\nunless {_block(alert_xid_settled(p))}\n"
        f"unless on ({GPU_KEY}) {_block(alert_hardware_xid_count(s, p))}"
    )


def alert_gpu_count_dropped() -> str:
    return f"{gpu_loss()} > 0\nand on (node) {not_cordoned()}"


def alert_cordoned_too_long(s: Settings, p: AlertParams) -> str:
    """Unschedulable over the whole window, but not by the guard (GPUIsolationPastBudget's)."""
    w, m = duration(p.cordon_max_s), "kube_node_spec_unschedulable"
    return (
        f"max by (node) ({m}) == 1\n"
        f"and on (node) max by (node) ({m} offset {w}) == 1\n"
        f"and on (node) min by (node) (min_over_time({m}[{w}])) == 1\n"
        f"unless on (node) max by (node) ({_annotated(Annotations(s.annotation_prefix).reason)})"
    )


def _annotated(key: str) -> str:
    """Nodes carrying annotation `key`, as kube-state-metrics exports it (allowlisted)."""
    return f'kube_node_annotations{{{ksm_label("annotation", key)}!=""}}'


def alert_isolation_past_budget() -> str:
    """Per verdict, the oldest open isolation's age over its budget (both pushed; `max by`
    collapses the Pushgateway's `instance`)."""
    by = f"{metric_names.GROUPING_LABEL}, verdict"
    age = f"max by ({by}) ({metric_names.ISOLATION_OLDEST_AGE.name})"
    budget = f"max by ({by}) ({metric_names.QUARANTINE_BUDGET.name})"
    return f"{age}\n> on ({by}) {budget}"


def alert_domain_incident() -> str:
    """Per domain, the pushed nodes of a domain incident (the empty domain is the push's none)."""
    by = f"{metric_names.GROUPING_LABEL}, domain"
    return f'max by ({by}) ({metric_names.DOMAIN_INCIDENT_NODES.name}{{domain!=""}}) >= 2'


# ── Device taints (DRA nodes): from the guard's pushes, which name no node ─────────────────────
DEVICE_STATES = (Section.DEVICE_TAINTED.value, Section.DEVICE_REPEAT_FAULT.value)


def alert_device_tainted_too_long(p: AlertParams) -> str:
    """Per state of `DEVICE_STATES`: nodes in it over the whole `cordon_max_s`."""
    w, by = duration(p.cordon_max_s), f"{metric_names.GROUPING_LABEL}, state"
    states = "|".join(DEVICE_STATES)
    sel = f'{metric_names.NODES.name}{{state=~"{states}"}}'
    return (
        f"min by ({by}) (min_over_time({sel}[{w}])) >= 1\n"
        f"and on ({by}) max by ({by}) ({sel} offset {w}) >= 1"
    )


def alert_guard_device_tainted(p: AlertParams) -> str:
    """A run within the window applied a `taint-device` write, while runs go on (a stopped
    guard's last push stays: GPUNodeGuardNotRunning's case)."""
    g, w = metric_names.GROUPING_LABEL, duration(p.notify_window_s)
    taint = TYPE_WORDS[TaintDevice]
    sel = f'{metric_names.LAST_RUN_ACTIONS.name}{{type="{taint}", outcome="applied"}}'
    return (
        f"max by ({g}) (max_over_time({sel}[{w}])) > 0\n"
        f"and on ({g}) max by ({g}) (changes({metric_names.LAST_RUN.name}[{w}])) > 0"
    )


# The site's GUARD_BREAKER_MAX_NODES as a recorded series: the bare number (SUBSTITUTED).
BREAKER_SETTING = "gpu_node_guard:breaker_max_nodes"


def alert_breaker_open(s: Settings) -> str:
    """What the guard's breaker counts (its push, else the cordon and device marks) at or over its
    limit (its push, else the site's setting), so the alert opens where the breaker does."""
    keys = Annotations(s.annotation_prefix)
    marked = " or ".join(_annotated(key) for key in (keys.reason, keys.device_taint))
    count = f"max({metric_names.BREAKER_ISOLATIONS.name})\nor count(max by (node) ({marked}))"
    limit = f"max({metric_names.BREAKER_LIMIT.name})\nor {BREAKER_SETTING}"
    return f"{_block(count)}\n>= {_block(limit)}"


def alert_guard_not_running(s: Settings, p: AlertParams) -> str:
    """Seconds since the last success or the CronJob's creation; absent = alert (one second more
    so Prometheus 2 and 3 fire at the same evaluation, docs/engines.md)."""
    sel = f'{{namespace="{s.namespace}", cronjob="{p.cronjob_name}"}}'
    since = f"kube_cronjob_status_last_successful_time{sel}\nor kube_cronjob_created{sel}"
    return (
        f"time() - max by (namespace, cronjob) {_block(since)} > {p.not_running_after_s}\n"
        f"or absent_over_time(kube_cronjob_created{sel}[{p.not_running_after_s + 1}s])"
    )


def alert_guard_job_failed(s: Settings) -> str:
    """Failed Jobs in the jobs namespace, node and kind from their labels, while their node's
    incident lasts (a failed Job outlives it); without that join where the node has no
    `kube_node_annotations` series (a shortened label, a deleted node) or no label at all."""
    ns = s.jobs_namespace
    keys = Annotations(s.annotation_prefix)
    node = ksm_label("label", keys.node_label)
    component = ksm_label("label", COMPONENT_LABEL)
    failed = f'sum by (namespace, job_name) (kube_job_status_failed{{namespace="{ns}"}}) > 0'
    labels = f'kube_job_labels{{namespace="{ns}", {node}!=""}}'
    labels = f'label_replace({labels}, "node", "$1", "{node}", "(.*)")'
    labels = f'label_replace({labels}, "component", "$1", "{component}", "(.*)")'
    labelled = (
        f"{_block(failed)}\n* on (namespace, job_name) group_left (node, component)\n"
        f"max by (namespace, job_name, node, component) {_block(labels)}"
    )
    # The node annotations that mark an incident the guard's Jobs serve (docs/runbook.md).
    incident = (keys.reason, keys.device_taint, keys.conformance_failed, keys.onboarding_failed)
    open_ = "\nor\n".join(_annotated(key) for key in incident)
    return (
        f"{_block(labelled)}\nand on (node) max by (node) {_block(open_)}\n"
        f"or\n{_block(labelled)}\nunless on (node) max by (node) (kube_node_annotations)\n"
        f"or\n{_block(failed)}\nunless on (namespace, job_name) {_block(labels)}"
    )


# ── Notifications and the pushed-metrics variant ────────────────────────────────────────────────
def _announced(key: str, window_s: int, *labels: tuple[str, str, str]) -> str:
    """Nodes whose annotation `key` took more than one value (absent is one) within the window, so
    a kube-state-metrics restart announces nothing; `labels`: (label, annotation, regex) cut."""
    now = _annotated(key)
    changed = ksm_label("annotation", key)
    for name, source, regex in labels:
        source = ksm_label("annotation", source)
        now = f'label_replace({now}, "{name}", "$1", "{source}", "{regex}")'
    seen = f"max_over_time(kube_node_annotations[{duration(window_s)}])"
    seen = f"count by (node) {_block(f'max by (node, {changed}) ({seen})')} > 1"
    by = ", ".join(["node", *(name for name, _, _ in labels)])
    return f"max by ({by}) {_block(now)}\nand on (node) {_block(seen)}"


def alert_guard_cordoned(s: Settings, p: AlertParams) -> str:
    """`pci`, `UUID` from `auto-cordon-gpu` (`<PCI address> <GPU UUID>`) when allowlisted."""
    keys = Annotations(s.annotation_prefix)
    reason = ("reason", keys.reason, "(.+)")
    gpu = ("pci", keys.gpu, "([^ ]+) .*")
    uuid = ("UUID", keys.gpu, "[^ ]+ (.+)")
    return _announced(keys.reason, p.notify_window_s, reason, gpu, uuid)


def alert_guard_returned(s: Settings, p: AlertParams) -> str:
    """Only the uncordon after a passed load test writes `returned` (a person's: `cancelled`)."""
    key = Annotations(s.annotation_prefix).returned
    at = ("returned_at", key, "([^ ]+) .*")
    job = ("job_name", key, "[^ ]+ job/(.+)")
    return _announced(key, p.notify_window_s, at, job)


def _pushed(metric: metric_names.PushedMetric, s: Settings) -> str:
    """The guard's pushed `metric` of its namespace (the push's grouping label)."""
    return f'{metric.name}{{{metric_names.GROUPING_LABEL}="{s.namespace}"}}'


def alert_guard_not_running_pushed(s: Settings, p: AlertParams) -> str:
    """The pushed last success older than the limit, or none seen that long."""
    sel = _pushed(metric_names.LAST_SUCCESS, s)
    return (
        f"time() - max by ({metric_names.GROUPING_LABEL}) ({sel}) > {p.not_running_after_s}\n"
        f"or absent_over_time({sel}[{duration(p.not_running_after_s)}])"
    )


def alert_lease_held(s: Settings) -> str:
    """Runs found the Lease held by another 1.5 cadences since one took it (or none ever did)."""
    by = f"max by ({metric_names.GROUPING_LABEL})"
    held = f"{by} ({_pushed(metric_names.LEASE_HELD, s)})"
    taken = f"{by} ({_pushed(metric_names.LEASE_TAKEN, s)})"
    return f"{held} - {taken} > {s.cadence_s * 3 // 2}\nor {held} unless {taken}"


def last_run_age(s: Settings) -> str:
    """Seconds since the last pushed run of any result (the NotRunning description reads it)."""
    return f"time() - max({_pushed(metric_names.LAST_RUN, s)})"


# ── Node lifecycle alerts (docs/alerts.md "Node lifecycle alerts"; alerts.node_rules) ──────────

REMAP_UNCORRECTABLE_METRIC = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"  # a counter
REMAP_FAILURE_METRIC = "DCGM_FI_DEV_ROW_REMAP_FAILURE"  # 1 = remapping failed
# CoreDNS's forward plugin: up to 1.10 its own histogram; from 1.11 the shared proxy package's, with
# proxy_name="forward" (coredns/coredns: plugin/forward/metrics.go, plugin/pkg/proxy/metrics.go).
COREDNS_FORWARD_METRICS = (
    'coredns_proxy_request_duration_seconds_count{proxy_name="forward"',
    "coredns_forward_request_duration_seconds_count{",
)


@dataclass(frozen=True, slots=True)
class NodeAlertParams:
    """Knobs of the node lifecycle alerts; the allowed upstreams come from Settings."""

    remap_window_s: int = 3600  # an uncorrectable remap alerts this long after it happened
    # The kube-proxy and CNI pods: the guard's return-condition selectors, from Settings.
    service_network_for_s: int = 300
    coredns_window_s: int = 600
    gfd_container: str = "gpu-feature-discovery"
    gfd_window_s: int = 1800
    gfd_restarts: int = 3
    agent_failed_for_s: int = 600  # nvidia-match also feeds the guard's nvml-mismatch cordon
    agent_unknown_for_s: int = 1800
    agent_stale_after_s: int = 900  # no agent run this long on a GPU node: the agent is missing


# INTERNAL_UPSTREAMS as a regex of CoreDNS's `to` label (``host:port``), the rule's fallback
# before the guard's first push (tests/unit/test_node_alerts.py: exactly those networks).
INTERNAL_UPSTREAM_REGEX = (
    "(10[.][0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}"
    "|172[.](1[6-9]|2[0-9]|3[0-1])[.][0-9]{1,3}[.][0-9]{1,3}"
    "|192[.]168[.][0-9]{1,3}[.][0-9]{1,3}"
    "|100[.](6[4-9]|[7-9][0-9]|1[0-1][0-9]|12[0-7])[.][0-9]{1,3}[.][0-9]{1,3}"
    "|169[.]254[.][0-9]{1,3}[.][0-9]{1,3}"
    "|127[.][0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}):[0-9]+"
)


def alert_row_remap_uncorrectable(p: NodeAlertParams) -> str:
    grown = grown_by(REMAP_UNCORRECTABLE_METRIC, p.remap_window_s)
    return f"{_per_gpu(with_node_label(grown))} > 0"


def alert_row_remap_failed() -> str:
    return f"{_per_gpu(with_node_label(REMAP_FAILURE_METRIC))} > 0\nand on (node) {not_cordoned()}"


# The settings the alerts component copies from the settings ConfigMap into a double-quoted
# string of an expression, or the whole expression: the one path of a site setting into alerts.
SUBSTITUTED = (
    "user_code_xids",
    "breaker_max_nodes",
    "service_network_kube_proxy_namespace",
    "service_network_kube_proxy_pods",
    "service_network_cni_namespace",
    "service_network_cni_daemonsets",
)
SiteText = Mapping[str, str]


def site_text(s: Settings) -> dict[str, str]:
    return {name: params.default_text(s, name) for name in SUBSTITUTED}


def _namespace_set(namespace: str) -> str:
    """One series when `namespace` is set, none when it is empty (a join on `set`=1, not on an
    empty label, which VictoriaMetrics matches differently); `namespace` stays one string."""
    ns = f'label_replace(vector(1), "ns", "{namespace}", "", "")'
    return (
        f'(label_replace({ns}, "set", "1", "ns", ".+")'
        ' and on (set) label_replace(vector(1), "set", "1", "", ""))'
    )


def _pods_in(namespace: str, matchers: str) -> str:
    """kube_pod_info series of `matchers` in `namespace`, or in any namespace when it is empty."""
    return (
        f'kube_pod_info{{namespace="{namespace}", {matchers}}}\n'
        f"or kube_pod_info{{{matchers}}} unless on () {_namespace_set(namespace)}"
    )


def alert_service_network_down(t: SiteText) -> str:
    """kube-proxy or CNI pods (queries.service_network_selectors) not Ready on a Ready node."""
    proxy = f'pod=~"{t["service_network_kube_proxy_pods"]}"'
    cni = f'created_by_kind="DaemonSet", created_by_name=~"{t["service_network_cni_daemonsets"]}"'
    pods = (
        f"{_pods_in(t['service_network_kube_proxy_namespace'], proxy)}\n"
        f"or {_pods_in(t['service_network_cni_namespace'], cni)}"
    )
    not_ready = 'max by (namespace, pod) (kube_pod_status_ready{condition=~"false|unknown"}) == 1'
    ready_node = 'max by (node) (kube_node_status_condition{condition="Ready", status="true"}) == 1'
    return (
        f"{_block(not_ready)}\n* on (namespace, pod) group_left (node)\n"
        f"max by (namespace, pod, node) {_block(pods)}\n"
        f"and on (node) {_block(ready_node)}"
    )


ALLOWED_DNS = metric_names.ALLOWED_DNS_PREFIX.name
COREDNS_UPSTREAMS = "gpu_node_guard:coredns_upstreams"  # one series per `to` forwarded to
COREDNS_UPSTREAM_ALLOWED = "gpu_node_guard:coredns_upstream_allowed"


def _forward(metric: str, matchers: str, window: str) -> str:
    """One CoreDNS forward counter over the window, with extra `matchers` ("" for none)."""
    inner = ", ".join(m for m in (metric.partition("{")[2], matchers) if m)
    name = metric.partition("{")[0]
    return f"{name}{{{inner}}}[{window}]" if inner else f"{name}[{window}]"


def coredns_upstreams(p: NodeAlertParams) -> str:
    """Every upstream (`to`) CoreDNS forwarded to within the window, under either name."""
    w = duration(p.coredns_window_s)
    seen = "\nor ".join(f"max_over_time({_forward(m, '', w)})" for m in COREDNS_FORWARD_METRICS)
    return f"max by (to) {_block(seen)}"


def coredns_upstream_allowed() -> str:
    """Per (`to`, `prefix`): each upstream's prefixes that the guard pushed as allowed."""
    return f"{_block(coredns_upstream_prefix())}\nand on (prefix) {ALLOWED_DNS}"


def coredns_upstream_prefix() -> str:
    """Each upstream once per prefix it has, in label `prefix` (allowed_dns_prefixes' form);
    `[[]` and `[]]` are the brackets, so no escape reaches the rule file."""
    octet, group = "[0-9]+", "[0-9a-f]+"
    terms = [("v4", f"{octet}(?:[.]{octet}){{3}}:[0-9]+"), ("v6", "[[].*[]]:[0-9]+")]
    rest = "{octet}(?:[.]{octet}){{{n}}}:[0-9]+"
    terms += [
        ("$1", f"({octet}(?:[.]{octet}){{{k - 1}}}[.])" + rest.format(octet=octet, n=3 - k))
        for k in (1, 2, 3)
    ]
    terms.append(("$1", f"({octet}(?:[.]{octet}){{3}}):[0-9]+"))
    terms += [
        ("$1", f"([[]{group}(?::{group}){{{k - 1}}}:)[0-9a-f:]*[]]:[0-9]+") for k in range(1, 8)
    ]
    terms.append(("$1", "([[][0-9a-f:.]+[]]):[0-9]+"))
    return "\nor ".join(
        f'label_replace({COREDNS_UPSTREAMS}, "prefix", "{value}", "to", "{regex}")'
        for value, regex in terms
    )


def alert_coredns_forward_not_allowed(s: Settings, p: NodeAlertParams) -> str:
    """Forwards to an upstream outside the pushed prefixes (before a push: the internal ranges)."""
    w = duration(p.coredns_window_s)
    default = INTERNAL_UPSTREAM_REGEX.replace("\\", "\\\\")

    def forwarded(matchers: str) -> str:
        return "\nor ".join(
            f"sum by (namespace, pod, to) (increase({_forward(m, matchers, w)})) > 0"
            for m in COREDNS_FORWARD_METRICS
        )

    allowed = COREDNS_UPSTREAM_ALLOWED
    pushed = f"max({ALLOWED_DNS})"
    return (
        f"{_block(forwarded(''))}\nunless on (to) {_block(allowed)}\nand on () {pushed}\n"
        f"or\n{_block(forwarded(f'to!~{chr(34)}{default}{chr(34)}'))}\nunless on () {pushed}"
    )


def alert_gfd_restart_loop(p: NodeAlertParams) -> str:
    c = p.gfd_container
    grown = grown_by(f'kube_pod_container_status_restarts_total{{container="{c}"}}', p.gfd_window_s)
    restarts = f"sum by (namespace, pod) {grown} >= {p.gfd_restarts}"
    pods = f'max by (namespace, pod, node) (kube_pod_info{{pod=~"{c}-.+"}})'
    return (
        f"{_block(restarts)}\n* on (namespace, pod) group_left (node)\n{pods}\n"
        f"and on (node) {not_cordoned()}"
    )


def alert_agent_check_failed(check: str, cordoned_too: bool) -> str:
    expr = f'max by (node, check) ({AGENT_CHECK_OK}{{check="{check}"}}) == 0'
    return expr if cordoned_too else f"{expr}\nand on (node) {not_cordoned()}"


def alert_agent_check_unknown() -> str:
    return f'max by (node, check) ({AGENT_CHECK_STATUS}{{status="UNKNOWN"}}) == 1'


def alert_agent_missing(p: NodeAlertParams) -> str:
    """GPU nodes without a recent agent run: no pod, no scrape, or a stuck loop."""
    fresh = f"time() - max by (node) ({AGENT_LAST_RUN}) < {p.agent_stale_after_s}"
    return f"max by (node) ({CAPACITY_METRIC}) > 0\nunless on (node) {_block(fresh)}"
