"""The agent's loop and its HTTP endpoint: run the checks every `interval_s`, serve the last page.

`/metrics` answers the last rendered page (503 until the first run ends); `/healthz` answers 200
while the last run is younger than three intervals, so a stuck loop fails its liveness probe. The
checks run in the main thread, the server (guard.agent.endpoint, bounded against slow and idle
clients) in a second one; SIGTERM (or `stop`) ends both within a few seconds.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from guard.agent.checks import CHECKS, AgentRun
from guard.agent.endpoint import ListenError as ListenError
from guard.agent.endpoint import MetricsServer, Page
from guard.agent.metrics import render
from guard.log import Level, Log


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
                    "agent-check",
                    level,
                    node=self.node,
                    check=r.name,
                    status=r.status.value,
                    observed=r.observed,
                )
                self.last[r.name] = r.status.value
        return run

    def serve(self, host: str, port: int, stop: threading.Event | None = None) -> None:
        """Serve until SIGTERM/SIGINT (main thread) or `stop` is set."""
        stop = stop or threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        page = Page()
        server = MetricsServer(page, self.interval_s, self.clock)
        server.start(host, port)  # ListenError: one line for the command
        self.log.event(
            "start",
            node=self.node,
            listen=f"{host}:{server.port}",
            interval_s=self.interval_s,
            checks=",".join(CHECKS),
        )
        try:
            while not stop.is_set():
                self.run_once(page)
                stop.wait(self.interval_s)
        finally:  # within the DaemonSet's 10 s grace period, whatever the clients do
            server.stop()
            self.log.event("done", node=self.node)
