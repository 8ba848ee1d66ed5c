"""`gpu-node-guard agent`: the node agent of the DaemonSet (docs/agent.md); `--once` prints one
/metrics page and exits. Bad arguments: one `Error:` line, exit 2."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from guard.agent.metrics import render, run_checks
from guard.agent.server import Agent, ListenError
from guard.cli_options import node_callback
from guard.conformance.cli import env_option, node_options
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config
from guard.log import Log
from guard.settings_flags import FiniteFloatRange, warn_unknown_command_env

DEFAULT_PORT = 9842

ENV_PREFIX = "GUARD_AGENT_"
_option = env_option(ENV_PREFIX)


def _listen(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (e.g. 0.0.0.0:{DEFAULT_PORT})")
    return host.strip("[]") or "0.0.0.0", int(port)


@click.command()
@_option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default="/host",
    help="Where the host paths are mounted (read-only) in the agent's container",
)
@_option(
    "--node",
    required=True,
    callback=node_callback,  # it labels every series: a wrong one would name no Node
    help="This node's name (the DaemonSet sets it from spec.nodeName)",
)
@_option(
    "--listen", default=f"0.0.0.0:{DEFAULT_PORT}", callback=_listen, help="HOST:PORT for /metrics"
)
@_option(
    "--interval-s",
    type=FiniteFloatRange(min=1),
    default=120.0,
    help="Seconds between two runs of the checks",
)
@node_options(_option)
@_option("--once", is_flag=True, help="Print one /metrics page and exit")
def agent(**opts: Any) -> None:
    """Node agent: nvidia-match, ipvs-loaded and dns-upstream every few minutes, for Prometheus."""
    warn_unknown_command_env(ENV_PREFIX)
    node = {k: opts[k] for k in ("allowed_dns", "platform", "kube_proxy_mode")}
    config = Config(**node, resolv_conf=opts["resolv_conf"] or None)
    fs, node, interval_s = HostFS(opts["root"]), opts["node"], opts["interval_s"]
    if opts["once"]:
        click.echo(render(node, run_checks(fs, config), time.time(), interval_s), nl=False)
        return
    try:
        Agent(node, interval_s, lambda: run_checks(fs, config), Log()).serve(*opts["listen"])
    except ListenError as exc:
        raise click.BadParameter(str(exc), param_hint="'--listen'") from None
