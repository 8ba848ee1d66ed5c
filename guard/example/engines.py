"""The query engines the guard is tested on, and where their binaries are.

  prometheus2      Debian package `prometheus` (2.42): server and promtool on PATH
  prometheus3      built from the Go module proxy by hack/engines/build.sh (cached)
  victoriametrics  Debian package `victoria-metrics` (single-node server on PATH)
  thanos           Thanos Query over a Thanos sidecar over Prometheus 2 (Thanos built by
                   hack/engines/build.sh, cached)

Every engine reads the same scenario: the Prometheus-based ones from TSDB blocks written by
promtool, VictoriaMetrics through its import API. The versions here are the defaults of
hack/engines/build.sh (a unit test keeps them equal).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Engine = Literal["prometheus2", "prometheus3", "victoriametrics", "thanos"]
ENGINES: tuple[Engine, ...] = ("prometheus2", "prometheus3", "victoriametrics", "thanos")
PROM3_VERSION = "v0.316.0"  # Go module version of Prometheus 3.16.0
THANOS_VERSION = "v0.42.4"
BUILD = "hack/engines/build.sh"


class PrometheusUnavailable(RuntimeError):
    """An engine's binaries are missing or it did not become ready; `how` says what to do."""

    def __init__(self, reason: str, how: str = "") -> None:
        super().__init__(reason)
        self.how = how


@dataclass(frozen=True, slots=True)
class Binaries:
    engine: Engine
    server: str  # prometheus, victoria-metrics, or the Prometheus behind the Thanos sidecar
    promtool: str  # builds the TSDB blocks (Debian's, for every Prometheus-based engine)
    thanos: str = ""
    rules_promtool: str = ""  # the promtool of this engine's own release, for rule tests


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-node-guard" / "engines"


def prom3_dir() -> Path:
    return cache_root() / "prometheus" / PROM3_VERSION


def thanos_dir() -> Path:
    return cache_root() / "thanos" / THANOS_VERSION


def debian_prometheus() -> tuple[str, str]:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not tool:
        raise PrometheusUnavailable(
            "prometheus and promtool not found", "install the Debian package `prometheus`"
        )
    return prom, tool


def binaries(engine: Engine = "prometheus2") -> Binaries:
    """The binaries of `engine`, or PrometheusUnavailable saying how to get them."""
    prom, tool = debian_prometheus()
    if engine == "prometheus2":
        return Binaries(engine, prom, tool, rules_promtool=tool)
    if engine == "prometheus3":
        server, own_tool = prom3_dir() / "prometheus", prom3_dir() / "promtool"
        _built(server, "Prometheus 3", "prometheus")
        _built(own_tool, "promtool 3", "prometheus")
        return Binaries(engine, str(server), tool, rules_promtool=str(own_tool))
    if engine == "victoriametrics":
        vm = shutil.which("victoria-metrics")
        if not vm:
            raise PrometheusUnavailable(
                "victoria-metrics not found", "install the Debian package `victoria-metrics`"
            )
        return Binaries(engine, vm, tool)
    thanos = thanos_dir() / "thanos"
    _built(thanos, "Thanos", "thanos")
    return Binaries(engine, prom, tool, thanos=str(thanos))


def _built(path: Path, what: str, target: str) -> None:
    if not os.access(path, os.X_OK):
        raise PrometheusUnavailable(
            f"{what} not built ({path} missing)",
            f"run `{BUILD} {target}` (needs Go; minutes, cached) or `make engines`",
        )
