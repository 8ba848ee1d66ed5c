"""The node agent's /metrics endpoint under hostile clients, with real sockets on 127.0.0.1
(docs/agent.md, "Hostile clients"); bench/agent_load.py is the full-size measurement."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from bench.agent_load import measure, scrape
from guard.agent.server import MetricsServer, Page


def test_slow_clients_leave_a_scrape_its_answer_and_sigterm_ends_it_at_once() -> None:
    got = measure(slow=300, rate=50, seconds=1.0)
    assert got["slow_clients"] == 300
    assert got["scrape_during_slow_clients"]["status"] == 200
    assert got["scrape_during_slow_clients"]["seconds"] < 2
    assert got["load"]["codes"] == {"200": got["load"]["requests"]}
    assert got["sigterm_exit_s"] is not None and got["sigterm_exit_s"] < 5
    assert got["exit_code"] == 0 and got["tracebacks"] == 0
    assert got["rss_kib_peak"] - got["rss_kib_before"] < 20 * 1024  # 96 Mi limit, 40 MB idle


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    page = Page(("up 1\n", time.time()))
    srv = MetricsServer(page, 60, time.time, max_connections=8, read_timeout_s=0.5)
    srv.start("127.0.0.1", 0)
    try:
        yield srv
    finally:
        srv.stop()


def _raw(port: int, data: bytes, wait_s: float = 3.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        pytest.param(b"GET /metrics HTTP/1.0\r\n\r\n", b"200", id="plain-scrape"),
        pytest.param(b"HEAD /metrics HTTP/1.0\r\n\r\n", b"200", id="head"),
        pytest.param(b"POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", b"405", id="post"),
        pytest.param(
            b"GET /metrics HTTP/1.0\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
            b"431",
            id="oversized-header",
        ),
        pytest.param(b"GARBAGE\r\n\r\n", b"400", id="not-a-request-line"),
        pytest.param(b"\x00\xff\xfe\r\n\r\n", b"400", id="binary"),
        pytest.param(b"GET /nothing HTTP/1.0\r\n\r\n", b"404", id="unknown-path"),
        pytest.param(b"GET /metr", b"", id="half-a-line-times-out"),
    ],
)
def test_each_request_is_answered_or_closed(
    server: MetricsServer, request_bytes: bytes, status: bytes
) -> None:
    answer = _raw(server.port, request_bytes)
    assert answer.split(b" ", 2)[1:2] == ([status] if status else [])


def test_more_idle_clients_than_the_cap_evict_the_oldest(server: MetricsServer) -> None:
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
    try:
        time.sleep(0.2)
        assert scrape(server.port, 3.0)[0] == 200
        assert server.evicted >= 12
        assert server.peak_open <= 9
    finally:
        for s in idle:
            s.close()


def test_a_client_that_resets_mid_answer_is_not_an_error(server: MetricsServer) -> None:
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        s.close()  # RST: the answer's write meets a reset
    assert scrape(server.port, 3.0)[0] == 200


def test_stop_returns_at_once_with_clients_open() -> None:
    srv = MetricsServer(Page(), 60, time.time)
    srv.start("127.0.0.1", 0)
    held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(100)]
    started = time.monotonic()
    srv.stop()
    assert time.monotonic() - started < 3
    for s in held:
        s.close()
