"""`gpu-node-guard conformance`: check a node's host configuration against the cluster's baseline.

Exit status: 0 when no item FAILed (WARN, UNKNOWN and SKIP do not fail the run), 1 when any did, 2
on bad arguments. The summary for the guard goes to the container's termination message file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from guard.conformance.checks import run_conformance
from guard.conformance.flags import env_option, node_options
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config
from guard.conformance.report import exit_code, render_json, render_text, summarize
from guard.doors.hostexec import NSENTER_PREFIX, HostRunner
from guard.settings_flags import FiniteFloatRange, warn_unknown_command_env
from guard.wire import (
    TERMINATION_LOG,
    parse_exact,
    render_summary,
    write_termination_message,
)


def _version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and parse_exact(value) is None:
        raise click.BadParameter(f"{value!r} is not a version like v1.34.3+rke2r1")
    return value


ENV_PREFIX = "GUARD_CONFORMANCE_"
_option = env_option(ENV_PREFIX)


@click.command()
@_option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default="/",
    help="Host root to read; /proc/1/root inside a hostPID Job",
)
# Never from the environment: a host write must be asked for on the command line, where the
# admission policies see it (they refuse --fix in every guard Job, and refuse env altogether).
@click.option(
    "--fix",
    is_flag=True,
    help="Repair ip_vs only: modprobe it; write /etc/modules-load.d/ipvs.conf when none lists it",
)
@_option(
    "--role",
    type=click.Choice(["worker", "server"]),
    default="worker",
    help="Which RKE2 unit the node must have enabled (worker: rke2-agent only)",
)
@_option(
    "--control-plane-version",
    callback=_version,
    help="e.g. v1.34.3+rke2r1; minor differs: FAIL, patch only: WARN (unset: SKIP, not compared)",
)
@node_options(_option)
@_option("--output", type=click.Choice(["text", "json"]), default="text")
@_option(
    "--timeout-s",
    type=FiniteFloatRange(min=0, min_open=True),
    default=10.0,
    help="Limit of each host command; a command past it makes its item UNKNOWN",
)
@_option(
    "--nsenter",
    is_flag=True,
    help="Run host commands in PID 1's mount namespace (nsenter -t 1 -m --), for the Job",
)
@_option(
    "--termination-log",
    default=TERMINATION_LOG,
    help="Where the summary for the guard goes, if that file exists ('' = nowhere)",
)
def conformance(**opts: Any) -> None:
    """Check the node's host configuration: ip_vs, NVIDIA driver/NVML, RKE2 unit and version,
    unattended upgrades, package holds and the pods' DNS upstreams. Items that do not apply to
    the node (RKE2 items off RKE2, ip_vs items outside IPVS mode) are SKIP."""
    warn_unknown_command_env(ENV_PREFIX)
    node = (opts["allowed_dns"], opts["platform"], opts["kube_proxy_mode"])
    config = Config(opts["role"], opts["control_plane_version"], *node, opts["resolv_conf"] or None)
    runner = HostRunner(opts["timeout_s"], NSENTER_PREFIX if opts["nsenter"] else ())
    run = run_conformance(HostFS(opts["root"]), runner, config, opts["fix"])
    if opts["output"] == "json":
        click.echo(render_json(run, config, str(opts["root"]), opts["fix"]))
    else:
        click.echo(render_text(run))
    summary = render_summary(summarize(run.results))
    note = write_termination_message(opts["termination_log"], summary)
    if note:
        click.echo(note, err=True)
    raise SystemExit(exit_code(run.results))
