"""Run the real Prometheus (Debian package) on 127.0.0.1 over a TSDB built by promtool."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from guard.example.scenario import Scenario, write_openmetrics
from guard.ports import free_port


class PrometheusUnavailable(RuntimeError):
    """prometheus/promtool missing or the server did not become ready."""


@dataclass(frozen=True, slots=True)
class LocalPrometheus:
    url: str
    data_dir: Path


def binaries() -> tuple[str, str]:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not tool:
        raise PrometheusUnavailable(
            "prometheus and promtool not found: install the Debian package `prometheus`"
        )
    return prom, tool


def build_tsdb(scenario: Scenario, data_dir: Path) -> int:
    """Write the scenario as OpenMetrics and turn it into TSDB blocks; returns sample count."""
    source = data_dir / "scenario.om"
    with source.open("w", encoding="utf-8") as out:
        samples = write_openmetrics(scenario, out)
    import_openmetrics(source, data_dir)
    return samples


def import_openmetrics(source: Path, data_dir: Path, timeout_s: float = 1800) -> None:
    """`promtool tsdb create-blocks-from openmetrics` into `data_dir/tsdb`; deletes `source`."""
    _, promtool = binaries()
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
def serve(data_dir: Path, timeout_s: float = 60.0) -> Iterator[LocalPrometheus]:
    """Start Prometheus on a free loopback port over `data_dir/tsdb`; stop it on exit."""
    prom, _ = binaries()
    config = data_dir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n", encoding="utf-8")
    port = free_port()
    log = (data_dir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prom,
            f"--config.file={config}",
            f"--storage.tsdb.path={data_dir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=100y",
            "--web.enable-admin-api",
            "--query.lookback-delta=5m",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, timeout_s)
        yield LocalPrometheus(url, data_dir)
    finally:
        stop(process)
        log.close()


def stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Terminate a server we started; kill it if it does not leave within `grace_s`."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusUnavailable(f"prometheus exited with {process.returncode} at start")
        try:
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise PrometheusUnavailable(f"prometheus not ready within {timeout_s:g}s")


@contextmanager
def scenario_server(scenario: Scenario) -> Iterator[LocalPrometheus]:
    """Build a TSDB for `scenario` in a temporary directory and serve it."""
    with tempfile.TemporaryDirectory(prefix="gng-prom-") as tmp:
        data_dir = Path(tmp)
        build_tsdb(scenario, data_dir)
        with serve(data_dir) as server:
            yield server
