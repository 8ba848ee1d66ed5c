"""The agent's loop and its HTTP endpoint: run the checks every `interval_s`, serve the last page.

`/metrics` answers the last rendered page (503 until the first run ends); `/healthz` answers 200
while the last run is younger than three intervals, so a stuck loop fails its liveness probe. The
checks run in the main thread, the server in a second one; SIGTERM (or `stop`) ends both.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from guard.agent.checks import CHECKS, AgentRun
from guard.agent.metrics import CONTENT_TYPE, render
from guard.log import Level, Log

STALE_AFTER_INTERVALS = 3


class ListenError(Exception):
    """The /metrics address cannot be bound: one line for the command to print."""


@dataclass
class Page:
    """The last rendered /metrics page, shared between the loop and the server threads."""

    text: str = ""
    finished_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, text: str, finished_s: float) -> None:
        with self.lock:
            self.text, self.finished_s = text, finished_s

    def get(self) -> tuple[str, float]:
        with self.lock:
            return self.text, self.finished_s


def handler(
    page: Page, interval_s: float, clock: Callable[[], float]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            text, finished = page.get()
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200 if text else 503, text or "no check has finished yet\n")
            elif path == "/healthz":
                fresh = bool(text) and clock() - finished < STALE_AFTER_INTERVALS * interval_s
                self._answer(200 if fresh else 503, "ok\n" if fresh else "checks are stale\n")
            else:
                self._answer(404, "not found: try /metrics\n")

        def _answer(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", CONTENT_TYPE if code == 200 else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape every minute is not news

    return Handler


@dataclass
class Agent:
    node: str
    interval_s: float
    check: Callable[[], AgentRun]
    log: Log
    clock: Callable[[], float] = time.time
    last: dict[str, str] = field(default_factory=dict)  # check → status last logged

    def run_once(self, page: Page) -> AgentRun:
        run = self.check()
        finished = self.clock()
        page.set(render(self.node, run, finished, self.interval_s), finished)
        for r in run.results:
            if self.last.get(r.name) != r.status.value:
                level: Level = "WARN" if r.status.value in ("FAIL", "UNKNOWN") else "INFO"
                self.log.event(
                    "agent-check", level, node=self.node, check=r.name, status=r.status.value,
                    observed=r.observed,
                )  # fmt: skip
                self.last[r.name] = r.status.value
        return run

    def serve(self, host: str, port: int, stop: threading.Event | None = None) -> None:
        """Serve until SIGTERM/SIGINT (main thread) or `stop` is set."""
        stop = stop or threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        page = Page()
        try:
            server = ThreadingHTTPServer((host, port), handler(page, self.interval_s, self.clock))
        except OSError as exc:  # port taken, address not on this host, no permission
            raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()
        self.log.event(
            "start", node=self.node, listen=f"{host}:{server.server_port}",
            interval_s=self.interval_s, checks=",".join(CHECKS),
        )  # fmt: skip
        try:
            while not stop.is_set():
                self.run_once(page)
                stop.wait(self.interval_s)
        finally:
            server.shutdown()
            server.server_close()
            self.log.event("done", node=self.node)
