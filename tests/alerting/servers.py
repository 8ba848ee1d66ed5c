"""Real Prometheus, Alertmanager and Pushgateway on 127.0.0.1, and the small servers tests run.

The binaries come from Debian's packages `prometheus`, `prometheus-alertmanager` and
`prometheus-pushgateway` (upstream names accepted too). Every server gets a free loopback port
and a directory of its own; none keeps state outside it (Debian's defaults point at /var/lib).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests

from guard.example.promserver import free_port, stop

T = TypeVar("T")

BINARIES = {
    "prometheus": ("prometheus",),
    "alertmanager": ("prometheus-alertmanager", "alertmanager"),
    "amtool": ("amtool",),
    "pushgateway": ("prometheus-pushgateway", "pushgateway"),
}
PACKAGES = {
    "prometheus": "prometheus",
    "alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "pushgateway": "prometheus-pushgateway",
}


class ServerUnavailable(RuntimeError):
    """A server did not start or did not become ready; the message ends with its log tail."""


def find(tool: str) -> str | None:
    return next((p for name in BINARIES[tool] if (p := shutil.which(name))), None)


def wait_until(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll `probe` until it returns something other than None/False; fail the test at the
    deadline with `what` (called for its text then, so it can describe the state it saw)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"after {timeout_s:g}s: {what}", pytrace=False)
        time.sleep(0.25)


def _tail(log: Path, lines: int = 5) -> str:
    text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return " | ".join(text[-lines:])


@contextmanager
def _process(name: str, argv: list[str], url: str, workdir: Path) -> Iterator[str]:
    log_path = workdir / f"{name}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            deadline = time.monotonic() + 60
            while not _ready(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    state = f"exited {process.returncode}" if process.poll() is not None else "hung"
                    raise ServerUnavailable(f"{name} {state} at start: {_tail(log_path)}")
                time.sleep(0.2)
            yield url
        finally:
            stop(process)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=1).status_code == 200
    except requests.RequestException:
        return False


@contextmanager
def _server(name: str, config: dict[str, Any] | None, workdir: Path, *flags: str) -> Iterator[str]:
    """`name` on a free loopback port, with `config` (as <name>.yml in `workdir`) and `flags`."""
    binary = find(name)
    assert binary, "checked by the fixture"
    port = free_port()
    argv = [binary, *flags, f"--web.listen-address=127.0.0.1:{port}"]
    if config is not None:
        (workdir / f"{name}.yml").write_text(json.dumps(config), encoding="utf-8")
        argv.append(f"--config.file={workdir / f'{name}.yml'}")
    with _process(name, argv, f"http://127.0.0.1:{port}", workdir) as url:
        yield url


def prometheus(config: dict[str, Any], workdir: Path) -> AbstractContextManager[str]:
    """Prometheus with `config` (prometheus.yml as a dict) over an empty TSDB in `workdir`."""
    return _server("prometheus", config, workdir, f"--storage.tsdb.path={workdir / 'tsdb'}")


def alertmanager(config: dict[str, Any], workdir: Path) -> AbstractContextManager[str]:
    """Alertmanager with `config`, clustering off (it would listen on 0.0.0.0:9094)."""
    return _server(
        "alertmanager",
        config,
        workdir,
        f"--storage.path={workdir / 'alertmanager'}",
        "--cluster.listen-address=",
    )


def pushgateway(workdir: Path) -> AbstractContextManager[str]:
    """Pushgateway without persistence (Debian's default file is under /var/lib)."""
    return _server("pushgateway", None, workdir, "--persistence.file=")


def query(prom_url: str, promql: str) -> list[dict[str, Any]]:
    """Instant query; the result vector (a failed query fails the test with Prometheus' error)."""
    answer = requests.get(f"{prom_url}/api/v1/query", params={"query": promql}, timeout=5)
    body = answer.json()
    assert body["status"] == "success", f"{promql}: {body.get('error')}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def firing_and_pending(prom_url: str) -> list[dict[str, Any]]:
    """Prometheus' active alerts (pending and firing) with their labels and state."""
    body = requests.get(f"{prom_url}/api/v1/alerts", timeout=5).json()
    alerts: list[dict[str, Any]] = body["data"]["alerts"]
    return alerts


# ── In-test servers ─────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival


class _Server(ThreadingHTTPServer):
    daemon_threads = True


@contextmanager
def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


class Webhook:
    """Alertmanager's webhook receiver: every POST body with its path, in arrival order."""

    def __init__(self) -> None:
        self._received: list[Received] = []
        self._lock = threading.Lock()
        self.url = ""

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    @contextmanager
    def serve(self) -> Iterator[Webhook]:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with webhook._lock:
                    webhook._received.append(Received(self.path, body, time.monotonic()))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        with _serve(Handler) as port:
            self.url = f"http://127.0.0.1:{port}"
            yield self


class Exposition:
    """A /metrics endpoint (Prometheus text format 0.0.4) whose text a test replaces at will."""

    def __init__(self, text: str) -> None:
        self._text = text.encode()
        self._lock = threading.Lock()
        self.target = ""

    def set(self, text: str) -> None:
        with self._lock:
            self._text = text.encode()

    @contextmanager
    def serve(self) -> Iterator[Exposition]:
        exposition = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exposition._lock:
                    body = exposition._text
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        with _serve(Handler) as port:
            self.target = f"127.0.0.1:{port}"
            yield self
