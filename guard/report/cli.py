"""``gpu-node-guard report``: repair figures (`guard.figures`) from the guard's records; it reads
what `status` reads and never writes. Its outputs and exit codes: README.md, "The report"."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from guard.cli_options import GuardedCommand
from guard.doors import ledger_store
from guard.doors.kube import KubeError
from guard.figures import Facts, budget_of, facts, figures
from guard.names import Annotations
from guard.read import ClusterObjects, SnapshotError, gaps_line
from guard.read.objects import NamelessObject, job_info
from guard.report import html, render
from guard.settings import REPORT_SETTINGS, Settings
from guard.settings_flags import Rfc3339, build_settings, option_set
from guard.status.cli import read_objects
from guard.xid_tables import DataFileError, bundled_classes

DEFAULT_WEEKS = 12


@click.command(cls=GuardedCommand)
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the report as one self-contained HTML page (inline SVG) to this file.",
)
@click.option("--context", default="", help="The kubeconfig context to use (like kubectl).")
@click.option(
    "--at", "at", type=Rfc3339(), default=None, help="The period's end and 'now' (default: now)."
)
@click.option(
    "--since",
    type=Rfc3339(),
    default=None,
    help=f"The period's start (default: {DEFAULT_WEEKS} weeks before --at).",
)
@click.option(
    "--cluster-snapshot",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Read Nodes, Jobs, Events and the ledger from a List file instead of the API server.",
)
@option_set(REPORT_SETTINGS)
def report(
    output: str,
    html_file: Path | None,
    context: str,
    at: datetime | None,
    since: datetime | None,
    cluster_snapshot: Path | None,
    **options: Any,
) -> None:
    """Repair figures: incidents, repeats per card, slot and node, GPU-hours out of service.

    GPU-hours split the faulted GPUs' from the healthy GPUs' a node-wide cordon held with them.
    Isolations past their verdict's quarantine budget (--budget) are listed.
    """
    s = build_settings(options)
    until = at or datetime.now(UTC).replace(microsecond=0)
    start = since or until - timedelta(weeks=DEFAULT_WEEKS)
    if start >= until:
        raise click.UsageError("--since must be before --at")
    try:
        s, objs = read_objects(s, options, context, cluster_snapshot)
        found = figures(from_objects(objs, s), bundled_classes(), start, until, budget_of(s))
    except (KubeError, SnapshotError, DataFileError) as exc:
        raise click.ClickException(str(exc)) from None
    if cluster_snapshot is not None and objs.gaps:
        click.echo(gaps_line(cluster_snapshot, objs.gaps), err=True)
    if html_file is not None:
        try:
            html_file.write_text(html.page(found), encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {html_file}: {exc.strerror}") from None
    if output == "json":
        click.echo(json.dumps(render.to_json(found)))
    else:
        click.echo(render.text(found), nl=False)


def from_objects(objs: ClusterObjects, s: Settings) -> Facts:
    """The figures' facts of a cluster read or a snapshot file (which record gives which mark:
    guard/figures.py, "Facts from the guard's records")."""
    keys = Annotations(s.annotation_prefix)
    data = (objs.ledger or {}).get("data") or {}
    if not isinstance(data, Mapping):
        raise SnapshotError(f"ledger ConfigMap {s.ledger_configmap}: data is not a mapping")
    lines = ledger_store.ledger_lines(data, objs.ledger_archives)
    jobs = []
    for obj in objs.jobs:
        try:
            info = job_info(obj, keys)
        except NamelessObject:
            continue
        jobs.append((info.kind, info.node, obj))
    return facts(lines, objs.nodes, objs.events, jobs)
