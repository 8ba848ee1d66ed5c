"""Prometheus answers → `PromView`: GPU series joined to Nodes, and the hold window decided.

`read_prom` sends every query of `guard.queries.guard_queries` at one instant and converts the
answers at this boundary into typed fields; what the planners read is plain data.

The hold window (case list; `W` is the fast hold for fast-path Xids, else the full hold):
  a GPU with a hardware Xid now (the gauge, or the windowed counter where it exists)
  on a node kube-state-metrics does not report unschedulable
  whose GPU loss has been observed at every step since `loss_since`, up to now,
  with now − loss_since ≥ W                                             → candidate
Each step's value is the latest scrape at or before the step, so the loss was scraped no later
than `loss_since`: the hold that really passed is never shorter than W, at any instant, on any
engine (left-open or closed ranges, aligned or not). A step without loss or without data
(series younger than the window, a scrape gap) breaks the run, so a loss must have been seen
over the whole window.

Which label names the Node: a series' `node` when it names a Node, else the first of
`Settings.dcgm_node_label_names` (default ``Hostname``, then ``hostname``) that does; with no
Node names at hand, the first non-empty one. `check_join` turns a join that names no Node into
an abort, and GPU nodes without any dcgm-exporter series into one WARN line.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace
from datetime import UTC, datetime

from guard import queries
from guard.log import Value
from guard.model import (
    AgentCheck,
    GpuPod,
    GpuSample,
    HostLabels,
    NodeInfo,
    PromView,
    ServicePod,
)
from guard.pci import PciAddressError, normalize_pci
from guard.prom import PromClient, PromError, Sample, Series
from guard.settings import Settings

_TOLERANCE_S = 0.001
COVERAGE_NAMES = 5


class JoinError(PromError):
    """dcgm-exporter series exist but none of them names a Node."""


def read_prom(
    client: PromClient, s: Settings, now: datetime, node_names: Collection[str] = ()
) -> PromView:
    """Run every query at `now`; missing inputs or a bad answer raise `PromError`."""
    vectors: dict[str, tuple[Sample, ...]] = {}
    matrices: dict[str, tuple[Series, ...]] = {}
    for q in queries.guard_queries(s):
        at = on_step(now, s.query_step_s) if q.on_step else now
        if q.kind == "matrix":
            matrices[q.name] = client.matrix(q.name, q.promql, at, q.required)
        else:
            vectors[q.name] = client.vector(q.name, q.promql, at, q.required)
    for metric, _ in queries.REQUIRED_INPUTS:
        found = vectors[queries.required_input_name(metric)]
        if not found or found[0].value < 1:
            raise PromError(f"input metric {metric} has no series: check the exporter and scrape")
    join = _Join(s.dcgm_node_label_names, frozenset(node_names))
    hardware = (
        *_gpu_samples(vectors["hardware-xid"], join),
        *_gpu_samples(vectors["hardware-xid-counted"], join, value_label="xid"),
    )
    lookback = queries.loss_lookback_s(s)
    since = loss_since(matrices["loss-history"], now, s.query_step_s, lookback)
    view = PromView(
        hardware_xids=_unique(hardware),
        row_remap=_unique(_gpu_samples(vectors["row-remap"], join)),
        loss_held_s=tuple((node, held_s(at, now)) for node, at in since),
        loss_since=since,
        cordoned=tuple(sorted({x.label(queries.NODE_LABEL) for x in vectors["cordoned"]})),
        gpu_pods=_gpu_pods(vectors["gpu-pods"]),
        xid_hosts=_hosts(vectors["xid-hosts"], join),
        exporter_hosts=_hosts(vectors["exporter-hosts"], join),
    )
    view = _with_signals(view, vectors, matrices, now, s)
    return replace(
        view, candidates=held_candidates(view, now, s), nvml_candidates=held_nvml(view, now, s)
    )


def _with_signals(
    view: PromView,
    vectors: dict[str, tuple[Sample, ...]],
    matrices: dict[str, tuple[Series, ...]],
    now: datetime,
    s: Settings,
) -> PromView:
    """The node agent's nvidia-match and the service network's pods."""
    lookback = queries.nvml_lookback_s(s)
    since = loss_since(matrices["nvml-mismatch-history"], now, s.query_step_s, lookback)
    node, selector = queries.NODE_LABEL, queries.SELECTOR_LABEL
    status = {AgentCheck(x.label(node), x.label("status"), x.label("detail"))
              for x in vectors["nvml-status"]}  # fmt: skip
    pods = (ServicePod(x.label(selector), x.label("namespace"), x.label("pod"), x.label(node),
                       x.value >= 1) for x in vectors["service-network-pods"])  # fmt: skip
    seen = ((x.label(selector), int(x.value)) for x in vectors["service-network-seen"])
    return replace(
        view,
        nvml_since=since,
        nvml_held_s=tuple((n, held_s(at, now)) for n, at in since),
        nvml_status=tuple(sorted(status, key=lambda a: (a.node, a.status, a.detail))),
        service_pods=tuple(sorted(pods, key=lambda p: (p.node, p.selector, p.namespace, p.name))),
        service_seen=tuple(sorted(seen)),
    )


def held_nvml(view: PromView, now: datetime, s: Settings) -> tuple[str, ...]:
    """Nodes whose nvidia-match failure held for `Settings.nvml_hold_s`, not cordoned."""
    cordoned = set(view.cordoned)
    return tuple(
        node
        for node, start in view.nvml_since
        if node not in cordoned and (now - start).total_seconds() >= s.nvml_hold_s
    )


def held_candidates(view: PromView, now: datetime, s: Settings) -> tuple[GpuSample, ...]:
    """Hardware-Xid GPUs whose node's loss held for the Xid's window (the case list above)."""
    since, cordoned = dict(view.loss_since), set(view.cordoned)
    out = []
    for g in view.hardware_xids:
        start = since.get(g.node)
        if start is None or g.node in cordoned:
            continue
        if (now - start).total_seconds() >= hold_window_s(g.value, s):
            out.append(g)
    return tuple(out)


def hold_window_s(xid: int, s: Settings) -> int:
    """How long GPU loss must hold before a cordon for this Xid: the fast hold on the fast path."""
    return s.fast_hold_window_s if xid in s.fast_path_xids else s.hold_window_s


def loss_since(
    history: Iterable[Series], now: datetime, step_s: int, lookback_s: int
) -> tuple[tuple[str, datetime], ...]:
    """Per node, the first step of the run of loss steps that reaches up to `now`.

    A run starting at the very beginning of the history may have started earlier: it is
    reported as `lookback_s - step_s` ago, the most that every engine can show (Prometheus 3
    leaves the first step of a range out), so engines agree on the order of old losses too.

    >>> now = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)
    >>> def at(minute): return now.timestamp() - 60 * minute, 1.0
    >>> s = Series((("node", "a"),), (at(12), at(3), at(2), at(1), at(0)))
    >>> loss_since([s], now, 60, 1800)[0][1].strftime("%H:%M")
    '05:52'
    >>> loss_since([Series((("node", "b"),), (at(5),))], now, 60, 1800)
    ()
    """
    last = on_step(now, step_s).timestamp()  # the history was evaluated there
    earliest = last - (lookback_s - step_s)
    out = []
    for series in history:
        stamps = sorted(t for t, value in series.points if value > 0)
        if not stamps or last - stamps[-1] > _TOLERANCE_S:
            continue  # no loss at the last step before now
        first = len(stamps) - 1
        while first > 0 and stamps[first] - stamps[first - 1] <= step_s + _TOLERANCE_S:
            first -= 1
        start = max(stamps[first], earliest)
        out.append((series.label(queries.NODE_LABEL), datetime.fromtimestamp(start, UTC)))
    return tuple(sorted(out))


def on_step(now: datetime, step_s: int) -> datetime:
    """The last multiple of `step_s` (since the epoch) at or before `now`.

    >>> on_step(datetime(2026, 9, 21, 5, 55, 46, tzinfo=UTC), 60).strftime("%H:%M:%S")
    '05:55:00'
    """
    return datetime.fromtimestamp(now.timestamp() // step_s * step_s, UTC)


def held_s(since: datetime, now: datetime) -> int:
    """Whole seconds the loss has held, rounded down (never more than really passed)."""
    return max(0, int((now - since).total_seconds()))


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


# ---- conversion ---------------------------------------------------------------------------


class _Join:
    """Chooses the label value that names the Node of one dcgm-exporter series."""

    def __init__(self, labels: tuple[str, ...], names: frozenset[str]) -> None:
        self.labels = tuple(dict.fromkeys((queries.NODE_LABEL, *labels)))
        self.names = names

    def hosts(self, sample: Sample) -> HostLabels:
        return tuple((k, v) for k in self.labels if (v := sample.label(k)))

    def node(self, sample: Sample) -> str:
        return _first(self.hosts(sample), self.names)


def _first(hosts: HostLabels, names: Collection[str]) -> str:
    """The first value naming a known Node, else the first value (or "" when none)."""
    values = [v for _, v in hosts]
    return next((v for v in values if v in names), values[0] if values else "")


def _gpu_samples(
    samples: Iterable[Sample], join: _Join, value_label: str = ""
) -> tuple[GpuSample, ...]:
    out = []
    for s in samples:
        pci = s.label("pci_bus_id")
        try:
            pci = normalize_pci(pci) if pci else "unknown"
        except PciAddressError as exc:
            raise PromError(f"dcgm-exporter label pci_bus_id: {exc}") from None
        value = s.value
        if value_label:
            text = s.label(value_label)
            if not text.isdigit():
                raise PromError(f"dcgm-exporter label {value_label}={text!r} is not an Xid")
            value = int(text)
        uuid = s.label("UUID") or s.label("uuid") or "unknown"
        out.append(GpuSample(join.node(s), s.label("gpu"), uuid, pci, int(value)))
    return tuple(out)


def _unique(samples: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """One sample per (node, GPU, value): MIG instances and the two Xid sources repeat them."""
    return tuple(sorted(set(samples), key=lambda g: (g.node, g.gpu.zfill(4), g.uuid, g.value)))


def _gpu_pods(samples: Iterable[Sample]) -> tuple[GpuPod, ...]:
    pods = (GpuPod(x.label("namespace"), x.label("pod"), x.label("node"), int(x.value))
            for x in samples)  # fmt: skip
    return tuple(sorted(pods, key=lambda p: (p.node, p.namespace, p.name)))


def _hosts(samples: Iterable[Sample], join: _Join) -> tuple[HostLabels, ...]:
    return tuple(sorted({h for h in (join.hosts(x) for x in samples) if h}))
