"""Turn families into Prometheus TSDB blocks with promtool, for `tests.engines.serve`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.openmetrics import Family, write_families
from guard.example.promserver import openmetrics_file
from tests.engines import Engine, load_openmetrics


@dataclass(frozen=True, slots=True)
class BuiltTsdb:
    samples: int
    series: int
    openmetrics_bytes: int
    write_s: float
    promtool_s: float


def build_blocks(
    families: Iterable[Family],
    offsets: list[int],
    texts: list[str],
    data_dir: Path,
    engine: Engine = "prometheus2",
) -> BuiltTsdb:
    """Write OpenMetrics to `data_dir` and load it for `engine` (TSDB blocks, or the file that
    VictoriaMetrics imports when `serve` starts it)."""
    source = openmetrics_file(data_dir)
    started = time.monotonic()
    family_list = list(families)
    with source.open("w", encoding="utf-8") as out:
        samples = write_families(family_list, offsets, texts, out)
    size = source.stat().st_size
    written = time.monotonic()
    load_openmetrics(data_dir, engine)
    series = sum(len(f.series) for f in family_list)
    return BuiltTsdb(samples, series, size, written - started, time.monotonic() - written)
