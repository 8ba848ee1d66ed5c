"""Peak RSS of one guard cycle when Prometheus answers with a huge number of series.

``python -m bench.answers [--series 200000]`` starts a loopback server that answers the
hardware-Xid query with that many dcgm-exporter series (labels as a real exporter sends them,
~330 bytes of JSON each) and every other query with a minimal valid answer. One
``gpu-node-guard run --dry-run --cluster-snapshot …`` per setting runs in its own process
(`bench.proc.measure`): the defaults (a clean abort is expected), and the caps raised so that
the whole answer is parsed. Prints a Markdown table: exit code, peak RSS, wall time, last line.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import click

from bench.proc import measure
from guard.example.incident import DECISION_TICK
from guard.settings import MAX_ANSWER_BYTES, MAX_SERIES

SNAPSHOT = Path(__file__).resolve().parents[1] / "guard" / "example" / "cluster-snapshot.yaml"


def big_answer(series: int, labels: str = "dcgm") -> bytes:
    """`series` hardware-Xid series with an exporter's labels, or with only a node label."""
    items = []
    for i in range(series):
        node, gpu = f"gpu-{i // 8:06d}", i % 8
        if labels == "node":
            items.append(
                {"metric": {"node": f"{node}-{gpu}"}, "value": [DECISION_TICK.timestamp(), "48"]}
            )
            continue
        metric = {
            "__name__": "DCGM_FI_DEV_XID_ERRORS",
            "gpu": str(gpu),
            "UUID": f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
            "pci_bus_id": f"00000000:{0x18 + gpu * 0x10:02X}:00.0",
            "device": f"nvidia{gpu}",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": node,
            "DCGM_FI_DRIVER_VERSION": "570.124.06",
            "instance": f"10.64.{i // 2048}.{i // 8 % 256}:9400",
            "job": "dcgm-exporter",
        }
        items.append({"metric": metric, "value": [DECISION_TICK.timestamp(), "48"]})
    body = {"status": "success", "data": {"resultType": "vector", "result": items}}
    return json.dumps(body, separators=(",", ":")).encode()


def small_answer(promql: str) -> bytes:
    if ")[" in promql:  # the loss-history subquery
        data: dict[str, object] = {"resultType": "matrix", "result": []}
    elif promql.startswith("count("):
        data = {
            "resultType": "vector",
            "result": [{"metric": {}, "value": [DECISION_TICK.timestamp(), "1"]}],
        }
    else:
        data = {"resultType": "vector", "result": []}
    return json.dumps({"status": "success", "data": data}).encode()


@contextmanager
def answering(big: bytes, stream: bool) -> Iterator[str]:
    """`stream`: gzip and no Content-Length, as Prometheus answers a client accepting gzip."""
    packed = gzip.compress(big, compresslevel=1) if stream else big

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            promql = form["query"][0]
            is_big = promql.startswith("DCGM_FI_DEV_XID_ERRORS > 0")
            body = packed if is_big else small_answer(promql)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if is_big and stream:
                self.send_header("Content-Encoding", "gzip")
            else:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# The highest caps the settings take (guard.settings.MAX_SERIES, MAX_ANSWER_BYTES).
WAIT = "timeout=120"
RAISED = ("--prometheus-limits", f"{WAIT},series={MAX_SERIES},answer-bytes={MAX_ANSWER_BYTES}")
# (answer, how it is sent, guard flags)
VARIANTS = (
    ("dcgm labels", "Content-Length", ()),
    ("dcgm labels", "gzip stream", ()),
    ("node label only", "Content-Length", ()),
    ("dcgm labels", "gzip stream", RAISED),
    ("dcgm labels", "gzip stream", (*RAISED, "--output", "json")),
)


@click.command()
@click.option("--series", default=200000, show_default=True)
def main(series: int) -> None:
    rows = []
    bodies = {
        kind: big_answer(series, "node" if kind == "node label only" else "dcgm")
        for kind in {v[0] for v in VARIANTS}
    }
    for kind, sent, flags in VARIANTS:
        with answering(bodies[kind], sent == "gzip stream") as url:
            argv = [
                sys.executable,
                "-m",
                "guard",
                "run",
                "--dry-run",
                "--prometheus-url",
                url,
                "--cluster-snapshot",
                str(SNAPSHOT),
                "--at",
                DECISION_TICK.isoformat(),
                *(() if "--prometheus-limits" in flags else ("--prometheus-limits", WAIT)),
                *flags,
            ]
            m = measure(argv, timeout_s=600)
        last = (m.stderr.strip().splitlines() or [""])[-1].split(" ", 2)[-1].replace("|", "/")
        size = f"{len(bodies[kind]) / 2**20:.1f} MiB"
        setting = " ".join(flags) or "defaults"
        rows.append(
            f"| {kind} ({size}) | {sent} | {setting} | {m.returncode} |"
            f" {m.peak_rss_mb:.0f} | {m.wall_s:.1f} | {last[:150]} |"
        )
    click.echo(f"{series:,} series in the hardware-Xid answer\n")
    click.echo("| answer | sent as | guard flags | exit | peak RSS MiB | wall s | last log line |")
    click.echo("|---|---|---|---|---|---|---|")
    click.echo("\n".join(rows))


if __name__ == "__main__":
    main()
