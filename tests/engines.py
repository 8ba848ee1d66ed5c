"""The query engines the guard is tested on, where their binaries are, and how each one serves
a scenario (test scaffolding; the built-in example runs only Prometheus 2,
guard.example.promserver, which this module builds on).

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
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import requests

from guard.example.promserver import (
    OPENMETRICS,
    LocalPrometheus,
    PrometheusUnavailable,
    Started,
    debian_prometheus,
    free_port,
    import_openmetrics,
    openmetrics_file,
    prometheus_args,
    prometheus_config,
    wait_data,
    wait_ready,
)
from tests.scenario_build import Scenario, write_openmetrics

__all__ = ["ENGINES", "Engine", "LocalPrometheus", "PrometheusUnavailable", "binaries", "serve"]

Engine = Literal["prometheus2", "prometheus3", "victoriametrics", "thanos"]
ENGINES: tuple[Engine, ...] = ("prometheus2", "prometheus3", "victoriametrics", "thanos")
PROM3_VERSION = "v0.316.0"  # Go module version of Prometheus 3.16.0
THANOS_VERSION = "v0.42.4"
BUILD = "hack/engines/build.sh"


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


# ---- serving a scenario on any engine ---------------------------------------------------


def build_tsdb(scenario: Scenario, data_dir: Path, engine: Engine = "prometheus2") -> int:
    """Write the scenario as OpenMetrics and load it for `engine`; returns the sample count."""
    with openmetrics_file(data_dir).open("w", encoding="utf-8") as out:
        samples = write_openmetrics(scenario, out)
    load_openmetrics(data_dir, engine)
    return samples


def load_openmetrics(data_dir: Path, engine: Engine) -> None:
    """Prometheus-based engines get TSDB blocks now; VictoriaMetrics imports the file in `serve`."""
    if engine != "victoriametrics":
        import_openmetrics(openmetrics_file(data_dir), data_dir)


@contextmanager
def serve(
    data_dir: Path,
    engine: Engine = "prometheus2",
    *,
    ready_at: datetime | None = None,
    web_config: Path | None = None,
    probe: requests.Session | None = None,
    timeout_s: float = 120.0,
    ready_query: str = "count(kube_node_spec_unschedulable)",
) -> Iterator[LocalPrometheus]:
    """Start `engine` on a free loopback port over `data_dir`; stop it on exit.

    `ready_at`: also wait until `ready_query` at that instant sees data (Thanos must have found
    its store, VictoriaMetrics must have flushed the import). `web_config` (Prometheus only):
    its ``--web.config.file`` (TLS, basic auth); `probe` is the session that can pass it.
    """
    bins = binaries(engine)
    session = probe or requests.Session()
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        started = Started(data_dir, stack, [])
        if engine == "victoriametrics":
            url = _start_victoriametrics(started, bins, session, deadline)
        elif engine == "thanos":
            url = _start_thanos(started, bins, session, deadline)
        else:
            url = _start_prometheus(started, bins.server, data_dir, web_config, session, deadline)
        if ready_at is not None:
            wait_data(url, ready_query, ready_at, session, deadline)
        yield LocalPrometheus(url, data_dir, engine)


@contextmanager
def scenario_server(
    scenario: Scenario, engine: Engine = "prometheus2"
) -> Iterator[LocalPrometheus]:
    """Load `scenario` into `engine` in a temporary directory and serve it."""
    binaries(engine)  # missing binaries are reported before any work
    end = scenario.start + timedelta(seconds=scenario.duration_s)
    with tempfile.TemporaryDirectory(prefix=f"gng-{engine}-") as tmp:
        data_dir = Path(tmp)
        build_tsdb(scenario, data_dir, engine)
        with serve(data_dir, engine, ready_at=end) as server:
            yield server


def _start_prometheus(
    started: Started,
    server: str,
    data_dir: Path,
    web_config: Path | None,
    session: requests.Session,
    deadline: float,
) -> str:
    """Start the Prometheus `server` on a free loopback port over `data_dir` and wait until it
    is ready; its URL (https when `web_config` sets up TLS)."""
    port = free_port()
    argv = prometheus_args(server, prometheus_config(data_dir), data_dir, port)
    if web_config is not None:
        argv.append(f"--web.config.file={web_config}")
    started.start("prometheus", argv)
    tls = web_config is not None and "tls_server_config" in web_config.read_text()
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    wait_ready(url, started, session, deadline)
    return url


def _start_thanos(
    started: Started, bins: Binaries, session: requests.Session, deadline: float
) -> str:
    """Prometheus with an external label, a sidecar reading it, Thanos Query over the sidecar.

    The replica label is dropped by Query (``--query.replica-label``), as in an HA pair.
    """
    data_dir = started.data_dir
    prom_port, grpc, sidecar_http, query_http, query_grpc = (free_port() for _ in range(5))
    config = prometheus_config(data_dir)
    with config.open("a", encoding="utf-8") as extra:
        extra.write("  external_labels:\n    replica: a\n")
    started.start("prometheus", prometheus_args(bins.server, config, data_dir, prom_port))
    wait_ready(f"http://127.0.0.1:{prom_port}", started, session, deadline)
    started.start(
        "sidecar",
        [
            bins.thanos,
            "sidecar",
            f"--tsdb.path={data_dir / 'tsdb'}",
            f"--prometheus.url=http://127.0.0.1:{prom_port}",
            f"--grpc-address=127.0.0.1:{grpc}",
            f"--http-address=127.0.0.1:{sidecar_http}",
        ],
    )
    started.start(
        "query",
        [
            bins.thanos,
            "query",
            f"--http-address=127.0.0.1:{query_http}",
            f"--grpc-address=127.0.0.1:{query_grpc}",
            f"--endpoint=127.0.0.1:{grpc}",
            "--query.replica-label=replica",
            "--query.lookback-delta=5m",
        ],
    )
    url = f"http://127.0.0.1:{query_http}"
    wait_ready(url, started, session, deadline)
    return url


def _start_victoriametrics(
    started: Started, bins: Binaries, session: requests.Session, deadline: float
) -> str:
    """Single-node VictoriaMetrics; the scenario's OpenMetrics file is imported, then flushed.

    Defaults otherwise, as users run it; the response cache is off because the data are
    backfilled (VictoriaMetrics' advice for backfilling).
    """
    data_dir, port = started.data_dir, free_port()
    started.start(
        "victoria-metrics",
        [
            bins.server,
            f"-storageDataPath={data_dir / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
            "-search.disableCache",
            "-search.latencyOffset=0s",
            "-loggerLevel=WARN",
        ],
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, started, session, deadline, path="/health")
    source = data_dir / OPENMETRICS
    if source.exists():
        with source.open("rb") as lines:
            answer = session.post(
                f"{url}/api/v1/import/prometheus",
                data=_millis(lines),
                timeout=max(1.0, deadline - time.monotonic()),
            )
        if answer.status_code >= 300:
            raise PrometheusUnavailable(f"victoria-metrics import: HTTP {answer.status_code}")
        source.unlink()
        session.get(f"{url}/internal/force_flush", timeout=30)
    return url


def _millis(lines: Iterator[bytes]) -> Iterator[bytes]:
    """OpenMetrics samples (seconds) as Prometheus text with millisecond timestamps."""
    batch: list[bytes] = []
    for line in lines:
        if line.startswith(b"#"):
            continue
        head, _, stamp = line.rstrip(b"\n").rpartition(b" ")
        batch.append(head + b" " + str(round(float(stamp) * 1000)).encode() + b"\n")
        if len(batch) >= 10000:
            yield b"".join(batch)
            batch = []
    if batch:
        yield b"".join(batch)
