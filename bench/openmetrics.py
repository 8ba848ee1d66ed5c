"""A fast OpenMetrics writer for ``promtool tsdb create-blocks-from openmetrics``.

`tests.scenario_build.write_openmetrics` formats every sample on its own (~165k lines/s), which
takes minutes at 5,000 nodes. Here a series is a step function, so each constant run of samples
is written with one string join. `scenario_families` turns a guard `Scenario` into families, and
`check_matches_guard_writer` proves the output is byte-for-byte the guard's own.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from tests.scenario_build import (
    POD_PHASES,
    Scenario,
    Steps,
    gpu_labels,
    value_at,
    write_openmetrics,
)


@dataclass(frozen=True, slots=True)
class SeriesSpec:
    labels: str  # preformatted: a="b",c="d"
    steps: Steps  # (offset_s, value from then on), ascending
    default: int


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str  # empty: no HELP line
    series: Sequence[SeriesSpec]
    recent_s: int = 0  # write only the last `recent_s` seconds (0: all); for instant-only inputs


def stamps(start_s: float, duration_s: int, scrape_s: int) -> tuple[list[int], list[str]]:
    offsets = list(range(0, duration_s + 1, scrape_s))
    return offsets, [f"{start_s + o:.3f}" for o in offsets]


def write_families(
    families: Iterable[Family], offsets: list[int], texts: list[str], out: TextIO
) -> int:
    """Write every family, series by series in time order; returns the number of samples."""
    written = 0
    for family in families:
        first = bisect.bisect_left(offsets, offsets[-1] - family.recent_s) if family.recent_s else 0
        fam_offsets, fam_texts = offsets[first:], texts[first:]
        if family.help:
            out.write(f"# HELP {family.name} {family.help}\n")
        out.write(f"# TYPE {family.name} gauge\n")
        for series in family.series:
            prefix = f"{family.name}{{{series.labels}}} "
            for begin, end, value in _runs(series, fam_offsets):
                head = f"{prefix}{value} "
                out.write(head + ("\n" + head).join(fam_texts[begin:end]) + "\n")
                written += end - begin
    out.write("# EOF\n")
    return written


def _runs(series: SeriesSpec, offsets: list[int]) -> Iterable[tuple[int, int, int]]:
    """(first index, end index, value) of each constant run of the step function."""
    bounds = [0]
    values = [value_at(series.steps, offsets[0], series.default)] if offsets else []
    for start, _ in series.steps:
        index = bisect.bisect_left(offsets, start)
        if 0 < index < len(offsets) and index != bounds[-1]:
            bounds.append(index)
            values.append(value_at(series.steps, offsets[index], series.default))
    bounds.append(len(offsets))
    return ((bounds[i], bounds[i + 1], values[i]) for i in range(len(values)))


def scenario_families(sc: Scenario) -> list[Family]:
    """The same families, labels and order as `tests.scenario_build.write_openmetrics`."""
    xids = []
    for node in (n for n in sc.nodes if n.xid_gauge):
        for gpu in range(node.gpus):
            labels = gpu_labels(sc, node, gpu)
            steps = tuple((t, v) for t, g, v in node.xids if g == gpu)
            xids.append(SeriesSpec(labels, steps, 0))
    gpu_extra = ',resource="nvidia_com_gpu",unit="integer"'
    if (
        any(
            n.gpu_temp or n.xid_counts or n.first_s or n.scrape_offset_s or n.agent
            for n in sc.nodes
        )
        or sc.job_labels
        or any(p.ready for p in sc.pods)
    ):
        raise ValueError("the bench writer covers the guard writer's defaults only")
    # kube_pod_info of every pod: its owner, for the guard's own Jobs' Pods (no node shift).
    pod_info = [
        SeriesSpec(
            f'{p.labels()},node="{p.node}",created_by_kind="{p.created_by[0]}",'
            f'created_by_name="{p.created_by[1]}"',
            (),
            1,
        )
        for p in sc.pods
    ]
    phases = [
        SeriesSpec(
            f'namespace="{p.namespace}",pod="{p.name}",uid="{p.uid}",phase="{phase}"',
            p.phase_steps(phase),
            0,
        )
        for p in sc.pods
        for phase in POD_PHASES
    ]
    requests = [
        SeriesSpec(
            f'namespace="{p.namespace}",pod="{p.name}",uid="{p.uid}",container="main",'
            f'node="{p.node}"{gpu_extra}',
            (),
            p.gpus,
        )
        for p in sc.pods
        if p.gpus
    ]
    return [
        Family(
            "DCGM_FI_DEV_XID_ERRORS",
            "Value of the last XID error encountered.",
            xids,
        ),
        Family(
            "kube_node_status_capacity",
            "",
            [SeriesSpec(f'node="{n.name}"{gpu_extra}', (), n.gpus) for n in sc.nodes],
        ),
        Family(
            "kube_node_status_allocatable",
            "",
            [SeriesSpec(f'node="{n.name}"{gpu_extra}', n.allocatable, n.gpus) for n in sc.nodes],
        ),
        Family(
            "kube_node_spec_unschedulable",
            "",
            [SeriesSpec(f'node="{n.name}"', n.unschedulable, 0) for n in sc.nodes],
        ),
        Family("kube_pod_info", "", pod_info),
        Family("kube_pod_status_phase", "", phases),
        *([Family("kube_pod_container_resource_requests", "", requests)] if requests else []),
    ]


def write_scenario(sc: Scenario, out: TextIO) -> int:
    offsets, texts = stamps(sc.start.timestamp(), sc.duration_s, sc.scrape_s)
    return write_families(scenario_families(sc), offsets, texts, out)


def check_matches_guard_writer(sc: Scenario) -> None:
    """Refuse to benchmark if this writer's output drifted from the guard's writer."""
    mine, theirs = io.StringIO(), io.StringIO()
    write_scenario(sc, mine)
    write_openmetrics(sc, theirs)
    if mine.getvalue() != theirs.getvalue():
        raise RuntimeError("bench OpenMetrics writer differs from tests.scenario_build's")
