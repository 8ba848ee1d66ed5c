"""Turn families into Prometheus TSDB blocks with promtool, for `guard.example.promserver.serve`."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.openmetrics import Family, write_families
from guard.example.promserver import PrometheusUnavailable, binaries


@dataclass(frozen=True, slots=True)
class BuiltTsdb:
    samples: int
    series: int
    openmetrics_bytes: int
    write_s: float
    promtool_s: float


def build_blocks(
    families: Iterable[Family], offsets: list[int], texts: list[str], data_dir: Path
) -> BuiltTsdb:
    """Write OpenMetrics to `data_dir`, import it into `data_dir/tsdb`, delete the text."""
    _, promtool = binaries()
    source = data_dir / "series.om"
    started = time.monotonic()
    family_list = list(families)
    with source.open("w", encoding="utf-8") as out:
        samples = write_families(family_list, offsets, texts, out)
    size = source.stat().st_size
    written = time.monotonic()
    blocks = data_dir / "tsdb"
    blocks.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    source.unlink()
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise PrometheusUnavailable(f"promtool create-blocks-from failed: {' '.join(tail)}")
    series = sum(len(f.series) for f in family_list)
    return BuiltTsdb(samples, series, size, written - started, time.monotonic() - written)
