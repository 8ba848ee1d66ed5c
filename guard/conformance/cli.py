"""`gpu-node-guard conformance`: check a node's host configuration against the cluster's baseline.
Exit 0 when no item FAILed, 1 when any did, 2 on bad arguments. The summary for the guard is
guard.wire's (docs/conformance.md); the node options are shared with `gpu-node-guard agent`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import click

from guard.cli_options import termination_log_option, write_summary
from guard.conformance.checks import Run, run_conformance
from guard.conformance.hostfs import HostFS
from guard.conformance.model import Config, ItemResult, Status
from guard.conformance.platform import PLATFORMS, PROXY_MODES
from guard.doors.hostexec import NSENTER_PREFIX, HostRunner
from guard.settings_flags import FiniteFloatRange, warn_unknown_command_env
from guard.wire import (
    Finding,
    IpNetwork,
    Summary,
    parse_allowed_dns,
    parse_exact,
    render_summary,
    short_why,
)

F = TypeVar("F", bound=Callable[..., Any])
Option = Callable[..., Callable[[F], F]]


def env_option(prefix: str) -> Option[Any]:
    """`option(name, …)`: a click option also read from <prefix><NAME>, default shown in --help."""

    def option(name: str, **kwargs: Any) -> Callable[[F], F]:
        env = prefix + name.removeprefix("--").replace("-", "_").upper()
        return click.option(name, envvar=env, show_default=True, **kwargs)

    return option


def cidrs(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[IpNetwork, ...] | None:
    if not value:
        return None
    try:
        return parse_allowed_dns(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def node_options(option: Option[Any]) -> Callable[[F], F]:
    """--allowed-dns, --platform, --kube-proxy-mode and --resolv-conf (guard.conformance.Config)."""
    decorators = (
        option(
            "--allowed-dns",
            callback=cidrs,
            help="Comma-separated CIDRs the pods' upstream resolvers must be in (unset: SKIP)",
        ),
        option(
            "--platform",
            type=click.Choice(PLATFORMS),
            default="auto",
            help="rke2: RKE2 items and RKE2's resolv.conf rule; other: neither;"
            " auto: RKE2 when its files are there",
        ),
        option(
            "--kube-proxy-mode",
            type=click.Choice(PROXY_MODES),
            default="auto",
            help="Only ipvs makes the ip_vs checks apply; auto: read kube-proxy's configuration",
        ),
        option(
            "--resolv-conf",
            help="The resolv.conf kubelet hands pods (unset: RKE2's or kubelet's own choice)",
        ),
    )
    return lambda command: functools.reduce(lambda c, d: d(c), reversed(decorators), command)


SCHEMA = "gpu-node-guard/conformance/v2"


def failed_items(results: tuple[ItemResult, ...]) -> tuple[str, ...]:
    return tuple(r.name for r in results if r.status is Status.FAIL)


def counts(results: tuple[ItemResult, ...]) -> dict[str, int]:
    return {s.value: sum(r.status is s for r in results) for s in Status}


def render_json(run: Run, config: Config, root: str, fix: bool) -> str:
    doc = {
        "schema": SCHEMA,
        "ok": not failed_items(run.results),
        "failed": list(failed_items(run.results)),
        "counts": counts(run.results),
        "root": root,
        "role": config.role,
        "fix": fix,
        "platform": run.platform.as_dict(),
        "items": [asdict(r) for r in run.results],
    }
    return json.dumps(doc, sort_keys=True)


def render_text(run: Run) -> str:
    results = run.results
    p = run.platform
    width = max(len("ITEM"), *(len(r.name) for r in results))
    rke2 = "RKE2" if p.rke2 else "not RKE2"
    lines = [
        f"node: {rke2} ({p.rke2_source}); kube-proxy {p.proxy_mode}"
        + (f" ({p.proxy_source})" if p.proxy_source else ""),
        f"{'ITEM':<{width}}  {'STATUS':<7}  OBSERVED / ACTION",
    ]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status.value:<7}  {r.observed}")
        if r.action and r.status not in (Status.PASS, Status.SKIP):
            lines.append(f"{'':<{width}}  {'':<7}  -> {r.action}")
    tally = " ".join(f"{k.lower()}={v}" for k, v in counts(results).items())
    verdict = "FAIL" if failed_items(results) else "OK"
    note = "only FAIL fails; WARN, UNKNOWN and SKIP are reported"
    lines.append(f"result: {verdict} {tally} ({note})")
    return "\n".join(lines)


def summarize(results: tuple[ItemResult, ...]) -> Summary:
    def found(status: Status) -> tuple[Finding, ...]:
        return tuple(Finding(r.name, short_why(r.observed)) for r in results if r.status is status)

    return Summary(
        ok=not failed_items(results),
        failed=found(Status.FAIL),
        unknown=found(Status.UNKNOWN),
        warned=found(Status.WARN),
        skipped=found(Status.SKIP),
        fixed=tuple(r.name for r in results if r.status is Status.FIXED),
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
@termination_log_option(
    "Where the summary for the guard goes, if that file exists ('' = nowhere)", _option
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
    write_summary(opts["termination_log"], render_summary(summarize(run.results)))
    raise SystemExit(1 if failed_items(run.results) else 0)
