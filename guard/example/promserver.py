"""Run the Debian package's Prometheus (2.42) on 127.0.0.1 over a scenario's TSDB blocks (built
by promtool), for the built-in example; tests/engines.py builds the other engines on this."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import requests

from guard.example.scenario import Scenario, write_openmetrics

OPENMETRICS = "scenario.om"


class PrometheusUnavailable(RuntimeError):
    """A server's binaries are missing or it did not become ready; `how` says what to do."""

    def __init__(self, reason: str, how: str = "") -> None:
        super().__init__(reason)
        self.how = how


@dataclass(frozen=True, slots=True)
class LocalPrometheus:
    url: str
    data_dir: Path
    engine: str = "prometheus2"  # tests/engines.py `Engine`


def free_port() -> int:
    """A port nothing listens on right now (the kernel's choice; closed again on return).

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def debian_prometheus() -> tuple[str, str]:
    """The `prometheus` and `promtool` on PATH, or PrometheusUnavailable saying how to get them."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not tool:
        raise PrometheusUnavailable(
            "prometheus and promtool not found", "install the Debian package `prometheus`"
        )
    return prom, tool


def openmetrics_file(data_dir: Path) -> Path:
    """Where the scenario's samples are written before they are loaded."""
    return data_dir / OPENMETRICS


def import_openmetrics(source: Path, data_dir: Path, timeout_s: float = 1800) -> None:
    """`promtool tsdb create-blocks-from openmetrics` into `data_dir/tsdb`; deletes `source`."""
    _, promtool = debian_prometheus()
    blocks = data_dir / "tsdb"
    blocks.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    source.unlink()
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise PrometheusUnavailable(f"promtool create-blocks-from failed: {' '.join(tail)}")


@contextmanager
def scenario_server(scenario: Scenario, timeout_s: float = 120.0) -> Iterator[LocalPrometheus]:
    """Load `scenario` into Prometheus in a temporary directory and serve it on a free loopback
    port until its data shows; stop it on exit. tests/engines.py serves the other engines."""
    server, _ = debian_prometheus()  # missing binaries are reported before any work
    end = scenario.start + timedelta(seconds=scenario.duration_s)
    session = requests.Session()
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="gng-prometheus2-") as tmp, ExitStack() as stack:
        data_dir = Path(tmp)
        with openmetrics_file(data_dir).open("w", encoding="utf-8") as out:
            write_openmetrics(scenario, out)
        import_openmetrics(openmetrics_file(data_dir), data_dir)
        started = Started(data_dir, stack, [])
        port = free_port()
        started.start(
            "prometheus", prometheus_args(server, prometheus_config(data_dir), data_dir, port)
        )
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, started, session, deadline)
        wait_data(url, "count(kube_node_spec_unschedulable)", end, session, deadline)
        yield LocalPrometheus(url, data_dir)


def stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Terminate a server we started; kill it if it does not leave within `grace_s`."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def prometheus_config(data_dir: Path) -> Path:
    config = data_dir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n", encoding="utf-8")
    return config


def prometheus_args(server: str, config: Path, data_dir: Path, port: int) -> list[str]:
    return [
        server,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=100y",
        "--web.enable-admin-api",
        "--query.lookback-delta=5m",
    ]


@dataclass
class Started:
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


def wait_ready(
    url: str, started: Started, session: requests.Session, deadline: float, path: str = "/-/ready"
) -> None:
    while time.monotonic() < deadline:
        started.check()
        try:
            if session.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise PrometheusUnavailable(f"{url} not ready in time")


def wait_data(
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
