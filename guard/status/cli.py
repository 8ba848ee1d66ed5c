"""``gpu-node-guard status`` (and the kubectl plugin ``kubectl gpu-guard``): it reads, never writes;
it plans as a run would and shows the decisions. What it reads, its options and exit codes:
docs/status.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from guard.cli_options import GuardedCommand
from guard.doors.kube import Kube, KubeError
from guard.doors.prom import PromClient, PromError
from guard.doors.prom_access import PromAccessError
from guard.doors.retry import Backoff
from guard.jobs import JobTemplates, TemplateLoadError
from guard.model import PromView
from guard.names import SETTINGS_CONFIGMAP
from guard.read import (
    ClusterObjects,
    SnapshotError,
    build_snapshot,
    gaps_line,
    load_cluster_file,
    read_cluster,
    read_prom,
    require_nodes,
)
from guard.settings import SITE_GROUPS, STATUS_GROUPS, Settings
from guard.settings_flags import (
    LOCAL_ONLY,
    Rfc3339,
    build_settings,
    env_options,
    given_here,
    option_set,
)
from guard.status.derive import report
from guard.status.model import Sight
from guard.status.render import render

READ_DEADLINE_S = 60.0  # a person waits at most this long for the API's answers, retries included


@click.command(cls=GuardedCommand)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "wide", "json"]),
    default="text",
    show_default=True,
    help="wide: whole texts, GPU UUIDs and runbook links; json: the stable document.",
)
@click.option("--context", default="", help="The kubeconfig context to use (like kubectl).")
@click.option(
    "--at", "at", type=Rfc3339(), default=None, help="Evaluate every query at this instant."
)
@click.option(
    "--cluster-snapshot",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Read Nodes, Jobs and the ledger from a List file instead of the API server.",
)
@option_set(tuple(n for g in STATUS_GROUPS for n in SITE_GROUPS[g]))
def status(
    output: str, context: str, at: datetime | None, cluster_snapshot: Path | None, **options: Any
) -> None:
    """Every GPU node the guard holds or watches: state, why, and what a person does next.

    The decisions use the CronJob's own settings, read from its ConfigMap
    (gpu-node-guard-settings); the flags here say where to read from (a flag or GUARD_* variable
    given here wins over the ConfigMap's). Without --prometheus-url the table says what it could
    not see."""
    s = build_settings(options)
    now = at or datetime.now(UTC).replace(microsecond=0)
    try:
        templates = JobTemplates.load()
        s, objs = read_objects(s, options, context, cluster_snapshot)
    except (KubeError, SnapshotError, TemplateLoadError) as exc:
        raise click.ClickException(str(exc)) from None
    if cluster_snapshot is not None and objs.gaps:
        click.echo(gaps_line(cluster_snapshot, objs.gaps), err=True)
    names = {n.name for n in objs.nodes}
    view, sight = _prometheus(s, now, names, objs.dra_gpus())
    try:
        snap = build_snapshot(now, objs, view, s)
    except SnapshotError as exc:
        raise click.ClickException(str(exc)) from None
    result = report(snap, s, templates, sight)
    if output == "json":
        click.echo(json.dumps(result.to_json()))
    else:
        click.echo(render(result, wide=output == "wide"), nl=False)
    if sight.error:
        raise SystemExit(1)


def read_objects(
    s: Settings, options: dict[str, Any], context: str, cluster_snapshot: Path | None
) -> tuple[Settings, ClusterObjects]:
    """The settings and the objects (`status` and `report`): a List file's with the settings
    given here, else the API server's with the CronJob's ConfigMap under what is given here."""
    if cluster_snapshot is not None:
        return s, load_cluster_file(cluster_snapshot, s)
    deadline = Backoff.for_seconds(min(float(s.cycle_deadline_s), READ_DEADLINE_S))
    kube = Kube.connect(s.kubeconfig, None, deadline, s.api_timeout_s, context)
    given = given_here(click.get_current_context(), options)
    s = _site_settings(kube, s, options, given)
    return s, require_nodes(read_cluster(kube, s))


def _site_settings(
    kube: Kube, s: Settings, options: dict[str, Any], given: frozenset[str]
) -> Settings:
    """The site's settings as the CronJob runs with them: its ConfigMap, under what is given
    here (and never the places it reads from: LOCAL_ONLY). One line says which were used."""
    where = f"configmap {s.namespace}/{SETTINGS_CONFIGMAP}"
    try:
        found = kube.configmap(s.namespace, SETTINGS_CONFIGMAP)
    except KubeError as exc:
        click.echo(f"WARN settings: cannot read {where} ({exc}): the defaults decide", err=True)
        return s
    if found is None:
        click.echo(f"WARN settings: no {where}: the defaults decide", err=True)
        return s
    site = env_options(found.get("data") or {}, given | LOCAL_ONLY, where)
    click.echo(
        f"settings: {len(site)} from {where} (the CronJob's), {len(given)} given here", err=True
    )
    return build_settings({**options, **site}, warn=False)


def _prometheus(
    s: Settings, now: datetime, names: set[str], dra_gpus: bool
) -> tuple[PromView, Sight]:
    if not s.prometheus_url:
        return PromView(), Sight()
    try:
        view = read_prom(PromClient.from_settings(s), s, now, names, dra_gpus=dra_gpus)
    except PromAccessError as exc:
        raise click.UsageError(str(exc)) from None
    except PromError as exc:
        return PromView(), Sight(s.prometheus_url, str(exc))
    return view, Sight(s.prometheus_url)


def plugin() -> None:
    """The kubectl plugin: ``kubectl gpu-guard [-o wide] [--context C]`` is this command."""
    status(prog_name="kubectl gpu-guard")
