"""Command line: ``gpu-node-guard run`` (the CronJob) and the tools that run inside its Jobs."""

from __future__ import annotations

import functools
import importlib
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import click
import yaml

from guard.bundle import BundleError, load_bundle
from guard.cli_options import FILE, OUTPUT, GuardedGroup, node_callback, pci_callback
from guard.doors.prom import PromClient
from guard.doors.prom_access import PromAccessError
from guard.doors.retry import Anchor
from guard.jobs import TEMPLATE_FILES, TemplateLoadError
from guard.log import Log
from guard.plan.common import render_example_job
from guard.settings import MAX_XID, RENDER_SETTINGS
from guard.settings_flags import Rfc3339, build_settings, option_set, settings_options


class LazyGroup(GuardedGroup):
    """Subcommands load on first use (numpy, parsers…), so the CronJob's `run` starts fast."""

    LAZY: ClassVar[dict[str, str]] = {
        "evidence": "guard.evidence.cli:evidence",
        "ledger": "guard.evidence.cli:ledger",
        "loadtest": "guard.loadtest.cli:loadtest",
        "conformance": "guard.conformance.cli:conformance",
        "fence": "guard.fence.cli:fence",
        "agent": "guard.agent.cli:agent",
        "status": "guard.status.cli:status",
        "report": "guard.report.cli:report",
        "config": "guard.generate.config:config",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            module, attr = self.LAZY[name].split(":")
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, name)


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="gpu-node-guard", prog_name="gpu-node-guard")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Keeps a Kubernetes GPU node pool healthy: isolate faulted nodes, return repaired ones."""
    if ctx.invoked_subcommand is None:  # bare `gpu-node-guard`: the help, and success
        click.echo(ctx.get_help())


def command_paths(group: click.Group, ctx: click.Context | None = None) -> list[tuple[str, ...]]:
    """Every command under `group`, as the words a person types (for help and packaging checks).

    >>> ("render",) in command_paths(cli) and ("evidence", "classify") in command_paths(cli)
    True
    """
    ctx = ctx or click.Context(group, info_name="gpu-node-guard")
    out: list[tuple[str, ...]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)  # never None: the group lists it
        out.append((name,))
        if isinstance(command, click.Group):
            sub = click.Context(command, info_name=name, parent=ctx)
            out.extend((name, *path) for path in command_paths(command, sub))
    return out


@cli.command(context_settings={"show_default": True})
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option(
    "--at", type=Rfc3339(), help="Evaluate every query at this instant and treat it as now."
)
@click.option(
    "--cluster-snapshot",
    type=FILE,
    help="Read Nodes, Jobs and the ledger from a List file (implies --dry-run).",
)
@click.option("--output", type=OUTPUT, default="text")
@click.option(
    "--watch/--no-watch",
    default=None,
    help="After the cycle, stay up and cordon a hold when it completes (default: on, off for"
    " --dry-run and --at unless asked; an --at watch runs in the replayed time).",
)
@click.option("--log-format", type=OUTPUT, default="text", envvar="GUARD_LOG_FORMAT")
@settings_options
def run(
    dry_run: bool,
    at: datetime | None,
    cluster_snapshot: Path | None,
    output: str,
    watch: bool | None,
    log_format: str,
    **options: Any,
) -> None:
    """One cycle: return check, then isolation check (then the watch: guard/run.py)."""
    s = build_settings(options, warn_layout=False)
    if not s.prometheus_url:
        raise click.UsageError("--prometheus-url (or GUARD_PROMETHEUS_URL) is required")
    try:
        prom = PromClient.from_settings(s)
    except PromAccessError as exc:
        raise click.UsageError(str(exc)) from None
    from guard.run import Inputs, start  # the Job programs load no run

    dry_run = dry_run or cluster_snapshot is not None
    watching = watch if watch is not None else not dry_run and at is None
    inputs = Inputs(dry_run, at, cluster_snapshot, output, watching)
    anchor = Anchor.start()
    log = Log(log_format, runbook_base_url=s.runbook_base_url)  # type: ignore[arg-type]
    sys.exit(start(s, prom, log, inputs, anchor))


@cli.command(context_settings={"show_default": True})
@click.argument("kind", type=click.Choice(list(TEMPLATE_FILES)))
@click.option("--node", required=True, callback=node_callback, help="Node the Job is pinned to.")
@click.option(
    "--pci", default="0000:00:00.0", callback=pci_callback, help="Faulted GPU (evidence)."
)
@click.option("--xid", type=click.IntRange(1, MAX_XID), default=79)
@click.option(
    "--gpus", type=click.IntRange(1, 1024), default=8, help="GPUs of the node (loadtest)."
)
@option_set(RENDER_SETTINGS)
def render(kind: str, node: str, pci: str, xid: int, gpus: int, **options: Any) -> None:
    """Print a Job manifest exactly as the guard would create it (for review and policy tests).

    The images come from GUARD_IMAGE and GUARD_LOADTEST_IMAGE, as in the CronJob's pod."""
    s = build_settings(options)
    try:
        templates = load_bundle()
        manifest = render_example_job(s, templates, kind, (node, pci, xid, gpus))  # type: ignore[arg-type]
    except (TemplateLoadError, BundleError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(yaml.safe_dump(manifest, sort_keys=False), nl=False)


@functools.wraps(cli)
def main() -> None:
    cli(prog_name="gpu-node-guard")


if __name__ == "__main__":
    main()
