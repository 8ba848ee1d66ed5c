"""Every PromQL string the guard runs, and the blocks the alert rules (guard.generate.alert_queries)
share with it, so alerts and guard agree on what a fault is. tests/prometheus evaluates these exact
strings on real engines. The inputs: docs/deploy.md, "Prometheus inputs".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from guard.metric_names import AGENT_CHECK_INFO, AGENT_CHECK_OK, NVIDIA_MATCH
from guard.settings import Settings
from guard.xid_tables import bundled_classes

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT_METRIC = "DCGM_EXP_XID_ERRORS_COUNT"
CAPACITY_METRIC = 'kube_node_status_capacity{resource="nvidia_com_gpu"}'
ALLOCATABLE_METRIC = 'kube_node_status_allocatable{resource="nvidia_com_gpu"}'
UNSCHEDULABLE_METRIC = "kube_node_spec_unschedulable"
ROW_REMAP_METRICS = ("DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE")
# A GPU that never logged an Xid may lack the Xid gauge; every GPU exports its temperature.
EXPORTER_METRICS = '{__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_XID_ERRORS"}'
POD_REQUESTS_METRIC = 'kube_pod_container_resource_requests{resource="nvidia_com_gpu"}'
POD_PHASE_METRIC = "kube_pod_status_phase"
NODE_LABEL = "node"
HOST_LABELS = ("Hostname", "hostname")


@dataclass(frozen=True, slots=True)
class Pins:
    """Label matchers every series of each exporter must carry (--dcgm-selector, --ksm-selector)."""

    dcgm_matchers: str = ""
    ksm_matchers: str = ""

    @classmethod
    def of(cls, s: Settings) -> Pins:
        return cls(s.dcgm_selector.strip(), s.ksm_selector.strip())

    def dcgm(self, metric: str) -> str:
        return pin(metric, self.dcgm_matchers)

    def ksm(self, metric: str) -> str:
        return pin(metric, self.ksm_matchers)


NO_PINS = Pins()


def pin(metric: str, matchers: str) -> str:
    """A metric selector with more matchers (tests/unit/test_query_text.py)."""
    if not matchers:
        return metric
    if metric.endswith("}"):
        return f"{metric[:-1]}, {matchers}}}"
    return f"{metric}{{{matchers}}}"


# How far back the histories look: three default hold windows (longer when a hold needs it,
# `lookback_s`); loss older than that orders candidates by name.
HELD_LOOKBACK_S = 1800


def with_node_label(metric: str) -> str:
    """Copy dcgm-exporter's host label (either spelling) into ``node`` to join kube-state-metrics
    (label_replace leaves a series without the source label unchanged)."""
    expr = metric
    for label in HOST_LABELS:
        expr = f'label_replace({expr}, "{NODE_LABEL}", "$1", "{label}", "(.+)")'
    return expr


def gpu_loss(pins: Pins = NO_PINS) -> str:
    """Per node, the GPUs it advertises but cannot allocate (a value that is no count: no loss)."""
    return (
        f"(max by ({NODE_LABEL}) ({_gpu_count(pins.ksm(CAPACITY_METRIC))})"
        f" - max by ({NODE_LABEL}) ({_gpu_count(pins.ksm(ALLOCATABLE_METRIC))}))"
    )


def dra_loss_xids(s: Settings) -> tuple[int, ...]:
    """The Xids that stand for GPU loss on a DRA node: isolating, neither reset-class nor user's."""
    skip = set(s.reset_class_xids) | set(s.user_code_xids)
    return tuple(code for code in bundled_classes().isolating() if code not in skip)


def dra_loss(
    codes: Iterable[int], labels: Iterable[str], pins: Pins = NO_PINS, xid: str = ""
) -> str:
    """Per DRA node (no ``nvidia.com/gpu`` capacity), the GPUs whose last Xid is one of `codes`:
    the gauge keeps it until a reset, the loss capacity minus allocatable cannot show. `xid`: the
    gauge's selector (narrowed by `hold_queries`)."""
    gauge = xid or pins.dcgm(XID_METRIC)
    hard = " or ".join(f"({gauge}) == {code}" for code in sorted(set(codes)))
    if not hard:
        return ""
    return (
        f"(count by ({NODE_LABEL}) ({first_host(f'({hard})', labels)})"
        f" unless on ({NODE_LABEL}) {pins.ksm(CAPACITY_METRIC)}"
        # only Nodes kube-state-metrics lists: a GPU none of `labels` names is no node's loss
        f" and on ({NODE_LABEL}) {pins.ksm(UNSCHEDULABLE_METRIC)})"
    )


def guard_loss(s: Settings, pins: Pins, xid: str = "") -> str:
    """The guard's GPU loss per node: `gpu_loss`, and `dra_loss` on nodes without the resource."""
    dra = dra_loss(dra_loss_xids(s), _naming(s), pins, xid)
    return f"({gpu_loss(pins)} or {dra})" if dra else gpu_loss(pins)


def _gpu_count(selector: str) -> str:
    """The series of `selector` whose value is a whole number (NaN is not one)."""
    return f"(({selector} >= 0) == floor({selector}))"


def not_cordoned(pins: Pins = NO_PINS) -> str:
    return f"(max by ({NODE_LABEL}) ({pins.ksm(UNSCHEDULABLE_METRIC)}) == 0)"


# ---- The guard's own queries ---------------------------------------------------------------
# They return dcgm-exporter's own labels: which one names the Node, and the hold window, are
# decided in `guard.read.prom_view` against the API's Node names, the same way on every engine.


@dataclass(frozen=True, slots=True)
class Query:
    """One request of a cycle: `kind` is the result type the answer must have; a matrix is
    evaluated on the step grid, the same on every engine (docs/engines.md)."""

    name: str
    promql: str
    kind: Literal["vector", "matrix"] = "vector"
    required: tuple[str, ...] = ()  # labels every series must carry (non-empty)
    lookback_s: int = 0  # a matrix's range


def _history(name: str, expr: str, lookback_s: int, step_s: int) -> Query:
    """A per-node matrix of `expr` on the step grid (`guard.codec.series.loss_since`)."""
    return Query(name, f"({expr})[{lookback_s}s:{step_s}s]", "matrix", (NODE_LABEL,), lookback_s)


def _naming(s: Settings) -> tuple[str, ...]:
    """The labels that may name a GPU's node, ``node`` first."""
    return tuple(dict.fromkeys((NODE_LABEL, *s.dcgm_node_label_names)))


def user_code_filter(user_code_xids: Iterable[int]) -> str:
    return "".join(f" != {code}" for code in sorted(set(user_code_xids)))


def hardware_xid_now(user_code_xids: Iterable[int], pins: Pins = NO_PINS) -> str:
    """Per-GPU series whose last Xid is set and not caused by user code; value = the Xid."""
    return f"{pins.dcgm(XID_METRIC)} > 0{user_code_filter(user_code_xids)}"


def _xid_counted(user_code_xids: Iterable[int], pins: Pins) -> str:
    """The exporter's per-(GPU, `xid`) counter of hardware Xids: the gauge keeps only the last
    Xid, so a user-code Xid after a hardware one hides it (NVIDIA/DCGM#235). Optional."""
    codes = "|".join(str(code) for code in sorted(set(user_code_xids)))
    return pins.dcgm(f'{XID_COUNT_METRIC}{{xid!~"{codes}"}}')


def hardware_xid_counted(
    user_code_xids: Iterable[int], lookback_s: int, pins: Pins = NO_PINS
) -> str:
    return f"max_over_time({_xid_counted(user_code_xids, pins)}[{lookback_s}s]) > 0"


def cordoned_nodes(pins: Pins = NO_PINS) -> str:
    return f"max by ({NODE_LABEL}) ({pins.ksm(UNSCHEDULABLE_METRIC)}) > 0"


def gpu_pods(s: Settings, pins: Pins = NO_PINS) -> str:
    """Running GPU pods outside the guard's namespace on the nodes a cycle may tell or return
    (unschedulable, GPU loss, a fabric fault, admission rejections); value = GPUs requested, one
    series per pod (`max by` collapses duplicate kube-state-metrics replicas)."""
    jobs = f'namespace!="{s.jobs_namespace}"'
    requests = pins.ksm(f"{POD_REQUESTS_METRIC.removesuffix('}')}, {jobs}}}")
    per_container = f"max by (namespace, pod, uid, node, container) ({requests})"
    phase = pins.ksm(f'{POD_PHASE_METRIC}{{phase="Running"}}')
    running = f"({phase} == 1)"
    cordoned = f"{pins.ksm(UNSCHEDULABLE_METRIC)} == 1"
    nodes = [cordoned, f"{gpu_loss(pins)} > 0", fabric_failed(s, pins)]
    if s.admission_rejected_min_pods > 0:
        nodes.append(admission(s, pins))
    return (
        f"sum by (namespace, pod, uid, node) ({per_container}) > 0"
        f" and on (namespace, pod, uid) {running}"
        f" and on ({NODE_LABEL}) ({' or '.join(f'({n})' for n in nodes)})"
    )


# The device plugin's GPU capacity: not required where the DRA driver publishes the GPUs.
DEVICE_PLUGIN_INPUT = "kube_node_status_capacity{resource=nvidia_com_gpu}"


def required_inputs(pins: Pins = NO_PINS) -> tuple[tuple[str, str], ...]:
    """Each input must have a series: a broken scrape must not look like a healthy cluster."""
    return (
        ("kube_node_spec_unschedulable", f"count({pins.ksm(UNSCHEDULABLE_METRIC)})"),
        ("DCGM_FI_DEV_XID_ERRORS", f"count({pins.dcgm(XID_METRIC)})"),
        (DEVICE_PLUGIN_INPUT, f"count({pins.ksm(CAPACITY_METRIC)})"),
        ("kube_pod_status_phase", f"count({pins.ksm(POD_PHASE_METRIC)})"),
    )


REQUIRED_INPUTS = required_inputs()


def selector_hint(metric: str, s: Settings) -> str:
    dcgm = metric.startswith("DCGM_")
    chosen = s.dcgm_selector if dcgm else s.ksm_selector
    flag = "--dcgm-selector" if dcgm else "--ksm-selector"
    return f" matching {flag} {chosen.strip()}" if chosen.strip() else ""


def required_input_name(metric: str) -> str:
    return f"input-{metric.split('{')[0]}"


def lookback_s(s: Settings, hold_s: int) -> int:
    """A history's range: `HELD_LOOKBACK_S`, or longer when its hold `hold_s` needs it."""
    return max(HELD_LOOKBACK_S, hold_s + 2 * s.query_step_s)


def loss_lookback_s(s: Settings) -> int:
    return lookback_s(s, s.hold_window_s)


def guard_queries(s: Settings) -> tuple[Query, ...]:
    """Every request of one cycle, in the order `guard.read.prom_view.read_prom` sends them."""
    codes = s.user_code_xids
    lookback = loss_lookback_s(s)
    pins = Pins.of(s)
    counted = hardware_xid_counted(codes, lookback, pins)
    by = ", ".join(_naming(s))  # one series per set of node-naming labels: ≈ one per exporter
    return (
        *(Query(required_input_name(metric), promql) for metric, promql in required_inputs(pins)),
        Query("hardware-xid", hardware_xid_now(codes, pins)),
        Query("hardware-xid-counted", counted, required=("xid",)),
        Query("row-remap", " or ".join(f"{pins.dcgm(m)} > 0" for m in ROW_REMAP_METRICS)),
        _history("loss-history", f"{guard_loss(s, pins)} > 0", lookback, s.query_step_s),
        Query("cordoned", cordoned_nodes(pins), required=(NODE_LABEL,)),
        Query("gpu-pods", gpu_pods(s, pins), required=("namespace", "pod", NODE_LABEL)),
        Query("xid-hosts", f"count by ({by}) ({pins.dcgm(XID_METRIC)})"),
        Query("exporter-hosts", f"count by ({by}) ({pins.dcgm(EXPORTER_METRICS)})"),
        *signal_queries(s),
        *trigger_queries(s),
    )


# ---- The in-run watch (guard/watch.py): one cheap poll, then the cycle's queries narrowed ----

WATCH_POLL = "watch-faults"


def watch_poll(s: Settings) -> Query:
    """Nodes with a hardware Xid (gauge or counter) and GPU loss now, not cordoned; one series
    per node."""
    codes, pins = s.user_code_xids, Pins.of(s)
    sources = (hardware_xid_now(codes, pins), hardware_xid_counted(codes, loss_lookback_s(s), pins))
    xids = " or ".join(first_host(x, s.dcgm_node_label_names) for x in sources)
    promql = (
        f"count by ({NODE_LABEL}) (({xids}) and on ({NODE_LABEL}) ({guard_loss(s, pins)} > 0)"
        f" and on ({NODE_LABEL}) {not_cordoned(pins)})"
    )
    return Query(WATCH_POLL, promql, required=(NODE_LABEL,))


def first_host(expr: str, labels: Iterable[str]) -> str:
    """`expr` with ``node`` set to the first of its own ``node`` and `labels` that is set."""
    names = ", ".join(f'"{label}"' for label in dict.fromkeys((NODE_LABEL, *labels)))
    joined = f'label_join({expr}, "guard_host", ";", {names})'
    return f'label_replace({joined}, "{NODE_LABEL}", "$1", "guard_host", ";*([^;]+).*")'


def _one_node(metric: str, labels: Iterable[str], nodes: tuple[str, ...]) -> str:
    """`metric` on the `nodes`, by whichever naming label."""
    return " or ".join(pin(metric, _is(label, *nodes)) for label in labels)


def _is(label: str, *values: str) -> str:
    """`label` equal to the value(s); of DNS-1123 names only the dot needs quoting, as a class
    (no backslash to escape on any engine)."""
    unique = sorted(set(values))
    if len(unique) == 1:
        return f'{label}="{unique[0]}"'
    return f'{label}=~"{"|".join(v.replace(".", "[.]") for v in unique)}"'


def hold_queries(s: Settings, *nodes: str) -> tuple[Query, ...]:
    """The cycle's Xid, loss-history and cordoned queries narrowed to `nodes`, one request each
    for all the nodes the watch decides at one instant."""
    codes = s.user_code_xids
    lookback = loss_lookback_s(s)
    base = Pins.of(s)
    labels = _naming(s)
    dcgm = base.dcgm(XID_METRIC)
    counted = _xid_counted(codes, base)
    ksm = Pins(base.dcgm_matchers, f"{base.ksm_matchers}, {_is(NODE_LABEL, *nodes)}".lstrip(", "))
    gauge = f"({_one_node(dcgm, labels, nodes)}) > 0{user_code_filter(codes)}"
    counted_now = " or ".join(
        f"max_over_time({pin(counted, _is(label, *nodes))}[{lookback}s]) > 0" for label in labels
    )
    loss = guard_loss(s, ksm, _one_node(dcgm, labels, nodes))
    return (
        Query("hardware-xid", gauge),
        Query("hardware-xid-counted", counted_now, required=("xid",)),
        _history("loss-history", f"{loss} > 0", lookback, s.query_step_s),
        Query("cordoned", cordoned_nodes(ksm), required=(NODE_LABEL,)),
    )


def return_queries(s: Settings, names: Collection[str], *nodes: str) -> tuple[Query, ...]:
    """The cycle's queries `names` (the return rows' inputs) narrowed to `nodes`, one request
    each whatever their number (guard/returns.py)."""
    pins = Pins.of(s)
    labels = _naming(s)
    held = pins.ksm(pin(UNSCHEDULABLE_METRIC, _is(NODE_LABEL, *nodes)))
    remap = (f"({_one_node(pins.dcgm(m), labels, nodes)}) > 0" for m in ROW_REMAP_METRICS)
    cycle = guard_queries(s)  # service-network-seen counts the whole cluster: as it is
    per_node = ("gpu-pods", "nvml-status", "service-network-pods")
    narrowed = (replace(q, promql=f"({q.promql}) and on ({NODE_LABEL}) {held}") for q in cycle)
    made = {
        **{q.name: q for q in cycle},
        **{q.name: q for q in narrowed if q.name in per_node},
        **{q.name: q for q in (*trigger_queries(s, held), *hold_queries(s, *nodes)[:2])},
        "row-remap": Query("row-remap", " or ".join(remap)),
    }
    return tuple(made[n] for n in sorted(names) if n in made)


# ---- Node signals: the agent's nvidia-match and the node's service network (absence is never a
# verdict: docs/node-signals.md) -------------------------------------------------------------

POD_INFO_METRIC = "kube_pod_info"
POD_READY_METRIC = 'kube_pod_status_ready{condition="true"}'
SELECTOR_LABEL = "selector"  # which service-network selector picked the pod: kube-proxy, cni
_NVML_LABELS = (NODE_LABEL, "status")


def nvml_mismatch(*nodes: str) -> str:
    """Per node, 1 while every agent series says nvidia-match failed; absent for SKIP, UNKNOWN
    and no agent."""
    one = f", {_is(NODE_LABEL, *nodes)}" if nodes else ""
    return f'(1 - max by ({NODE_LABEL}) ({AGENT_CHECK_OK}{{check="{NVIDIA_MATCH}"{one}}})) > 0'


def mismatch_queries(s: Settings, *nodes: str) -> tuple[Query, ...]:
    """The cycle's nvidia-match history and status narrowed to `nodes` (the in-run watch's)."""
    return (
        _nvml_history(s, *nodes),
        Query("nvml-status", _nvml_info(f", {_is(NODE_LABEL, *nodes)}"), required=_NVML_LABELS),
    )


def _nvml_history(s: Settings, *nodes: str) -> Query:
    """Per node, the steps of the lookback with the mismatch, read as GPU loss is (a step
    without a failing sample breaks the run; `min_over_time` would skip the gaps)."""
    lookback = lookback_s(s, s.nvml_hold_s)
    return _history("nvml-mismatch-history", nvml_mismatch(*nodes), lookback, s.query_step_s)


def _nvml_info(matchers: str = "") -> str:
    check = f'{AGENT_CHECK_INFO}{{check="{NVIDIA_MATCH}"{matchers}}}'
    return f"max by ({NODE_LABEL}, status, detail) ({check})"


def nvml_status(pins: Pins = NO_PINS) -> str:
    """The agent's nvidia-match status and detail now, on nodes failing it or unschedulable."""
    return f"{_nvml_info()} and on ({NODE_LABEL}) ({nvml_mismatch()} or {cordoned_nodes(pins)})"


def service_network_selectors(s: Settings) -> tuple[tuple[str, str], ...]:
    """(name, `kube_pod_info` matchers) of the pods a node's service network needs (the
    alert `NodeServiceNetworkDown` selects the same)."""
    out = []
    if s.service_network_kube_proxy_pods:
        pods = f'pod=~"{s.service_network_kube_proxy_pods}"'
        out.append(("kube-proxy", _in_namespace(s.service_network_kube_proxy_namespace, pods)))
    if s.service_network_cni_daemonsets:
        names = s.service_network_cni_daemonsets
        owner = f'created_by_kind="DaemonSet", created_by_name=~"{names}"'
        out.append(("cni", _in_namespace(s.service_network_cni_namespace, owner)))
    return tuple(out)


def _in_namespace(namespace: str, matchers: str) -> str:
    return f'namespace="{namespace}", {matchers}' if namespace else matchers


def _service_network_selected(s: Settings) -> str:
    """Every selected pod with its node and the selector that picked it."""
    pins = Pins.of(s)
    parts = (
        f'label_replace({pins.ksm(f"{POD_INFO_METRIC}{{{matchers}}}")}, "{SELECTOR_LABEL}",'
        f' "{name}", "", "")'
        for name, matchers in service_network_selectors(s)
    )
    return f"max by (namespace, pod, {NODE_LABEL}, {SELECTOR_LABEL}) ({' or '.join(parts)})"


def service_network_pods(s: Settings) -> str:
    """The selected pods on unschedulable nodes; value = Ready (1) or not (0)."""
    pins = Pins.of(s)
    ready = f"max by (namespace, pod) ({pins.ksm(POD_READY_METRIC)})"
    return (
        f"{_service_network_selected(s)} * on (namespace, pod) group_left () {ready}"
        f" and on ({NODE_LABEL}) ({pins.ksm(UNSCHEDULABLE_METRIC)} == 1)"
    )


def service_network_seen(s: Settings) -> str:
    """Per selector, the pods it selects in the whole cluster (absent: it does not apply)."""
    return f"count by ({SELECTOR_LABEL}) ({_service_network_selected(s)})"


def signal_queries(s: Settings) -> tuple[Query, ...]:
    pods = ("namespace", "pod", NODE_LABEL, SELECTOR_LABEL)
    return (
        _nvml_history(s),
        Query("nvml-status", nvml_status(Pins.of(s)), required=_NVML_LABELS),
        Query("service-network-pods", service_network_pods(s), required=pods),
        Query("service-network-seen", service_network_seen(s), required=(SELECTOR_LABEL,)),
    )


# ---- Node triggers without an Xid (guard/plan/triggers, docs/triggers.md) ------------------
# Of kube_pod_status_reason's reasons only UnexpectedAdmissionError is the node's (kubelet's
# device manager could not allocate a device the node advertises).
ADMISSION_REASON = "UnexpectedAdmissionError"
POD_REASON_METRIC = f'kube_pod_status_reason{{reason="{ADMISSION_REASON}"}}'
POD_CREATED_METRIC = "kube_pod_created"


def admission_rejected(min_pods: int, window_s: int, pins: Pins = NO_PINS) -> str:
    """Per node, the GPU pods kubelet refused with UnexpectedAdmissionError created within
    `window_s` (old Failed pods stop counting), where at least `min_pods`."""
    pod = "namespace, pod"
    rejected = f"(max by ({pod}) ({pins.ksm(POD_REASON_METRIC)}) == 1)"
    placed = pins.ksm(POD_INFO_METRIC + '{node!=""}')
    where = f"max by ({pod}, {NODE_LABEL}) ({placed})"
    gpu = f"(max by ({pod}) ({pins.ksm(POD_REQUESTS_METRIC)}) > 0)"
    created = f"(max by ({pod}) ({pins.ksm(POD_CREATED_METRIC)}) > time() - {window_s})"
    return (
        f"count by ({NODE_LABEL}) ({rejected} * on ({pod}) group_left ({NODE_LABEL}) {where}"
        f" and on ({pod}) {gpu} and on ({pod}) {created}) >= {min_pods}"
    )


def admission(s: Settings, pins: Pins = NO_PINS) -> str:
    return admission_rejected(s.admission_rejected_min_pods, s.admission_rejected_window_s, pins)


def gpu_count(s: Settings, pins: Pins = NO_PINS) -> str:
    """Per node, the lower of its GPU capacity and dcgm-exporter's GPUs (none: not short)."""
    capacity = f"max by ({NODE_LABEL}) ({_gpu_count(pins.ksm(CAPACITY_METRIC))})"
    xid = first_host(pins.dcgm(XID_METRIC), s.dcgm_node_label_names)
    exporter = f"count by ({NODE_LABEL}) (count by ({NODE_LABEL}, gpu) ({xid}))"
    sources = (
        f'label_replace({capacity}, "source", "capacity", "", "")'
        f' or label_replace({exporter}, "source", "dcgm", "", "")'
    )
    return f"min by ({NODE_LABEL}) ({sources})"


# The fabric fields and which of their values are a fault the node owns: docs/triggers.md.
FABRIC_METRIC = "DCGM_FI_DEV_FABRIC_MANAGER_STATUS"
FABRIC_FAILURE = 4  # dcgmFabricManagerStatus_t
FABRIC_SUCCESS = 3
NVSWITCH_FATAL_METRIC = "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS"
NVSWITCH_LINK_METRIC = "DCGM_FI_DEV_NVSWITCH_LINK_STATUS"
NVSWITCH_LINK_ERROR = 3  # UNKNOWN -1, OFF 0, SAFE 1, ACTIVE 2, ERROR 3
NVLINK_RECOVERY_METRIC = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
FABRIC_METRICS = (
    FABRIC_METRIC,
    NVSWITCH_FATAL_METRIC,
    NVSWITCH_LINK_METRIC,
    NVLINK_RECOVERY_METRIC,
)


def _fabric_faults(s: Settings, pins: Pins) -> str:
    """Every faulted fabric entity (a GPU, an NVSwitch, a port) with its ``node``."""
    faults = (
        f"{pins.dcgm(FABRIC_METRIC)} == {FABRIC_FAILURE}",
        f"{pins.dcgm(NVSWITCH_FATAL_METRIC)} > 0",
        f"{pins.dcgm(NVSWITCH_LINK_METRIC)} == {NVSWITCH_LINK_ERROR}",
        f"{grown_by(pins.dcgm(NVLINK_RECOVERY_METRIC), s.fabric_hold)} > 0",
    )
    return " or ".join(first_host(f, s.dcgm_node_label_names) for f in faults)


def fabric_failed(s: Settings, pins: Pins = NO_PINS) -> str:
    return f"count by ({NODE_LABEL}) ({_fabric_faults(s, pins)})"


def fabric_not_success(s: Settings, pins: Pins = NO_PINS) -> str:
    """Per node, its fabric entities not healthy now: faulted, or a status but Success."""
    other = first_host(f"{pins.dcgm(FABRIC_METRIC)} != {FABRIC_SUCCESS}", s.dcgm_node_label_names)
    return f"count by ({NODE_LABEL}) ({other} or {_fabric_faults(s, pins)})"


def fabric_seen(pins: Pins = NO_PINS) -> str:
    """The series of any fabric field: 0 or none, the trigger does not apply."""
    names = "|".join(FABRIC_METRICS)
    selector = '{__name__=~"' + names + '"}'
    return f"count({pins.dcgm(selector)})"


def trigger_lookback_s(s: Settings) -> int:
    return lookback_s(s, max(s.gpu_short_hold, s.admission_hold, s.fabric_hold))


def trigger_queries(s: Settings, only: str = "") -> tuple[Query, ...]:
    """The histories the node triggers hold on (none for one that is off), each per-node answer
    narrowed to the Nodes `only` selects (`return_queries`)."""
    pins = Pins.of(s)

    def of(expr: str) -> str:
        return f"({expr}) and on ({NODE_LABEL}) {only}" if only else expr

    def history(name: str, expr: str) -> Query:
        return _history(name, of(expr), trigger_lookback_s(s), s.query_step_s)

    rejected = admission(s, pins)
    return (
        *((history("gpu-count-history", gpu_count(s, pins)),) if s.gpu_classes.strip() else ()),
        *((history("admission-history", rejected),) if s.admission_rejected_min_pods > 0 else ()),
        history("fabric-history", fabric_failed(s, pins)),
        Query("fabric-not-success", of(fabric_not_success(s, pins)), required=(NODE_LABEL,)),
        Query("fabric-seen", fabric_seen(pins)),
    )


def grown_by(metric: str, window_s: int) -> str:
    """A counter's growth in the window, now less its lowest sample there: the same on every
    engine, as ``increase()`` is not (docs/engines.md)."""
    return f"({metric} - min_over_time({metric}[{duration(window_s)}]))"


def duration(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def ksm_label(kind: str, key: str) -> str:
    """The label kube-state-metrics makes of an allowlisted label or annotation key."""
    sanitized = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return f"{kind}_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", sanitized).lower()
