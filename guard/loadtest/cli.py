"""`gpu-node-guard loadtest run`, the command inside the load-test Job: exit 0 only on pass, 1 on
fail (a backend that cannot start included), 2 on bad arguments."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any

import click

from guard.cli_options import pci_callback, termination_log_option, write_summary
from guard.loadtest import report
from guard.loadtest.collective import START_TIMEOUT_S
from guard.loadtest.model import Backend, ExpectedLink, MemoryPlan, RunPlan, parse_expected_link
from guard.loadtest.run import run
from guard.loadtest.torch_backend import TorchBackend
from guard.loadtest.verdict import ALLREDUCE_MIN_RATIO, Criteria, judge
from guard.settings import setting_default
from guard.settings_flags import FiniteFloatRange, IntList

# CUDA start-up, cuBLAS handles and warm-up come before the timed burn; past this a GPU is hung.
_STARTUP_GRACE_S = 120.0
_MEMORY_TIMEOUT_S = 600.0
_shown = functools.partial(click.option, show_default=True)


@dataclass(frozen=True, slots=True)
class BackendOverride:
    """Put in `ctx.obj` to run the command on a given backend (tests inject faults this way)."""

    backend: Backend


def _links(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[ExpectedLink, ...]:
    links: dict[str, ExpectedLink] = {}
    for value in values:
        try:
            link = parse_expected_link(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        if link.pci in links:
            raise click.BadParameter(f"{link.pci} is given twice")
        links[link.pci] = link
    return tuple(links.values())


class _LineError(click.ClickException):
    exit_code = 2


class _OneLineErrors(click.Command):
    """Bad arguments print one `Error: …` line (exit 2) instead of usage text."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _LineError(exc.format_message()) from None


@click.group()
def loadtest() -> None:
    """GPU load test: matmul burn on every GPU at once, then a verdict."""


@loadtest.command("run", cls=_OneLineErrors)
@click.option(
    "--expected-gpus",
    type=click.IntRange(min=1),
    required=True,
    help="GPUs the node must show (its recorded nvidia.com/gpu capacity).",
)
@_shown(
    "--duration-s",
    type=FiniteFloatRange(min=0, min_open=True),
    default=float(setting_default("loadtest_duration_s")),
    help="Burn time per GPU; all GPUs burn at once.",
)
@_shown(
    "--size",
    type=click.IntRange(min=1),
    default=setting_default("loadtest_matrix_size"),
    help="Square matrix size (fp16).",
)
@_shown(
    "--min-ratio",
    type=FiniteFloatRange(0, 1, min_open=True),
    default=setting_default("loadtest_min_ratio"),
    help="Pass when every GPU reaches this fraction of the fastest.",
)
@click.option(
    "--xid",
    type=click.IntRange(min=0),
    default=None,
    help="Xid of the incident; a memory-class Xid adds the memory pattern test.",
)
@_shown(
    "--memory-class-xids",
    type=IntList(),
    metavar="TEXT",
    default=",".join(str(x) for x in setting_default("memory_class_xids")),
)
@click.option(
    "--memory-test-pci",
    callback=pci_callback,
    default=None,
    help="GPU for the memory test (any PCI spelling); all GPUs when not given.",
)
@_shown(
    "--allreduce/--no-allreduce",
    default=True,
    help="All-reduce across every GPU, one process per GPU (NCCL).",
)
@_shown(
    "--allreduce-min-ratio",
    type=FiniteFloatRange(0, 1, min_open=True),
    default=ALLREDUCE_MIN_RATIO,
    help="Pass when every GPU's all-reduce bandwidth reaches this fraction of the best GPU's.",
)
@_shown(
    "--allreduce-timeout-s",
    type=FiniteFloatRange(min=0, min_open=True),
    default=60.0,
    help=f"A rank silent this long while the others wait is hung"
    f" ({START_TIMEOUT_S:g} s until all are ready).",
)
@click.option(
    "--expect-link",
    "expected_links",
    multiple=True,
    callback=_links,
    metavar="PCI=NGT/s,xW",
    help="PCIe link recorded at cordon time, e.g. 0000:99:00.0=16GT/s,x16; repeatable. The link"
    " under load must not be below it.",
)
@_shown(
    "--backend",
    "backend_name",
    type=click.Choice(["torch"]),
    default="torch",
    help="torch: PyTorch on CUDA, the one backend shipped (the Job names it).",
)
@termination_log_option(
    "Where the compact summary for the guard goes, if that file exists ('' = nowhere)."
)
@_shown(
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    help="text: table, verdict and a LOADTEST-JSON line; json: the JSON alone.",
)
@click.pass_context
def run_command(ctx: click.Context, /, **options: Any) -> None:
    """Burn every GPU, judge, print; exit 0 on pass, 1 on fail."""
    criteria = Criteria(
        options["expected_gpus"],
        options["min_ratio"],
        allreduce_min_ratio=options["allreduce_min_ratio"],
        expected_links=options["expected_links"],
    )
    memory_class = options["xid"] is not None and options["xid"] in options["memory_class_xids"]
    memory = MemoryPlan(memory_class, options["memory_test_pci"])
    plan = RunPlan(
        size=options["size"],
        duration_s=options["duration_s"],
        memory=memory,
        burn_timeout_s=options["duration_s"] + _STARTUP_GRACE_S,
        memory_timeout_s=_MEMORY_TIMEOUT_S,
        allreduce_timeout_s=options["allreduce_timeout_s"] if options["allreduce"] else None,
    )
    override = ctx.find_object(BackendOverride)
    result = run(override.backend if override else _backend(), plan)
    verdict = judge(criteria, result)
    render = report.json_line if options["output"] == "json" else report.text
    click.echo(render(criteria, result, verdict))
    write_summary(options["termination_log"], report.summary(criteria, result, verdict))
    ctx.exit(0 if verdict.passed else 1)


def _backend() -> Backend:
    # Only the backend imports torch, so `--help` and every other subcommand work without it.
    if importlib.util.find_spec("torch") is None:  # the run cannot start: exit 1, one line
        raise click.ClickException(
            "the torch backend needs the Python package 'torch', which is not installed;"
            " install torch (the load-test image has it)"
        )
    return TorchBackend()
