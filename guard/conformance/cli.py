"""`gpu-node-guard conformance`: check a node's host configuration against the cluster's baseline.

Exit status: 0 when no item FAILed (WARN and UNKNOWN do not fail the run), 1 when any did, 2 on
bad arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from guard.conformance.checks import run_conformance
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config, IpNetwork, Role, parse_allowed_dns
from guard.conformance.report import exit_code, render_json, render_text
from guard.conformance.rke2 import parse_exact
from guard.conformance.runner import SubprocessRunner
from guard.hostexec import NSENTER_PREFIX


def _version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and parse_exact(value) is None:
        raise click.BadParameter(f"{value!r} is not a version like v1.34.3+rke2r1")
    return value


def _cidrs(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[IpNetwork, ...] | None:
    if value is None:
        return None
    try:
        return parse_allowed_dns(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_F = TypeVar("_F", bound=Callable[..., Any])


def _option(name: str, **kwargs: Any) -> Callable[[_F], _F]:
    """`name`, also read from GUARD_CONFORMANCE_<NAME>, with its default shown in --help."""
    env = "GUARD_CONFORMANCE_" + name.removeprefix("--").replace("-", "_").upper()
    return click.option(name, envvar=env, show_default=True, **kwargs)


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
    help="e.g. v1.34.3+rke2r1; minor differs: FAIL, patch only: WARN (unset: WARN, not compared)",
)
@_option(
    "--allowed-dns",
    callback=_cidrs,
    help="Comma-separated CIDRs the pods' upstream resolvers must be in (unset: WARN)",
)
@_option("--output", type=click.Choice(["text", "json"]), default="text")
@_option(
    "--timeout-s",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    help="Limit of each host command; a command past it makes its item UNKNOWN",
)
@_option(
    "--nsenter",
    is_flag=True,
    help="Run host commands in PID 1's mount namespace (nsenter -t 1 -m --), for the Job",
)
def conformance(
    root: Path,
    fix: bool,
    role: Role,
    control_plane_version: str | None,
    allowed_dns: tuple[IpNetwork, ...] | None,
    output: str,
    timeout_s: float,
    nsenter: bool,
) -> None:
    """Check the node's host configuration: ip_vs, NVIDIA driver/NVML, RKE2 unit and version,
    unattended upgrades, package holds and the pods' DNS upstreams."""
    config = Config(role, control_plane_version, allowed_dns)
    runner = SubprocessRunner(timeout_s, NSENTER_PREFIX if nsenter else ())
    results = run_conformance(HostFS(root), runner, config, fix)
    if output == "json":
        click.echo(render_json(results, config, str(root), fix))
    else:
        click.echo(render_text(results))
    raise SystemExit(exit_code(results))
