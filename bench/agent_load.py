"""Load on the node agent's /metrics endpoint (docs/agent.md, "Hostile clients").

Starts `gpu-node-guard agent` on 127.0.0.1 over a fake healthy host, then:

1. opens `--slow` clients that send half a request line and wait (idle, slowloris);
2. scrapes /metrics normally while they wait (status and seconds);
3. sends valid scrapes at `--rate` per second for `--seconds`;
4. sends SIGTERM with the slow clients still open and times the exit.

Prints one JSON object: the agent's RSS (KiB) before, after the slow clients and peak, the
scrape answers, and the exit. ``python -m bench.agent_load --slow 3000 --rate 1000``.
Only 127.0.0.1; every loop is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import sys
from pathlib import Path
from tests.fixtures.hosts.hosttree import build_host
root = build_host(Path(sys.argv[1]))
from guard.cli import main
sys.argv = ["gpu-node-guard", "agent", "--root", str(root), "--node", "bench-node",
            "--listen", "127.0.0.1:" + sys.argv[2], "--interval-s", "60",
            "--allowed-dns", "10.20.0.0/16", "--platform", "rke2"]
main()
"""


def _rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid` in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int, timeout_s: float = 5.0) -> tuple[int, float]:
    """(HTTP status or 0, seconds) of one GET /metrics."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
                if len(data) > 1 << 20:
                    break
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    except (OSError, ValueError, IndexError):
        status = 0
    return status, time.monotonic() - started


def start_agent(tmp: Path) -> tuple[subprocess.Popen[str], int]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp / "host"), str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if scrape(port, 1.0)[0] == 200:
            return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the agent did not start: {proc.communicate()[1][-2000:]}")


def raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_slow(port: int, count: int) -> list[socket.socket]:
    """`count` clients holding half a request line (fewer if the fd limit says so)."""
    held = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metr")
        except OSError:
            break
        held.append(s)
    return held


def rate_scrapes(port: int, rate: int, seconds: float, workers: int = 8) -> dict[str, Any]:
    """Valid scrapes paced at `rate` per second in total, for `seconds`."""
    codes: dict[str, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds
    per_worker = rate / workers

    def work() -> None:
        next_at = time.monotonic()
        while (now := time.monotonic()) < end:
            if now < next_at:
                time.sleep(next_at - now)
            next_at += 1 / per_worker
            code, took = scrape(port, 5.0)
            with lock:
                codes[str(code)] = codes.get(str(code), 0) + 1
                latencies.append(took)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    latencies.sort()
    done = len(latencies)
    return {
        "requests": done,
        "per_s": round(done / seconds, 1),
        "codes": codes,
        "p50_ms": round(latencies[done // 2] * 1000, 2) if done else None,
        "p99_ms": round(latencies[min(done - 1, int(done * 0.99))] * 1000, 2) if done else None,
    }


def measure(slow: int, rate: int, seconds: float) -> dict[str, Any]:
    limit = raise_fd_limit(slow + 256)
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_agent(Path(tmp))
        try:
            before = _rss_kib(proc.pid)
            held = open_slow(port, slow)
            time.sleep(0.5)
            during = scrape(port)
            with_slow = _rss_kib(proc.pid)
            load = rate_scrapes(port, rate, seconds) if rate else {}
            after_load = _rss_kib(proc.pid)
            held += open_slow(port, max(0, slow - len(held)))  # the evicted ones, again
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=30)
                exit_s: float | None = round(time.monotonic() - started, 3)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                exit_s = None
            for s in held:
                s.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return {
        "fd_limit": limit,
        "slow_clients": len(held),
        "rss_kib_before": before[0],
        "rss_kib_with_slow_clients": with_slow[0],
        "rss_kib_after_load": after_load[0],
        "rss_kib_peak": after_load[1],
        "scrape_during_slow_clients": {"status": during[0], "seconds": round(during[1], 3)},
        "load": load,
        "sigterm_exit_s": exit_s,
        "exit_code": proc.returncode,
        "tracebacks": err.count("Traceback"),
        "stderr_lines": len(err.splitlines()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    if args.slow < 0 or args.rate < 0 or args.seconds <= 0:
        parser.error("--slow and --rate must be at least 0, --seconds above 0")
    print(json.dumps(measure(args.slow, args.rate, args.seconds), indent=2))


if __name__ == "__main__":
    main()
