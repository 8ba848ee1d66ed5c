"""Run a real query engine on 127.0.0.1 over a scenario: Prometheus 2 or 3, VictoriaMetrics, or
Thanos Query in front of a Thanos sidecar and Prometheus (`guard.example.engines`).

The Prometheus-based engines read TSDB blocks built by promtool; VictoriaMetrics gets the same
OpenMetrics samples through its import API. Every server stops when its context ends.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import requests

from guard.example.engines import (
    Binaries,
    Engine,
    PrometheusUnavailable,
    binaries,
    debian_prometheus,
)
from guard.example.scenario import Scenario, write_openmetrics
from guard.ports import free_port

__all__ = ["LocalPrometheus", "PrometheusUnavailable", "binaries", "scenario_server", "serve"]
OPENMETRICS = "scenario.om"


@dataclass(frozen=True, slots=True)
class LocalPrometheus:
    url: str
    data_dir: Path
    engine: Engine = "prometheus2"


def build_tsdb(scenario: Scenario, data_dir: Path, engine: Engine = "prometheus2") -> int:
    """Write the scenario as OpenMetrics and load it for `engine`; returns the sample count."""
    with openmetrics_file(data_dir).open("w", encoding="utf-8") as out:
        samples = write_openmetrics(scenario, out)
    load_openmetrics(data_dir, engine)
    return samples


def openmetrics_file(data_dir: Path) -> Path:
    """Where to write samples for `load_openmetrics`."""
    return data_dir / OPENMETRICS


def load_openmetrics(data_dir: Path, engine: Engine) -> None:
    """Prometheus-based engines get TSDB blocks now; VictoriaMetrics imports the file in `serve`."""
    if engine != "victoriametrics":
        import_openmetrics(openmetrics_file(data_dir), data_dir)


def import_openmetrics(source: Path, data_dir: Path, timeout_s: float = 1800) -> None:
    """`promtool tsdb create-blocks-from openmetrics` into `data_dir/tsdb`; deletes `source`."""
    _, promtool = debian_prometheus()
    blocks = data_dir / "tsdb"
    blocks.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks)],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    source.unlink()
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise PrometheusUnavailable(f"promtool create-blocks-from failed: {' '.join(tail)}")


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
        started = _Started(data_dir, stack, [])
        if engine == "victoriametrics":
            url = _start_victoriametrics(started, bins, session, deadline)
        elif engine == "thanos":
            url = _start_thanos(started, bins, session, deadline)
        else:
            port = free_port()
            argv = _prometheus_args(bins, _prometheus_config(data_dir, {}), data_dir, port)
            if web_config is not None:
                argv.append(f"--web.config.file={web_config}")
            started.start("prometheus", argv)
            tls = web_config is not None and "tls_server_config" in web_config.read_text()
            url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
            _wait_ready(url, started, session, deadline)
        if ready_at is not None:
            _wait_data(url, ready_query, ready_at, session, deadline)
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


def stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Terminate a server we started; kill it if it does not leave within `grace_s`."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# ---- engines --------------------------------------------------------------------------------


def _prometheus_config(data_dir: Path, external_labels: dict[str, str]) -> Path:
    config = data_dir / "prometheus.yml"
    text = "global:\n  scrape_interval: 15s\n"
    if external_labels:
        text += "  external_labels:\n" + "".join(
            f"    {k}: {v}\n" for k, v in sorted(external_labels.items())
        )
    config.write_text(text, encoding="utf-8")
    return config


def _prometheus_args(bins: Binaries, config: Path, data_dir: Path, port: int) -> list[str]:
    return [
        bins.server,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=100y",
        "--web.enable-admin-api",
        "--query.lookback-delta=5m",
    ]


def _start_thanos(
    started: _Started, bins: Binaries, session: requests.Session, deadline: float
) -> str:
    """Prometheus with an external label, a sidecar reading it, Thanos Query over the sidecar.

    The replica label is dropped by Query (``--query.replica-label``), as in an HA pair.
    """
    data_dir = started.data_dir
    prom_port, grpc, sidecar_http, query_http, query_grpc = (free_port() for _ in range(5))
    config = _prometheus_config(data_dir, {"replica": "a"})
    started.start("prometheus", _prometheus_args(bins, config, data_dir, prom_port))
    _wait_ready(f"http://127.0.0.1:{prom_port}", started, session, deadline)
    started.start("sidecar", [
        bins.thanos, "sidecar", f"--tsdb.path={data_dir / 'tsdb'}",
        f"--prometheus.url=http://127.0.0.1:{prom_port}",
        f"--grpc-address=127.0.0.1:{grpc}", f"--http-address=127.0.0.1:{sidecar_http}",
    ])  # fmt: skip
    started.start("query", [
        bins.thanos, "query", f"--http-address=127.0.0.1:{query_http}",
        f"--grpc-address=127.0.0.1:{query_grpc}", f"--endpoint=127.0.0.1:{grpc}",
        "--query.replica-label=replica", "--query.lookback-delta=5m",
    ])  # fmt: skip
    url = f"http://127.0.0.1:{query_http}"
    _wait_ready(url, started, session, deadline)
    return url


def _start_victoriametrics(
    started: _Started, bins: Binaries, session: requests.Session, deadline: float
) -> str:
    """Single-node VictoriaMetrics; the scenario's OpenMetrics file is imported, then flushed.

    Defaults otherwise, as users run it; the response cache is off because the data are
    backfilled (VictoriaMetrics' advice for backfilling).
    """
    data_dir, port = started.data_dir, free_port()
    started.start("victoria-metrics", [
        bins.server, f"-storageDataPath={data_dir / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y", "-search.disableCache", "-search.latencyOffset=0s",
        "-loggerLevel=WARN",
    ])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    _wait_ready(url, started, session, deadline, path="/health")
    source = data_dir / OPENMETRICS
    if source.exists():
        with source.open("rb") as lines:
            answer = session.post(f"{url}/api/v1/import/prometheus", data=_millis(lines),
                                  timeout=max(1.0, deadline - time.monotonic()))  # fmt: skip
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


# ---- processes -----------------------------------------------------------------------------


@dataclass
class _Started:
    """The processes of one engine, so a wait notices one that died at start."""

    data_dir: Path
    stack: ExitStack
    processes: list[tuple[str, subprocess.Popen[bytes]]]

    def start(self, name: str, argv: list[str]) -> None:
        log = self.stack.enter_context((self.data_dir / f"{name}.log").open("w"))
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.stack.callback(stop, process)
        self.processes.append((name, process))

    def check(self) -> None:
        for name, process in self.processes:
            if process.poll() is not None:
                tail = (self.data_dir / f"{name}.log").read_text(errors="replace").strip()
                last = tail.splitlines()[-1][:200] if tail else "no output"
                raise PrometheusUnavailable(
                    f"{name} exited with {process.returncode} at start: {last}"
                )


def _wait_ready(
    url: str, started: _Started, session: requests.Session, deadline: float,
    path: str = "/-/ready",
) -> None:  # fmt: skip
    while time.monotonic() < deadline:
        started.check()
        try:
            if session.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise PrometheusUnavailable(f"{url} not ready in time")


def _wait_data(
    url: str, query: str, at: datetime, session: requests.Session, deadline: float
) -> None:
    form = {"query": query, "time": f"{at.timestamp():.3f}"}
    while time.monotonic() < deadline:
        try:
            body = session.post(f"{url}/api/v1/query", data=form, timeout=5).json()
            if body.get("data", {}).get("result"):
                return
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.5)
    raise PrometheusUnavailable(f"{url} does not show the scenario's data in time")
