"""Click commands: `evidence collect`, `evidence classify` and `ledger count`.

Bad input is one click error line and a non-zero exit; missing evidence is not an error (it is
reported as "unknown" and `collect` still exits 0, because the printed evidence is the result)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import jinja2

from guard import ledger as fault_ledger
from guard.cli_options import (
    FILE,
    OUTPUT,
    node_callback,
    pci_callback,
    termination_log_option,
    uuid_callback,
    write_summary,
)
from guard.evidence import aer, node_wide, request
from guard.evidence.assess import Assessment, Inputs, assess, offline_inputs
from guard.evidence.collect import DEFAULT_HOST_ROOT, DEFAULT_TIMEOUT_S, Host, gather, node_links
from guard.evidence.kernel_log import KernelLog, KernelLogScan
from guard.evidence.ledger_cli import count
from guard.evidence.report import Tables, to_json, to_text
from guard.files import (
    KERNEL_LOG_MAX_BYTES,
    SMALL_TEXT_MAX_BYTES,
    FileInputError,
    iter_lines,
    read_bounded,
)
from guard.settings_flags import FiniteFloatRange
from guard.wire import EvidenceSummary, render_evidence_summary
from guard.xid_tables import CLASSES_FILE, DataFileError, load_catalog, load_classes

JSON_MARK = "EVIDENCE-JSON "
_T = TypeVar("_T")


def _loaded(load: Callable[[], _T]) -> _T:
    """A data table or the request template, or its one-line error (exit 1)."""
    try:
        return load()
    except (DataFileError, request.TemplateError) as err:
        raise click.ClickException(str(err)) from err


def _tables(classes_file: Path) -> Tables:
    return _loaded(lambda: Tables(load_classes(classes_file), load_catalog()))


MAX_LOG_AER_EVENTS = 1000  # AER lines kept from one kernel log (a storm repeats one event)


def read_text(path: Path, option: str) -> str:
    """A text file's content; a binary, oversized or non-regular file is a usage error (one
    line), not a traceback or a wait on a FIFO."""
    try:
        data = read_bounded(path, SMALL_TEXT_MAX_BYTES, "file")
    except FileInputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    if b"\0" in data:
        raise click.BadParameter(f"{path} is not a text file", param_hint=option)
    return data.decode("utf-8", errors="replace")


def scan_kernel_log(path: Path, option: str) -> tuple[KernelLog, tuple[aer.AerEvent, ...]]:
    """The kernel log parsed line by line as it is read: memory stays flat however long the
    log (a 100 MB one took 738 MB read whole); a binary file is a usage error."""
    scan = KernelLogScan()
    events: list[aer.AerEvent] = []
    try:
        for number, line in enumerate(iter_lines(path, KERNEL_LOG_MAX_BYTES, "file"), start=1):
            if "\0" in line:
                raise click.BadParameter(f"{path} is not a text file", param_hint=option)
            scan.add(number, line)
            if len(events) < MAX_LOG_AER_EVENTS and (event := aer.parse_aer_line(line, number)):
                events.append(event)
    except FileInputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    return scan.result(), tuple(events)


# Shared with `fence`: both Jobs read the host the same way.
host_root_option = click.option(
    "--host-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_HOST_ROOT,
    show_default=True,
    help="Where the host's /sys is visible.",
)
timeout_option = click.option(
    "--timeout-s",
    type=FiniteFloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Time limit of each host command.",
)
_classes_option = click.option(
    "--xid-classes",
    type=FILE,
    default=CLASSES_FILE,
    envvar="GUARD_XID_CLASSES",
    show_default=True,
    help="TSV mapping Xid codes to verdicts (xid, verdict).",
)


@click.group()
def evidence() -> None:
    """Evidence for a GPU fault: read the host, decide, draft the request."""


@click.group()
def ledger() -> None:
    """Fault-ledger tools."""


ledger.add_command(count)


@evidence.command()
@click.option("--node", required=True, callback=node_callback, help="Node name (DNS-1123).")
@click.option("--pci", callback=pci_callback, help="The faulted GPU (any spelling).")
@click.option(
    "--trigger",
    type=click.Choice([str(r) for r in fault_ledger.NODE_REASONS]),
    help="Instead of --pci: the node-wide evidence of a node trigger (docs/triggers.md).",
)
@click.option("--expected-gpus", type=click.IntRange(1, 99), help="gpu-short: the class's count.")
@click.option("--xid", type=click.IntRange(min=0), help="Xid the guard saw on the metric.")
@click.option("--uuid", callback=uuid_callback, help="GPU UUID the ledger counts (GPU-…).")
@click.option(
    "--card-incidents",
    type=click.IntRange(min=1),
    help="Ledger incidents of this card, this one included (with --slot-incidents).",
)
@click.option(
    "--slot-incidents",
    type=click.IntRange(min=1),
    help="Ledger incidents in this slot of this node, this one included.",
)
@host_root_option
@timeout_option
@_classes_option
@termination_log_option(
    "Where the summary for the guard (verdict, GPU links) goes, if that file exists."
)
def collect(**opts: Any) -> None:
    """Read the host (kernel log, lspci, AER, nvidia-smi -q); print the report, request and JSON.

    The history sentence of the request is chosen from the ledger counts (a closed set of
    sentences); no text given on the command line is ever rendered as a template. Every GPU's
    PCIe link goes into the summary for the guard (guard.evidence.collect, node_links).
    """
    trigger, want = _node_wide(opts)
    counts = _counts(opts["card_incidents"], opts["slot_incidents"])
    tables = _tables(opts["xid_classes"])
    template = _loaded(request.load_template)
    host = Host(root=opts["host_root"], timeout_s=opts["timeout_s"])
    summary = (node_links(host), opts["termination_log"])
    if trigger is None:
        target = Target(opts["node"], opts["pci"], opts["uuid"], counts)
        emit_collected(gather(host, opts["pci"], opts["xid"]), tables, template, target, summary)
        return
    found, slots = node_wide.gather(host, tables.classes)
    found = node_wide.judge(found, slots, trigger, want, tables.classes)
    target = Target(opts["node"], fault_ledger.UNKNOWN_PCI, None, None, trigger)
    lines = node_wide.slot_sentences(slots, want)
    emit_collected(found, tables, template, target, summary, lines)


def _node_wide(opts: dict[str, Any]) -> tuple[str | None, int | None]:
    """--trigger (node-wide, gpu-short with --expected-gpus) or --pci (one GPU), exactly one."""
    gpu = [f"--{k.replace('_', '-')}" for k in ("xid", "uuid", "card_incidents") if opts[k]]
    trigger, want = opts["trigger"], opts["expected_gpus"]
    if (trigger is None) == (opts["pci"] is None):
        raise click.UsageError("give --pci (one GPU) or --trigger (the node), exactly one")
    if trigger is not None and gpu:
        raise click.UsageError(f"{gpu[0]} names a GPU: not with --trigger")
    if want is not None and trigger != fault_ledger.GPU_SHORT:
        raise click.UsageError("--expected-gpus goes with --trigger gpu-short only")
    return trigger, want


def _counts(card: int | None, slot: int | None) -> fault_ledger.Counts | None:
    if (card is None) != (slot is None):
        raise click.UsageError("give both --card-incidents and --slot-incidents, or neither")
    return None if card is None or slot is None else fault_ledger.Counts(card, slot, None)


@dataclass(frozen=True, slots=True)
class Target:
    """The GPU the Job was started for, and its ledger counts (None: not given)."""

    node: str
    pci: str
    uuid: str | None
    counts: fault_ledger.Counts | None
    trigger: str | None = None  # node-wide evidence: the node trigger, and no GPU

    def history(self, found_uuid: str | None) -> str | None:
        """The request's history sentence, from the closed set in guard.ledger."""
        if self.counts is None:
            return None
        uuid = self.uuid or found_uuid or "unknown"
        return fault_ledger.history_sentence(self.counts, uuid, self.node, self.pci)


def emit_collected(
    inputs: Inputs | Assessment,
    tables: Tables,
    template: jinja2.Template,
    target: Target,
    summary: tuple[tuple[tuple[str, str], ...], str] = ((), ""),
    slots: list[str] | None = None,
) -> None:
    """Print report, draft and the JSON line, and write the summary (links, termination-log
    path) for the guard; a template that fails to render exits 1 last. `slots`: node-wide."""
    found = inputs if isinstance(inputs, Assessment) else assess(inputs, target.pci, tables.classes)
    links, termination_log = summary
    text = render_evidence_summary(EvidenceSummary(target.pci, found.verdict.value, links))
    write_summary(termination_log, text)
    what = f"trigger {target.trigger}" if target.trigger else f"GPU {target.pci}"
    click.echo(to_text(found, tables, f"gpu-node-guard evidence: node {target.node}, {what}"))
    if slots is not None:
        click.echo("\n  ".join(("-- lspci -nn -k -d 10de: --", *slots)))
    history = target.history(found.uuid)
    error = None
    try:
        values = request.context(found, tables, target.node, history, target.trigger, slots)
        draft = request.render(template, values)
    except request.TemplateError as err:
        draft, error = "", str(err)
    click.echo("-- request draft --")
    click.echo(draft or f"  unavailable: {error}")
    record = {
        "node": target.node,
        "trigger": target.trigger,
        **to_json(found, tables),
        "slots": slots,
        "history": history,
        "request": draft,
        "links": [{"pci": pci, "link": link} for pci, link in links],
    }
    click.echo(JSON_MARK + json.dumps(record, separators=(",", ":")))
    if error:
        raise click.ClickException(error)


@evidence.command()
@click.option("--kernel-log", type=FILE, required=True, help="journalctl -k / dmesg / syslog.")
@click.option(
    "--lspci", "lspci_file", type=FILE, help="lspci -xxx or -vv of the GPU (or of all GPUs)."
)
@click.option("--aer", "aer_file", type=FILE, help="AER lines, lspci -vvv of a port, counters.")
@click.option(
    "--nvidia-smi-q",
    "smi_file",
    type=FILE,
    help="nvidia-smi -q output: row remapping, retired pages, reset status.",
)
@click.option("--pci", callback=pci_callback, help="Judge only this GPU (any PCI spelling).")
@click.option("--root-port", callback=pci_callback, help="The GPU's upstream port, for AER lines.")
@click.option("--output", type=OUTPUT, default="text", show_default=True)
@_classes_option
def classify(**opts: Any) -> None:
    """Decide offline from saved files; the same parser and verdict as `collect`."""
    tables = _tables(opts["xid_classes"])
    log_path: Path = opts["kernel_log"]
    parsed, log_aer = scan_kernel_log(log_path, "--kernel-log")
    saved = Inputs(
        kernel_log="",
        kernel_log_source=str(log_path),
        parsed_log=parsed,
        log_aer=log_aer,
        gpu_lspci=read_text(opts["lspci_file"], "--lspci") if opts["lspci_file"] else None,
        aer_text=read_text(opts["aer_file"], "--aer") if opts["aer_file"] else "",
        nvidia_smi=read_text(opts["smi_file"], "--nvidia-smi-q") if opts["smi_file"] else None,
    )
    inputs = offline_inputs(saved, opts["pci"], opts["root_port"])
    found = assess(inputs, opts["pci"], tables.classes)
    if opts["output"] == "json":
        click.echo(json.dumps(to_json(found, tables), indent=2))
    else:
        title = f"gpu-node-guard evidence (offline): {log_path}"
        click.echo(to_text(found, tables, title), nl=False)
