"""The floor of one cycle: the guard's own PromQL and one read of the cluster, with plain requests.

Run as ``python -m bench.floor`` in its own process (so its peak RSS is its own); prints one JSON
object. The requests are `guard.codec.queries.guard_queries` with the guard's settings — the list
`guard.read.prom_view.read_prom` sends, at the same instants; the cluster read is either the List
file decoded item by item (`guard.read.json_stream`, a count kept), or one paginated node list that
keeps only a count. The page
size comes from the parent (`guard.doors.kube.PAGE`): importing that module here would load the
Kubernetes client, which the floor does not need.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import requests

from guard.codec import queries
from guard.codec.series import on_step
from guard.files import SNAPSHOT_JSON_MAX_BYTES
from guard.read import json_stream
from guard.settings import Settings


def run_queries(url: str, at: datetime) -> dict[str, float]:
    """Seconds per query, in order; any answer other than success stops the run."""
    s, session, took = Settings(), requests.Session(), {}
    for q in queries.guard_queries(s):
        when = on_step(at, s.query_step_s) if q.on_step else at
        form = {"query": q.promql, "time": f"{when.timestamp():.3f}"}
        started = time.monotonic()
        response = session.post(f"{url.rstrip('/')}/api/v1/query", data=form, timeout=600)
        if response.json().get("status") != "success":
            raise click.ClickException(f"query {q.name}: {response.text[:200]}")
        took[q.name] = round(time.monotonic() - started, 3)
    return took


def read_file(path: Path) -> int:
    """A read and parse of the List file item by item (what any reader that does not hold the
    whole List must do: decode every object once); returns the number of items."""
    return sum(1 for _ in json_stream.list_items(path, SNAPSHOT_JSON_MAX_BYTES, "List file"))


def list_nodes(server: str, token: str, ca_file: str, page_size: int) -> tuple[int, int]:
    """One paginated node list; pages are parsed and dropped. Returns (requests, nodes)."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.verify = ca_file
    session.trust_env = False  # REQUESTS_CA_BUNDLE would override `verify`
    sent, nodes, token_next = 0, 0, ""
    while True:
        params: dict[str, Any] = {"limit": page_size}
        if token_next:
            params["continue"] = token_next
        response = session.get(f"{server}/api/v1/nodes", params=params, timeout=600)
        response.raise_for_status()
        sent += 1
        page = response.json()
        nodes += len(page.get("items") or [])
        token_next = (page.get("metadata") or {}).get("continue") or ""
        if not token_next:
            return sent, nodes


@click.command()
@click.option("--prometheus-url", required=True)
@click.option("--at", "at_text", required=True, help="RFC 3339 instant, as --at of the guard")
@click.option("--page", type=int, required=True, help="guard.doors.kube.PAGE")
@click.option("--snapshot", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--api-server", default="", help="https://host:port (API mode)")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--ca-file", default="")
def main(
    prometheus_url: str,
    at_text: str,
    page: int,
    snapshot: Path | None,
    api_server: str,
    token_file: Path | None,
    ca_file: str,
) -> None:
    at = datetime.fromisoformat(at_text.replace("Z", "+00:00"))
    started = time.monotonic()
    query_s = run_queries(prometheus_url, at)
    api_requests, objects = 0, 0
    if api_server and token_file is not None:
        token = token_file.read_text().strip()
        api_requests, objects = list_nodes(api_server, token, ca_file, page)
    elif snapshot is not None:
        objects = read_file(snapshot)
    else:
        raise click.UsageError("give --snapshot, or --api-server with --token-file")
    result = {
        "elapsed_s": round(time.monotonic() - started, 3),
        "prometheus_requests": len(query_s),
        "api_requests": api_requests,
        "objects": objects,
        "query_s": query_s,
    }
    click.echo(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
