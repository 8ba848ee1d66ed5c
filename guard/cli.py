"""Command line: ``gpu-node-guard run`` (the CronJob) and the tools that run inside its Jobs."""

from __future__ import annotations

import functools
import importlib
import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click
import yaml

from guard.actions import Action, Cordon, TaintDevice, to_json
from guard.apply import KubeExecutor, PrintExecutor, cordon_landed, refused_cordons
from guard.apply.outcome import Outcome, RunTrace, failed, tally
from guard.bundle import BundleError, load_bundle
from guard.cli_options import GuardedGroup, node_callback, pci_callback
from guard.doors.kube import Kube, KubeError
from guard.doors.prom import PromClient, PromError
from guard.doors.prom_access import PromAccessError
from guard.doors.retry import Anchor, Backoff
from guard.jobs import TEMPLATE_FILES, JobTemplates, TemplateLoadError
from guard.log import Log, Value
from guard.model import Snapshot
from guard.names import CYCLE_LEASE
from guard.plan import hold, plan_cycle, plan_fallback, released
from guard.plan.common import render_example_job
from guard.plan.isolation import MAX_CORDON_TRIES
from guard.plan.pending import Waiting, pending
from guard.read import (
    SNAPSHOT_COMMAND,
    SnapshotError,
    build_snapshot,
    load_cluster_file,
    read_cluster,
    read_prom,
    require_nodes,
)
from guard.read.prom_view import check_join, coverage_pairs
from guard.settings import MAX_XID, Settings, setting_fields
from guard.settings_flags import Rfc3339, build_settings, layout_warnings, settings_options

if TYPE_CHECKING:
    from guard.doors.lease import CycleLease
    from guard.plan.deadlines import Deadlines

DRY_RUN_PROM_RETRY_S = 10.0  # how long a dry run retries a transient Prometheus answer


class LazyGroup(GuardedGroup):
    """Subcommands run inside the guard's Jobs are imported on first use (numpy, parsers…),
    so the CronJob's `run` starts fast."""

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
        command = group.get_command(ctx, name)
        if command is None:
            continue
        out.append((name,))
        if isinstance(command, click.Group):
            sub = click.Context(command, info_name=name, parent=ctx)
            out.extend((name, *path) for path in command_paths(command, sub))
    return out


@cli.command()
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option(
    "--at",
    "at",
    type=Rfc3339(),
    default=None,
    help="Evaluate every query at this instant and treat it as now.",
)
@click.option(
    "--cluster-snapshot",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Read Nodes, Jobs and the ledger from a List file (implies --dry-run).",
)
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--watch/--no-watch",
    default=None,
    help="After the cycle, stay up and cordon a hold when it completes (default: on, off for"
    " --dry-run and --at unless asked; an --at watch runs in the replayed time).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    envvar="GUARD_LOG_FORMAT",
)
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
    """One cycle: return check, then isolation check."""
    s = build_settings(options, warn_layout=False)
    if not s.prometheus_url:
        raise click.UsageError("--prometheus-url (or GUARD_PROMETHEUS_URL) is required")
    try:
        prom = PromClient.from_settings(s)
    except PromAccessError as exc:
        raise click.UsageError(str(exc)) from None
    log = Log(log_format, runbook_base_url=s.runbook_base_url)  # type: ignore[arg-type]
    dry_run = dry_run or cluster_snapshot is not None
    anchor = Anchor.start()
    log.event("start", mode="dry-run" if dry_run else "apply", at=at.isoformat() if at else "now")
    log.emit("settings", _settings_fields(s))
    for warning in layout_warnings(s):
        log.emit("layout", dict(warning), "WARN")
    trace = RunTrace(prom)
    watching = watch if watch is not None else not dry_run and at is None
    from guard.plan.deadlines import run_deadlines  # `--help` and the Job programs need none

    budget = Budget(anchor, run_deadlines(anchor.wall, s, watching))
    # A dry run is a person at a terminal: a mistyped Prometheus URL answers within seconds,
    # not after the CronJob's whole cycle budget of retries.
    prom.backoff = (
        Backoff.for_seconds(min(s.cycle_deadline_s, DRY_RUN_PROM_RETRY_S))
        if dry_run and not watching
        else budget.cycle()
    )
    prom.warn = functools.partial(_prom_warning, log)
    inputs = Inputs(dry_run, at, cluster_snapshot, output, watching)
    code = _run_cycle(s, log, inputs, trace, budget)
    if s.pushgateway_url and not dry_run:  # docs/metrics.md: after the last line, abort or not
        from guard.apply.push import push_run  # the push's status report is loaded only to push

        push_run(s, trace, code, time.time(), time.monotonic() - anchor.mono, log)
    sys.exit(code)


def _run_cycle(s: Settings, log: Log, inputs: Inputs, trace: RunTrace, budget: Budget) -> int:
    """The cycle and its exit code: 1 after an abort (one line) or a failed write, else 0."""
    try:
        trace.templates = load_bundle().templates  # every shipped file checked before anything
        result = _cycle(s, trace.prom, trace.templates, log, inputs, trace, budget)
    except LeaseHeld as exc:
        trace.lease_held = time.time()
        why = "another run holds the cycle's Lease and decides this slot; exit 0"
        log.event("lease-held", holder=exc.holder, lease=CYCLE_LEASE, next=why)
        return 0
    except LeaseLost:
        why = "another run took the cycle's Lease after this run's reads and decides this slot"
        log.event("lease-lost", lease=CYCLE_LEASE, next=f"{why}; no writes; exit 0")
        return 0
    except SlotIsolated as exc:
        why = "one cordon per cron slot: a run of this slot cordoned; the next slot's run decides"
        log.event("slot-isolated", slot=exc.slot, lease=CYCLE_LEASE, next=f"{why}; exit 0")
        return 0
    except (PromError, KubeError, SnapshotError, TemplateLoadError, BundleError) as exc:
        log.event("abort", "ERROR", reason=str(exc), next="no writes after this; exit 1")
        return 1
    except Exception as exc:  # a bug or an unforeseen answer: still one line, still exit 1
        first = (str(exc).strip().splitlines() or [""])[0]
        log.event(
            "abort",
            "ERROR",
            reason=f"unexpected {type(exc).__name__}: {first}",
            next="no writes after this; exit 1; please report",
        )
        return 1
    if inputs.output == "json":
        click.echo(json.dumps(result.to_json(), sort_keys=False))
    return 1 if failed(result.outcomes) else 0


def _settings_fields(s: Settings) -> dict[str, Value]:
    """The one `settings` line, sorted, values typed (lists comma-joined); no kubeconfig path."""
    out: dict[str, Value] = {}
    for f in sorted(setting_fields(), key=lambda f: f.name):
        value = getattr(s, f.name)
        if f.name != "kubeconfig":
            out[f.name] = ",".join(map(str, value)) if isinstance(value, tuple) else value
    return out


@dataclass(frozen=True, slots=True)
class Inputs:
    """How `run` was asked to read and what to do with the plan."""

    dry_run: bool
    at: datetime | None
    snapshot_file: Path | None
    output: str
    watch: bool = False


@dataclass(frozen=True, slots=True)
class Budget:
    """The run's deadlines (guard.plan.deadlines), kept on the monotonic clock from its start:
    the API and Prometheus doors retry until the cycle's, then, for the watch and the Lease's
    release, until the run's."""

    anchor: Anchor
    deadlines: Deadlines

    def cycle(self) -> Backoff:
        return Backoff(self.anchor.at(self.deadlines.cycle))

    def to_run_end(self, kube: Kube | None, prom: PromClient) -> None:
        end = self.anchor.at(self.deadlines.run)
        prom.backoff.until(end, "run")
        if kube is not None:
            kube.backoff.until(end, "run")


def _prom_warning(log: Log, query: str, warning: str) -> None:
    """A Prometheus warning that does not say the answer is partial: one line per text a run."""
    log.emit(
        "prometheus-warning",
        {
            "query": query,
            "warning": warning,
            "next": "answer used (it does not say it is partial); later answers with this"
            " warning are used without a line (docs/runbook.md#prometheus-warning)",
        },
        "WARN",
    )


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did: the plan, what became of each action, and the counts built from that."""

    dry_run: bool
    actions: tuple[Action, ...]
    outcomes: tuple[Outcome, ...]
    counts: dict[str, Value]
    pending: tuple[Waiting, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``--output json``: every action with its outcome, the pending candidates, and the
        `done` line's counts."""
        rows = []
        for o in self.outcomes:
            row = to_json(o.action)
            row["outcome"] = {"status": o.status, "reason": o.reason, "detail": o.detail}
            rows.append(row)
        return {
            "at": self.counts["at"],
            "dry_run": self.dry_run,
            "actions": rows,
            "pending": [p.to_json() for p in self.pending],
            "counts": self.counts,
        }


@dataclass(frozen=True, slots=True)
class Held:
    """The cycle's Lease as this run holds it, and its cron slot ("" for a replay: no record)."""

    lease: CycleLease
    slot: str

    def before_writes(self, actions: tuple[Action, ...]) -> bool:
        """The renewal right before a decision's writes; with a cordon among them, the slot's
        record goes into the Lease with it, before the cordon (a run killed right after its
        cordon leaves the record). False: the Lease is lost, write nothing."""
        now = datetime.now(UTC)
        if self.slot and any(isinstance(a, Cordon | TaintDevice) for a in actions):
            return self.lease.record(self.slot, now)
        return self.lease.renew(now)

    def after_writes(self, landed: bool) -> None:
        """No cordon landed after a record: the record as found (a lost Lease: the next
        renewal says so)."""
        if self.lease.isolated and not landed:
            self.lease.unrecord(datetime.now(UTC))


class LeaseHeld(Exception):
    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


class LeaseLost(Exception):
    """The renewal right before the cycle's writes met another holder (guard/doors/lease.py)."""


class SlotIsolated(Exception):
    """The Lease says a run of this cron slot already cordoned (guard/doors/lease.py)."""

    def __init__(self, slot: str) -> None:
        super().__init__(slot)
        self.slot = slot


def _cycle(
    s: Settings,
    prom: PromClient,
    templates: JobTemplates,
    log: Log,
    inputs: Inputs,
    trace: RunTrace,
    budget: Budget,
) -> CycleResult:
    """The cycle, then the watch; a real run holds the cycle's Lease from before its reads to
    its end (guard/doors/lease.py)."""
    if inputs.snapshot_file is not None or inputs.dry_run:
        return _cycle_and_watch(s, prom, templates, log, inputs, trace, budget, None)
    # a real run's only (dry runs load none)
    from guard.doors.lease import CycleLease, holder_identity, slot_key

    kube = trace.kube = Kube.connect(s.kubeconfig, None, budget.cycle(), s.api_timeout_s)
    from guard.ledger import format_time
    from guard.plan.watch import cron_slot

    this_slot = cron_slot(datetime.now(UTC), s)
    lease = CycleLease(
        kube,
        s.namespace,
        holder_identity(),
        s.lease_duration_s,
        slot_key(s.annotation_prefix),
        this_slot + timedelta(seconds=s.cadence_s),
    )
    holder = lease.take(datetime.now(UTC))
    if holder:
        raise LeaseHeld(holder)
    trace.lease_taken = time.time()
    if lease.taken_over:
        was, why = lease.taken_over
        log.event(
            "lease-taken-over",
            "WARN",
            holder=was,
            reason=f"no run writes this Lease: {why}",
            lease=CYCLE_LEASE,
            next="this run holds it and decides; find who wrote it (docs/runbook.md)",
        )
    try:
        # A replay (--at) is no slot of the CronJob's: it neither reads nor writes the record.
        slot = "" if inputs.at else format_time(this_slot)
        if slot and lease.isolated_slot() == slot:
            raise SlotIsolated(slot)
        return _cycle_and_watch(s, prom, templates, log, inputs, trace, budget, Held(lease, slot))
    finally:
        budget.to_run_end(kube, prom)  # an aborted cycle's release too
        try:
            lease.release(datetime.now(UTC))
        except KubeError as exc:  # it expires on its own within the CronJob's deadline
            expires = f"the Lease expires {s.lease_duration_s}s after its last renewal"
            log.event("lease-release-failed", "WARN", reason=str(exc), next=expires)


def _cycle_and_watch(
    s: Settings,
    prom: PromClient,
    templates: JobTemplates,
    log: Log,
    inputs: Inputs,
    trace: RunTrace,
    budget: Budget,
    held: Held | None,
) -> CycleResult:
    """`held`: the cycle's Lease and this run's cron slot, recorded there right before a cordon
    (one cordon per slot, guard/doors/lease.py)."""
    started = time.monotonic()
    lease = held.lease if held else None
    kube = trace.kube
    # The cluster first: its Node names join dcgm-exporter's series to Nodes (guard.read.prom_view).
    if inputs.snapshot_file is not None:  # a bad file is reported before any query runs
        objs = load_cluster_file(inputs.snapshot_file, s)
        if objs.gaps:
            step = f"the plan may miss incidents and Jobs; take it with `{SNAPSHOT_COMMAND}`"
            log.event("snapshot", "WARN", lacks="; ".join(objs.gaps), next=step)
    else:
        if kube is None:
            kube = trace.kube = Kube.connect(s.kubeconfig, None, budget.cycle(), s.api_timeout_s)
        objs = require_nodes(read_cluster(kube, s))
    names = {n.name for n in objs.nodes}
    now, offset = inputs.at or _instant(prom, log, budget.anchor), timedelta(0)
    if not inputs.at:
        offset = now - budget.anchor.now()  # the watch asks about Prometheus' time too
    view = read_prom(prom, s, now, names, dra_gpus=objs.dra_gpus())
    snap = trace.snap = build_snapshot(now, objs, view, s)
    missing = check_join(view, snap.nodes)  # no Xid series naming a Node: JoinError, abort
    if missing:
        log.emit("dcgm-missing", coverage_pairs(missing), "WARN")
    actions = plan_cycle(snap, s, templates)
    if held is not None and actions and not held.before_writes(actions):
        raise LeaseLost()
    executor_for = _executors(s, log, inputs, kube)
    executor = executor_for(snap)
    trace.outcomes = executor.outcomes  # the same list: a later abort still counts the writes
    for action in actions:
        executor.apply(action)
    _fall_back(executor, snap, s, templates)
    landed = cordon_landed(executor.outcomes)
    if held is not None:
        held.after_writes(landed)
    waiting = pending(snap, s)  # on their way to a cordon: one line each, after the decisions
    for p in waiting:
        executor.log.decision(*p.log_line())
    executor.log.summarise()
    outcomes = tuple(executor.outcomes)
    counts: dict[str, Value] = {
        "at": now.isoformat().replace("+00:00", "Z"),
        "nodes": len(snap.nodes),
        "candidates": len({c.node for c in hold.candidates(view, now, s)}),
        "pending": len(waiting),
        **tally(outcomes),
        "prometheus_requests": prom.requests_made,
        "prometheus_retries": prom.backoff.waits,
        "api_requests": kube.requests_made if kube else 0,
        "api_retries": kube.backoff.waits if kube else 0,
        "elapsed_s": round(time.monotonic() - started, 3),
    }
    bad = len(failed(outcomes))
    done = {k: v for k, v in counts.items() if k != "at"}
    if bad:
        done["next"] = f"exit 1: {bad} writes failed (write-failed lines above)"
    log.emit("done", done, "ERROR" if bad else "INFO")
    if inputs.watch and not bad:
        budget.to_run_end(kube, prom)  # the watch's reads and writes, the Lease's release
        if lease is None or lease.renew(datetime.now(UTC)):
            from guard.plan.watch import watch_end  # watching runs only
            from guard.watch import Clock, ReplayClock, RunClock, Watch

            clock: Clock = ReplayClock(now) if inputs.at else RunClock(budget.anchor, offset)
            Watch(
                s,
                prom,
                kube,
                templates,
                executor.log,
                snap,
                lambda decided: executor_for(decided, executor.outcomes),
                clock,
                watch_end(now, s) if inputs.at else budget.deadlines.watch_end + offset,
                (lambda _at: lease.renew(datetime.now(UTC))) if lease else lambda _at: True,
                released(actions),
                not landed,
                held.before_writes if held else lambda _actions: True,
                held.after_writes if held else lambda _landed: None,
            ).run()
        outcomes = tuple(executor.outcomes)
    return CycleResult(inputs.dry_run, actions, outcomes, counts, waiting)


def _instant(prom: PromClient, log: Log, anchor: Anchor) -> datetime:
    """The instant the cycle asks about: the pod's clock, never ahead of Prometheus' own
    (guard.plan.instant); clocks far apart are one WARN line."""
    from guard.ledger import format_time
    from guard.plan.instant import SKEW_WARN_S, cycle_instant

    theirs = prom.server_time()
    found = cycle_instant(anchor.now(), theirs)
    if found.skewed:
        ahead = "ahead of" if found.skew_s > 0 else "behind"
        log.emit(
            "clock-skew",
            {
                "skew_s": found.skew_s,
                "prometheus": format_time(theirs),
                "bound_s": SKEW_WARN_S,
                "next": f"the pod's clock runs {ahead} Prometheus': queries and writes use"
                f" {format_time(found.at)}; check the nodes' time sync"
                " (docs/runbook.md#clock-skew)",
            },
            "WARN",
        )
    return found.at


def _executors(
    s: Settings, log: Log, inputs: Inputs, kube: Kube | None
) -> Callable[..., PrintExecutor | KubeExecutor]:
    """Makes the executor of a snapshot (the cycle's, then each watch decision's), all
    writing into one list of outcomes."""
    stream = sys.stderr if inputs.output == "json" else sys.stdout
    printer_log = Log(log.fmt, stream, log.clock, runbook_base_url=log.runbook_base_url)

    def make(snap: Snapshot, outcomes: list[Outcome] | None = None) -> PrintExecutor | KubeExecutor:
        shared = outcomes if outcomes is not None else []
        if inputs.dry_run:
            return PrintExecutor(printer_log, inputs.output == "text", shared)
        assert kube is not None
        return KubeExecutor(kube, log, s, snap, socket.gethostname(), shared)

    return make


def _fall_back(
    executor: PrintExecutor | KubeExecutor, snap: Snapshot, s: Settings, t: JobTemplates
) -> None:
    """A cordon the API refused for its node (a site policy protects it): the isolation check's
    next candidate is planned and written, one line per try, until one cordon lands or
    MAX_CORDON_TRIES were sent (docs/writes.md). A dry run never gets here: nothing is refused."""
    refused = refused_cordons(executor.outcomes)
    while refused and not cordon_landed(executor.outcomes):
        more = plan_fallback(snap, s, t, refused)
        if not more:
            return
        executor.log.emit(
            "cordon-fallback",
            {
                "node": more[0].node,
                "refused": ",".join(sorted(refused)),
                "attempt": len(refused) + 1,
                "tries": MAX_CORDON_TRIES,
                "next": "the API refused the cordon above; the next candidate is cordoned instead",
            },
            "WARN",
        )
        for action in more:
            executor.apply(action)
        now = refused_cordons(executor.outcomes)
        if now == refused:  # not landed and not refused (changed under us, unreachable): stop
            return
        refused = now


@cli.command()
@click.argument("kind", type=click.Choice(list(TEMPLATE_FILES)))
@click.option("--node", required=True, callback=node_callback, help="Node the Job is pinned to.")
@click.option(
    "--pci",
    default="0000:00:00.0",
    show_default=True,
    callback=pci_callback,
    help="Faulted GPU (evidence).",
)
@click.option("--xid", type=click.IntRange(1, MAX_XID), default=79, show_default=True)
@click.option(
    "--gpus",
    type=click.IntRange(1, 1024),
    default=8,
    show_default=True,
    help="GPUs of the node (loadtest).",
)
@settings_options
def render(kind: str, node: str, pci: str, xid: int, gpus: int, **options: Any) -> None:
    """Print a Job manifest exactly as the guard would create it (for review and policy tests)."""
    s = build_settings(options)
    try:
        templates = load_bundle().templates
        manifest = render_example_job(s, templates, kind, (node, pci, xid, gpus))  # type: ignore[arg-type]
    except (TemplateLoadError, BundleError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(yaml.safe_dump(manifest, sort_keys=False), nl=False)


@functools.wraps(cli)
def main() -> None:
    cli(prog_name="gpu-node-guard")


if __name__ == "__main__":
    main()
