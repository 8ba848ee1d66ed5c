"""Prometheus answers → `PromView`: GPU series joined to Nodes, facts only (guard/plan/hold.py
decides). A series names its Node by `node`, else by the first of `dcgm_node_label_names` that
does. Every label that reaches a write or a log line is checked here (`_Intake`): a bad series
drops every fact of its node (`PromUnreadable`); a bad answer as a whole aborts."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from guard.codec import queries
from guard.codec.series import PROM_FIX, loss_since, on_step
from guard.doors.prom import BadSeries, Checked, PromClient, PromError, Sample, Series, T
from guard.log import Value
from guard.model import (
    AgentCheck,
    GpuHolder,
    GpuPod,
    GpuSample,
    HostLabels,
    NodeInfo,
    PromUnreadable,
    PromView,
    ServicePod,
    Unreadable,
)
from guard.names import is_dns_label, is_dns_subdomain
from guard.pci import normalize_pci
from guard.read.objects import GPU_UUID
from guard.settings import Settings
from guard.xid_tables import load_catalog

COVERAGE_NAMES = 5


class JoinError(PromError):
    """dcgm-exporter series exist but none of them names a Node."""


def read_prom(
    client: PromClient,
    s: Settings,
    now: datetime,
    node_names: Collection[str] = (),
    sent: tuple[queries.Query, ...] = (),
    dra_gpus: bool = False,
) -> PromView:
    """Run every query at `now` (or only `sent`: the watch's narrowed queries); a missing input or
    a bad answer raises `PromError`, a bad series drops its node (`PromView.unreadable`)."""
    intake = _Intake(s.dcgm_node_label_names, frozenset(node_names))
    vectors: dict[str, tuple[Sample, ...]] = {}
    matrices: dict[str, tuple[Series, ...]] = {}
    lookbacks: dict[str, int] = {}
    for q in sent or queries.guard_queries(s):
        matrix = q.kind == "matrix"
        lookbacks[q.name] = q.lookback_s
        at = on_step(now, s.query_step_s) if matrix else now
        window = q.lookback_s + s.query_step_s if matrix else None
        got = intake.checked(q.name, client.checked(q.name, q.promql, at, q.required, window))
        (matrices if matrix else vectors)[q.name] = got
    if not sent:
        found = {m: vectors[queries.required_input_name(m)] for m, _ in queries.REQUIRED_INPUTS}
        counts = {m: x[0].value if x else 0.0 for m, x in found.items()}  # count(…): none is 0
        missing = missing_input(counts, dra_gpus)
        if missing:
            either = " and no gpu.nvidia.com ResourceSlice publishes a GPU"
            either = either if missing == queries.DEVICE_PLUGIN_INPUT else ""
            raise PromError(
                f"input metric {missing} has no series{queries.selector_hint(missing, s)}"
                f"{either}: check the exporter and scrape"
            )

    def vector(name: str) -> tuple[Sample, ...]:
        return vectors.get(name, ())

    def since(name: str) -> tuple[tuple[str, datetime], ...]:
        return loss_since(matrices.get(name, ()), now, s.query_step_s, lookbacks.get(name, 0))

    node, selector = queries.NODE_LABEL, queries.SELECTOR_LABEL
    hardware = (
        *intake.gpus("hardware-xid", vector("hardware-xid"), xid_value=True),
        *intake.gpus("hardware-xid-counted", vector("hardware-xid-counted"), value_label="xid"),
    )
    agent = {
        (x.label(node), x.label("status"), x.label("detail"))
        for x in intake.agent("nvml-status", vector("nvml-status"))
    }
    pods = (
        ServicePod(
            x.label(selector), x.label("namespace"), x.label("pod"), x.label(node), x.value >= 1
        )
        for x in intake.pods("service-network-pods", vector("service-network-pods"), selector=True)
    )
    seen = intake.selectors("service-network-seen", vector("service-network-seen"))
    fabric = vector("fabric-seen")
    rejected = since("admission-history")  # empty where not sent, as every fact below
    view = PromView(
        hardware_xids=_unique(hardware),
        row_remap=_unique(intake.gpus("row-remap", vector("row-remap"))),
        loss_since=since("loss-history"),
        cordoned=tuple(sorted({x.label(node) for x in vector("cordoned")})),
        gpu_pods=_gpu_pods(intake.pods("gpu-pods", vector("gpu-pods"))),
        gpu_holders=intake.holders((*vector("hardware-xid"), *vector("hardware-xid-counted"))),
        xid_hosts=_hosts(vector("xid-hosts"), intake),
        exporter_hosts=_hosts(vector("exporter-hosts"), intake),
        nvml_since=since("nvml-mismatch-history"),
        nvml_status=tuple(AgentCheck(*a) for a in sorted(agent)),
        service_pods=tuple(sorted(pods, key=lambda p: (p.node, p.selector, p.namespace, p.name))),
        service_seen=tuple(sorted((x.label(selector), int(x.value)) for x in seen)),
        gpu_counts=_gpu_counts(matrices.get("gpu-count-history", ())),
        admission_since=rejected,
        admission_now=_latest(matrices.get("admission-history", ()), {n for n, _ in rejected}),
        fabric_since=since("fabric-history"),
        fabric_not_success=tuple(sorted({x.label(node) for x in vector("fabric-not-success")})),
        fabric_seen=any(x.value > 0 for x in fabric) if "fabric-seen" in vectors else None,
    )
    return _without(view, intake.problems)


def missing_input(counts: Mapping[str, float], dra_gpus: bool) -> str | None:
    """The first required input with no series, or None; the device plugin's GPU capacity is
    waived where the DRA driver publishes GPUs (a DRA-only cluster has no nvidia.com/gpu).

    >>> inputs = {m: 1.0 for m, _ in queries.REQUIRED_INPUTS}
    >>> gone = {**inputs, queries.DEVICE_PLUGIN_INPUT: 0.0}
    >>> missing_input(gone, dra_gpus=False), missing_input(gone, dra_gpus=True)
    ('kube_node_status_capacity{resource=nvidia_com_gpu}', None)
    """
    waived = {queries.DEVICE_PLUGIN_INPUT} if dra_gpus else set()
    for metric, _ in queries.REQUIRED_INPUTS:
        if metric not in waived and counts.get(metric, 0.0) < 1:
            return metric
    return None


def _gpu_counts(
    found: Iterable[Series],
) -> tuple[tuple[str, tuple[tuple[datetime, int], ...]], ...]:
    """Each node's GPU count per step."""
    return tuple(
        sorted(
            (
                x.label(queries.NODE_LABEL),
                tuple((datetime.fromtimestamp(t, UTC), int(v)) for t, v in sorted(x.points)),
            )
            for x in found
        )
    )


def _latest(found: Iterable[Series], running: set[str]) -> tuple[tuple[str, int], ...]:
    """The last count of the nodes whose admission rejections run now."""
    node = queries.NODE_LABEL
    return tuple(
        sorted(
            (x.label(node), int(max(x.points)[1]))
            for x in found
            if x.points and x.label(node) in running
        )
    )


# The facts `_without` drops for a node with a bad series.
_PER_NODE = (
    "hardware_xids",
    "row_remap",
    "gpu_pods",
    "gpu_holders",
    "nvml_status",
    "service_pods",
    "loss_since",
    "nvml_since",
    "gpu_counts",
    "admission_since",
    "admission_now",
    "fabric_since",
    "cordoned",
    "fabric_not_success",
)


def _node_of(fact: Any) -> str:
    """A fact's node: the fact itself (a node name), a pair's first item, or its `node`."""
    return str(fact if isinstance(fact, str) else fact[0] if isinstance(fact, tuple) else fact.node)


def _without(view: PromView, problems: Iterable[PromUnreadable]) -> PromView:
    """The view without any fact of a node that had a bad series, and the problems kept."""
    found = tuple(sorted(set(problems), key=lambda p: (p.node, p.query, p.label, p.value)))
    gone = {p.node for p in found}
    if not found:
        return view
    kept: dict[str, Any] = {
        name: tuple(x for x in getattr(view, name) if _node_of(x) not in gone) for name in _PER_NODE
    }
    return replace(view, **kept, unreadable=found)


def with_prom_unreadable(node: NodeInfo, view: PromView) -> NodeInfo:
    """The node marked unreadable for its refused series: every planner leaves it alone."""
    found = tuple(
        Unreadable(f"prometheus {p.query} {p.label}", p.value, p.why, PROM_FIX, "prometheus")
        for p in view.unreadable
        if p.node == node.name
    )
    return replace(node, unreadable=node.unreadable + found) if found else node


def check_join(view: PromView, nodes: Iterable[NodeInfo]) -> tuple[str, ...]:
    """GPU nodes without any dcgm-exporter series (sorted); `JoinError` when no Xid series
    names a Node at all (every fault would be silently not-in-api)."""
    names = {n.name for n in nodes}
    if view.xid_hosts and not any(_first(h, names) in names for h in view.xid_hosts):
        example = "{" + ",".join(f'{k}="{v}"' for k, v in view.xid_hosts[0]) + "}"
        raise JoinError(
            f"no {queries.XID_METRIC} series names a Node (e.g. {example}, none of"
            f" {len(names)} Nodes): set NODE_NAME in dcgm-exporter (env from fieldRef"
            " spec.nodeName) or relabel the Node name into `node`; --dcgm-node-labels chooses"
            " the label"
        )
    covered = {_first(h, names) for h in view.exporter_hosts}
    return tuple(sorted(n.name for n in nodes if n.gpu_capacity > 0 and n.name not in covered))


def coverage_pairs(missing: tuple[str, ...]) -> dict[str, Value]:
    """The fields of the one `dcgm-missing` WARN line: GPU nodes without dcgm-exporter series."""
    shown = ",".join(missing[:COVERAGE_NAMES]) + (",…" if len(missing) > COVERAGE_NAMES else "")
    return {
        "missing": len(missing),
        "nodes": shown,
        "next": "GPU faults on these nodes go unseen: check dcgm-exporter and its scrape there",
    }


def _first(hosts: HostLabels, names: Collection[str]) -> str:
    """The first value naming a known Node, else the first value (or "" when none)."""
    values = [v for _, v in hosts]
    return next((v for v in values if v in names), values[0] if values else "")


def _unique(samples: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """One sample per (node, GPU, value): MIG instances and the two Xid sources repeat them."""
    return tuple(sorted(set(samples), key=lambda g: (g.node, g.gpu.zfill(4), g.uuid, g.value)))


def _gpu_pods(samples: Iterable[Sample]) -> tuple[GpuPod, ...]:
    pods = (
        GpuPod(x.label("namespace"), x.label("pod"), x.label("node"), int(x.value), _uid(x))
        for x in samples
    )
    return tuple(sorted(pods, key=lambda p: (p.node, p.namespace, p.name)))


def _uid(x: Sample) -> str:
    """kube-state-metrics' pod uid, where it is one: an Event's regarding.uid."""
    uid = x.label("uid")
    return uid if _POD_UID.fullmatch(uid) else ""


def _hosts(samples: Iterable[Sample], intake: _Intake) -> tuple[HostLabels, ...]:
    return tuple(sorted({h for h in (intake.hosts(x) for x in samples) if h}))


# ---- the checks at the boundary ---------------------------------------------------------

# dcgm-exporter's DCGM/NVML form 00000000:3B:00.0; the 4-digit domain of sysfs is accepted too.
_PCI_BUS_ID = re.compile(r"([0-9a-fA-F]{8}|[0-9a-fA-F]{4}):[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_POD_UID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
_GPU_INDEX = re.compile(r"[0-9]{1,4}")
_DIGITS = re.compile(r"[0-9]{1,7}")  # ASCII only: "²".isdigit() is True, int("²") fails
_AGENT_STATUS = ("PASS", "WARN", "FAIL", "UNKNOWN", "SKIP")  # docs/agent.md
_DETAIL_MAX = 256
_NAME_MAX = 253  # guard.names.is_dns_subdomain's
_Check = tuple[
    str, Callable[[str], bool], str
]  # a label, whether a value is valid, what it must be


@functools.cache
def xid_range() -> tuple[int, int]:
    """The Xids the bundled catalogue knows: 1 up to its highest code."""
    return 1, max(load_catalog())


def xid_of(value: float) -> int | None:
    """The Xid a gauge value or an `xid` label's number stands for; None when it is none.

    >>> xid_of(79.0), xid_of(79.9), xid_of(-79.0), xid_of(0.0), xid_of(1e300)
    (79, None, None, None, None)
    """
    low, high = xid_range()
    if not value.is_integer() or not low <= value <= high:
        return None
    return int(value)


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda value: pattern.fullmatch(value) is not None


class _Intake:
    """Checks each series of one cycle's answers and names its Node (`labels`, the values that
    may, in order; `names`, the API's Nodes); `problems` collects the refused ones."""

    def __init__(self, labels: tuple[str, ...], names: frozenset[str]) -> None:
        self.labels = tuple(dict.fromkeys((queries.NODE_LABEL, *labels)))
        self.names = names
        self.problems: list[PromUnreadable] = []

    def hosts(self, sample: Sample | Series | BadSeries) -> HostLabels:
        return tuple((k, v) for k in self.labels if (v := sample.label(k)))

    def refuse(self, node: str, query: str, label: str, value: str, why: str) -> None:
        self.problems.append(PromUnreadable(node, query, label, value, why))

    def node_of(self, labels: Sample | Series | BadSeries) -> str:
        """The node a series belongs to, from its naming labels that are valid names only."""
        hosts = tuple((k, v) for k, v in self.hosts(labels) if is_dns_subdomain(v))
        return _first(hosts, self.names)

    def _bad(self, query: str, bad: Iterable[BadSeries]) -> None:
        for b in bad:
            node = self.node_of(b)
            if not node:  # nothing to blame it on: a whole-answer fault
                value = f" {b.value}" if b.value else ""
                raise PromError(f"query {query}: {b.why}{value}; the series names no node")
            why = "not a finite number" if b.value else b.why
            self.refuse(node, query, b.what, b.value, why)

    def checked(self, query: str, got: Checked[T]) -> tuple[T, ...]:
        """The answer's series whose naming labels are node names; the bad ones refused."""
        self._bad(query, got.bad)
        must = f"a Node name (DNS-1123 subdomain of at most {_NAME_MAX})"
        named = [(label, is_dns_subdomain, must) for label in self.labels]
        return tuple(x for x in got.good if self._check(query, x, named))

    def _check(self, query: str, x: Sample | Series, checks: Iterable[_Check]) -> bool:
        """(label, valid?, what it must be) for each label; absent labels are not checked."""
        for label, valid, must in checks:
            value = x.label(label)
            if value and not valid(value):
                self.refuse(self.node_of(x), query, label, value, f"not {must}")
                return False
        return True

    def gpus(
        self, query: str, samples: Iterable[Sample], xid_value: bool = False, value_label: str = ""
    ) -> tuple[GpuSample, ...]:
        """dcgm-exporter series as GpuSamples; two series of one GPU that disagree are refused."""
        uuid_form = "a GPU UUID (GPU-8-4-4-4-12 hex)"
        checks = (
            ("UUID", _matches(GPU_UUID), uuid_form),
            ("uuid", _matches(GPU_UUID), uuid_form),
            ("pci_bus_id", _matches(_PCI_BUS_ID), "a PCI bus id like 00000000:3B:00.0"),
            ("gpu", _matches(_GPU_INDEX), "a GPU index"),
        )
        not_xid = "not an Xid (an integer in {}..{})".format(*xid_range())
        out: dict[tuple[str, ...], GpuSample] = {}
        for s in samples:
            if not self._check(query, s, checks):
                continue
            node = self.node_of(s)
            # (label, its text, why not) of the value: an `xid` label, the gauge's Xid, a count
            what, text, why = "value", f"{s.value:g}", not_xid if xid_value else "not an integer"
            value: int | None = int(s.value) if s.value.is_integer() else None
            if value_label:
                what, text, why = value_label, s.label(value_label), not_xid
                value = xid_of(float(text)) if _DIGITS.fullmatch(text) else None
            elif xid_value:
                value = xid_of(s.value)
            if value is None:
                self.refuse(node, query, what, text, why)
                continue
            pci = normalize_pci(s.label("pci_bus_id")) if s.label("pci_bus_id") else "unknown"
            uuid = s.label("UUID") or s.label("uuid") or "unknown"
            g = GpuSample(node, s.label("gpu"), uuid, pci, value)
            key = (node, g.gpu, uuid, s.label("GPU_I_ID"), s.label(value_label))
            seen = out.get(key)
            if seen is not None and seen.value != g.value:
                why = f"two series of GPU {g.gpu} ({uuid}) disagree"
                self.refuse(node, query, "value", f"{seen.value} and {g.value}", why)
                continue
            out[key] = g
        return tuple(out.values())

    def holders(self, samples: Iterable[Sample]) -> tuple[GpuHolder, ...]:
        """The pods dcgm-exporter names on the Xid series. Bad names tell no pod, never a
        refusal: they decide only who is told (guard.plan.workload), not the node."""
        out = set()
        for x in samples:
            namespace, pod = x.label("namespace"), x.label("pod")
            uuid = x.label("UUID") or x.label("uuid")
            if not (is_dns_label(namespace) and is_dns_subdomain(pod) and uuid):
                continue
            node = self.node_of(x)
            if node:
                out.add(GpuHolder(node, uuid, namespace, pod))
        return tuple(sorted(out, key=lambda h: (h.node, h.uuid, h.namespace, h.pod)))

    def pods(
        self, query: str, samples: Iterable[Sample], selector: bool = False
    ) -> tuple[Sample, ...]:
        """kube-state-metrics pods: namespace, pod name, GPUs (an integer), the selector."""
        checks: list[_Check] = [
            ("namespace", is_dns_label, "a namespace name"),
            ("pod", is_dns_subdomain, "a pod name (DNS-1123 subdomain)"),
        ]
        if selector:
            checks.append(
                (queries.SELECTOR_LABEL, lambda v: v in ("kube-proxy", "cni"), "kube-proxy or cni")
            )
        out = []
        for x in samples:
            if not self._check(query, x, checks):
                continue
            if not selector and not (x.value.is_integer() and 0 < x.value <= 10**6):
                self.refuse(self.node_of(x), query, "value", f"{x.value:g}", "not a number of GPUs")
                continue
            out.append(x)
        return tuple(out)

    def agent(self, query: str, samples: Iterable[Sample]) -> tuple[Sample, ...]:
        """The agent's status (a known word) and detail (one printable line: it reaches logs)."""
        checks: tuple[_Check, ...] = (
            ("status", lambda v: v in _AGENT_STATUS, "one of " + ", ".join(_AGENT_STATUS)),
            (
                "detail",
                lambda v: len(v) <= _DETAIL_MAX and v.isprintable(),
                f"one printable line of at most {_DETAIL_MAX} characters",
            ),
        )
        return tuple(x for x in samples if self._check(query, x, checks))

    def selectors(self, query: str, samples: Iterable[Sample]) -> tuple[Sample, ...]:
        """Per selector, a count: a wrong one names no node, so it aborts."""
        for x in samples:
            name = x.label(queries.SELECTOR_LABEL)
            if name not in ("kube-proxy", "cni") or not x.value.is_integer():
                raise PromError(f"query {query}: series {name!r} = {x.value:g} is not a count")
        return tuple(samples)
