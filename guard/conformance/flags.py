"""Command-line pieces that `gpu-node-guard conformance` and `gpu-node-guard agent` share: options
read from an environment prefix, and the four options that say what the node is expected to be."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from guard.conformance.platform import PLATFORMS, PROXY_MODES
from guard.wire import IpNetwork, parse_allowed_dns

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

    def apply(command: F) -> F:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply
