"""The agent's loop and its HTTP endpoint: the checks run every `interval_s` in the main thread,
the last page is served from a second one (one asyncio thread, HTTP/1.0, bounded in every way a
client can push it; `/healthz` fails once the last run is three intervals old: docs/agent.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from guard.agent.metrics import CHECKS, CONTENT_TYPE, AgentRun, render
from guard.log import Level, Log

READ_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 8192
MAX_CONNECTIONS = 256
STALE_AFTER_INTERVALS = 3
STOP_TIMEOUT_S = 2.0


class ListenError(Exception):
    """The /metrics address cannot be bound: one line for the command to print."""


@dataclass
class Page:
    """The last rendered /metrics page and when its run ended, shared between the loop and the
    server threads: `last` is replaced whole, so a reader never sees half of an update."""

    last: tuple[str, float] = ("", 0.0)


def answer(
    page: Page, interval_s: float, clock: Callable[[], float], method: str, target: str
) -> tuple[int, str, str]:
    """(status, content type, body) for one request line's method and target."""
    if method not in ("GET", "HEAD"):
        return 405, "text/plain", "only GET\n"
    text, finished = page.last
    path = target.split("?", 1)[0]
    if path == "/metrics":
        return (200, CONTENT_TYPE, text) if text else (503, "text/plain", "no check has run yet\n")
    if path == "/healthz":
        fresh = bool(text) and clock() - finished < STALE_AFTER_INTERVALS * interval_s
        return (200, "text/plain", "ok\n") if fresh else (503, "text/plain", "checks are stale\n")
    return 404, "text/plain", "not found: try /metrics\n"


def _response(code: int, ctype: str, body: str, head_only: bool = False) -> bytes:
    data = body.encode()
    head = (
        f"HTTP/1.0 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + (b"" if head_only else data)


class MetricsServer:
    """`start()` binds (ListenError) and serves in its own thread; `stop()` ends it."""

    def __init__(
        self,
        page: Page,
        interval_s: float,
        clock: Callable[[], float],
        max_connections: int = MAX_CONNECTIONS,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.page, self.interval_s, self.clock = page, interval_s, clock
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.evicted = self.peak_open = 0  # what the server did, for tests (not exported)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._open: OrderedDict[asyncio.StreamWriter, None] = OrderedDict()  # oldest first
        self._thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> None:
        serving = asyncio.start_server(
            self._serve, host, port, limit=MAX_REQUEST_BYTES, backlog=1024, reuse_address=True
        )
        try:
            self._server = self._loop.run_until_complete(serving)
        except OSError as exc:  # port taken, address not on this host, no permission
            self._loop.close()
            # asyncio's own text repeats the address; the errno's is the one line people know
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=self._loop.run_forever, name="metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the listener and every connection; returns within about STOP_TIMEOUT_S."""
        if self._thread is None:
            return
        done = asyncio.run_coroutine_threadsafe(self._close(), self._loop)
        with contextlib.suppress(Exception):
            done.result(timeout=STOP_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()
        self._thread = None

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()
        # Aborted transports end their readers (IncompleteReadError); what still runs then is
        # cancelled, and `_serve` ends quietly on that too.
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S / 4)
            for task in pending:
                task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open[writer] = None
        while len(self._open) > self.max_connections:  # the oldest is the idlest: it goes
            oldest = next(iter(self._open))
            self._open.pop(oldest)
            oldest.transport.abort()
            self.evicted += 1
        self.peak_open = max(self.peak_open, len(self._open))
        try:
            await self._one_request(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            # The client went away, or stopping: end normally, not cancelled (Python 3.11's
            # stream callback logs a traceback for each cancelled task).
            pass
        finally:
            self._open.pop(writer, None)
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_timeout_s)
        except TimeoutError:
            return  # an idle or dripping client gets no answer, only the closed socket
        except (asyncio.LimitOverrunError, ValueError):
            return await self._write(writer, _response(431, "text/plain", "request too large\n"))
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return await self._write(writer, _response(400, "text/plain", "bad request\n"))
        method, target, _ = parts
        code, ctype, body = answer(self.page, self.interval_s, self.clock, method, target)
        await self._write(writer, _response(code, ctype, body, head_only=method == "HEAD"))

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)


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
        page.last = (render(self.node, run, finished, self.interval_s), finished)
        for r in run.results:
            if self.last.get(r.name) != r.status.value:
                level: Level = "WARN" if r.status.value in ("FAIL", "UNKNOWN") else "INFO"
                event = {"check": r.name, "status": r.status.value, "observed": r.observed}
                self.log.event("agent-check", level, node=self.node, **event)
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
