"""Small pure helpers shared by both planners."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from guard import ledger
from guard.actions import (
    Action,
    AppendLedgerLine,
    ClearGuardAnnotations,
    Cordon,
    CreateJob,
    EmitEvent,
    Skip,
)
from guard.codec.check_records import MAX_LINKS, job_record_value
from guard.jobs import JobKind as JobKind
from guard.jobs import JobSpec, JobTemplates, job_name, spec_digest
from guard.model import NodeInfo, RecordedLink, Snapshot
from guard.names import RECORDER, Annotations
from guard.settings import Settings
from guard.states import Decision, Reason, xid_reason

WAIT = "checked again next cycle"  # the next step of a decision that waits
# The GPU of `gpu-node-guard render evidence` (a first incident on this card).
EXAMPLE_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def keys(s: Settings) -> Annotations:
    return Annotations(s.annotation_prefix)


def present(node: NodeInfo, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """The keys among `candidates` that the node carries (what a patch may remove)."""
    return tuple(key for key in candidates if node.has(key))


def cancel(
    node: NodeInfo, clear: tuple[str, ...], record: tuple[tuple[str, str], ...], message: str
) -> tuple[ClearGuardAnnotations, EmitEvent]:
    """A person ended an isolation: the guard's record cleared, the cancel recorded, one Event."""
    return (
        ClearGuardAnnotations(
            node.name, Decision.HUMAN_UNCORDON, node.resource_version, present(node, clear), record
        ),
        EmitEvent(node.name, Decision.HUMAN_UNCORDON, "Normal", "GuardCancelled", message),
    )


def node_cordon(
    snap: Snapshot,
    s: Settings,
    node: NodeInfo,
    reason: Reason,
    cordon: tuple[str, int, str, str],
    message: str,
    more: tuple[tuple[str, str], ...] = (),
    capacity: int | None = None,
) -> tuple[Cordon, EmitEvent]:
    """The guard's cordon of a node, whatever its reason: its record (reason, time, boot, GPU
    count, then `more`) in one guarded patch, and its Warning Event. `cordon`: the Cordon's gpu,
    held_s, next and detail."""
    k, at = keys(s), ledger.format_time(snap.now)
    gpus = node.gpu_capacity if capacity is None else capacity
    record: tuple[tuple[str, str], ...] = ((k.reason, reason), (k.at, at))
    record += ((k.boot_id, node.boot_id), (k.gpu_capacity, str(gpus)), *more)
    gpu, held_s, then, detail = cordon
    clear = present(node, k.record_keys)
    version = node.resource_version
    return (
        Cordon(node.name, reason, version, record, gpu, held_s, then, clear, detail),
        EmitEvent(node.name, reason, "Warning", "GuardCordoned", message, incident=at),
    )


def skip_cancelled(node: NodeInfo, incident: str, rearms: str) -> Skip:
    """The skip of a candidate whose `incident` a person cancelled by uncordoning it, and what
    re-arms the check."""
    assert node.cancelled is not None
    when = ledger.format_time(node.cancelled.at)
    detail = f"{incident}: a person uncordoned this incident at {when}"
    return Skip(node.name, Decision.CANCELLED, detail, rearms)


def job_spec(
    s: Settings,
    kind: JobKind,
    node: str,
    key: str,
    reason: Reason,
    args: tuple[str, ...],
    gpus: int = 0,
    ttl_s: int | None = None,
) -> JobSpec:
    """The Job of one kind for one node, in the jobs namespace (policies/ pin its shape).

    `ttl_s`: ttlSecondsAfterFinished when not `job_ttl_s` (the after-reboot checks')."""
    return JobSpec(
        kind=kind,
        name=job_name(kind, node, key),
        namespace=s.jobs_namespace,
        node=node,
        reason=reason,
        prefix=s.annotation_prefix,
        image=s.loadtest_image if kind == "loadtest" else s.image,
        command=("gpu-node-guard", *args),
        deadline_s=s.loadtest_deadline_s if kind == "loadtest" else s.evidence_deadline_s,
        ttl_s=s.job_ttl_s if ttl_s is None else ttl_s,
        workload_service_account=s.job_service_account,
        gpus=gpus,
        node_selector=(s.gpu_node_selector,),
        tolerations=(s.onboarding_gate,) if s.onboarding_gate else (),
    )


@dataclass(frozen=True, slots=True)
class Incident:
    """One cordon's facts: what the ledger line and the evidence Job are built from."""

    node: str
    at: datetime
    xid: int
    pci: str
    uuid: str


def has_ledger_line(snap: Snapshot, incident: Incident) -> bool:
    return any(
        e.node == incident.node and e.at == incident.at and e.recorder == RECORDER
        for e in ledger.entries(snap.ledger)
    )


def ledger_append(s: Settings, incident: Incident, reason: Reason) -> AppendLedgerLine | Skip:
    """The incident's ledger line; a WARN instead where a value (a hand-edited GPU annotation)
    would make a line the ledger cannot read back: nothing is written, the rest goes on."""
    entry = ledger.LedgerEntry(
        incident.node, incident.at, incident.xid, incident.pci, incident.uuid, RECORDER
    )
    try:
        line = entry.format()
    except ValueError as exc:
        fix = "correct the node's GPU annotation; the line is written once it reads back"
        return Skip(incident.node, Decision.UNREADABLE, str(exc), fix, "WARN")
    return AppendLedgerLine(incident.node, reason, line, s.ledger_configmap)


def breaker_open(node: str, guarded: int, limit: int, waiting: str) -> tuple[Skip, EmitEvent]:
    """The circuit breaker holds a cordon (the isolation check's and the lifecycle checks'
    alike): a WARN line and a Warning Event naming the node and what waits."""
    detail = f"{guarded} isolations (nodes cordoned + devices tainted), limit {limit}; {waiting}"
    fix = "cordon by hand if the fault is real; the breaker closes when nodes return"
    message = f"gpu-node-guard did not cordon: {detail}"
    word = Decision.BREAKER_OPEN
    return (
        Skip(node, word, detail, fix, "WARN"),
        EmitEvent(node, word, "Warning", "GuardBreakerOpen", message),
    )


# The ledger's archive Event (docs/writes.md, "The fault ledger's storage").
LEDGER_ARCHIVED = Decision.LEDGER_ARCHIVED


def with_archive_events(
    snap: Snapshot, s: Settings, actions: Iterable[Action]
) -> tuple[Action, ...]:
    """`actions` with the archive Event planned after the append that passes the ledger's size
    bound, so the dry run shows it and the executor writes nothing the plan did not name
    (docs/writes.md, "The fault ledger's storage")."""
    size = snap.ledger_bytes
    out: list[Action] = []
    for action in actions:
        out.append(action)
        if not isinstance(action, AppendLedgerLine):
            continue
        size += len(action.line.encode()) + 1 + len(action.node.encode())  # the key, to be safe
        if size > s.ledger_archive_bytes:
            out.append(archive_event(action, s.ledger_archive_bytes))
            size = s.ledger_archive_bytes // 2  # what the archive leaves (ledger_store.append)
    return tuple(out)


def archive_event(action: AppendLedgerLine, bound: int) -> EmitEvent:
    message = (
        f"gpu-node-guard moves the oldest lines of ledger {action.configmap} to an archive "
        f"ConfigMap (its size passes {bound} bytes); card and slot counts still read the archive"
    )
    word = LEDGER_ARCHIVED
    line = action.line
    return EmitEvent(action.node, word, "Normal", "GuardLedgerArchived", message, incident=line)


def evidence_job(
    snap: Snapshot, s: Settings, t: JobTemplates, incident: Incident, reason: Reason
) -> CreateJob:
    """The evidence Job of an incident; its name depends only on node and cordon time."""
    counts = ledger.count(snap.ledger, incident.uuid, incident.node, incident.pci)
    if not has_ledger_line(snap, incident):  # the counts include this incident, written or not
        counts = ledger.Counts(counts.same_card + 1, counts.same_slot + 1, incident.at)
    args = evidence_args(incident, counts)
    return node_evidence_job(s, t, incident.node, incident.at, reason, args)


def node_evidence_job(
    s: Settings, t: JobTemplates, node: str, at: datetime, reason: Reason, args: tuple[str, ...]
) -> CreateJob:
    """An evidence Job keyed by the node and its cordon time: the Xid cordon's (one GPU) and a
    node trigger's (`--trigger`, the node; docs/evidence.md "Node-wide")."""
    spec = job_spec(s, "evidence", node, ledger.format_time(at), reason, args)
    return create_job(s, node, reason, "evidence", spec.name, t.render(spec))


# Stands for the uid in a CreateJob's record until the API answers the create (guard.apply).
UID = "{uid}"


def create_job(
    s: Settings, node: str, reason: Reason, kind: str, name: str, manifest: dict[str, Any]
) -> CreateJob:
    """A Job whose result a gate acts on, with the record of what the guard made: the executor
    fills in the uid the API answers and writes it on the node (guard.apply)."""
    key = Annotations(s.annotation_prefix).job_record(kind)
    record = (key, job_record_value(name, UID, spec_digest(manifest))) if key else ()
    return CreateJob(node, reason, kind, name, manifest, record)


def evidence_args(incident: Incident, counts: ledger.Counts) -> tuple[str, ...]:
    """Every value is a name, an address or a number the admission policy can match: the
    evidence program builds the history sentence from the counts (no free text in argv)."""
    args = ["evidence", "collect", "--node", incident.node, "--pci", incident.pci]
    args += ["--xid", str(incident.xid), "--uuid", incident.uuid]
    args += ["--card-incidents", str(counts.same_card), "--slot-incidents", str(counts.same_slot)]
    return tuple(args)


def trigger_evidence_args(node: str, reason: Reason, gpus: int | None) -> tuple[str, ...]:
    """A node trigger's evidence argv (guard/generate/policies/argv.py pins it): gpu-short also
    gives its class's count, so a slot not listed at all shows."""
    count = ("--expected-gpus", str(gpus)) if reason == ledger.GPU_SHORT and gpus else ()
    return ("evidence", "collect", "--node", node, "--trigger", str(reason), *count)


def fence_args(s: Settings, mode: str, pci: str, uuid: str) -> tuple[str, ...]:
    """The fence Job's argv (guard/generate/policies/argv.py `fence`): `set` or `lift` of one GPU,
    with ``--drain`` when the site allows it (the lift undoes the drain the set made)."""
    drain = ("--drain",) if s.fence_drain else ()
    return ("fence", mode, "--pci", pci, "--uuid", uuid, *drain)


def conformance_args(s: Settings) -> tuple[str, ...]:
    args = ["conformance", "--root", "/proc/1/root", "--nsenter", "--role", "worker"]
    if s.conformance_control_plane_version:
        args += ["--control-plane-version", s.conformance_control_plane_version]
    if s.conformance_allowed_dns:  # one word, no spaces: the policy matches it as a CIDR list
        cidrs = (part.strip() for part in s.conformance_allowed_dns.split(","))
        args += ["--allowed-dns", ",".join(c for c in cidrs if c)]
    return (*args, "--output", "json")


def loadtest_args(
    s: Settings,
    gpus: int,
    xid: int | None,
    pci: str,
    links: tuple[RecordedLink, ...] = (),
    duration_s: int | None = None,
) -> tuple[str, ...]:
    """The load test's argv: the burn, the all-reduce (stated, never left to defaults), the
    memory test for a memory-class Xid, then one ``--expect-link`` per GPU whose link the
    cordon's evidence Job recorded (guard/generate/policies/argv.py pins this order)."""
    duration = s.loadtest_duration_s if duration_s is None else duration_s
    args = ["loadtest", "run", "--backend", "torch", "--expected-gpus", str(gpus)]
    args += ["--duration-s", str(duration), "--size", str(s.loadtest_matrix_size)]
    args += ["--min-ratio", f"{s.loadtest_min_ratio:g}"]
    args += ["--allreduce" if s.loadtest_allreduce else "--no-allreduce"]
    args += ["--allreduce-min-ratio", f"{s.loadtest_allreduce_min_ratio:g}"]
    args += ["--allreduce-timeout-s", str(s.loadtest_allreduce_timeout_s)]
    if xid is not None:
        args += ["--xid", str(xid), "--memory-class-xids", ",".join(map(str, s.memory_class_xids))]
        if pci and pci != ledger.UNKNOWN_PCI:
            args += ["--memory-test-pci", pci]
    for link in sorted(links, key=lambda link: link.pci)[:MAX_LINKS]:
        args += ["--expect-link", str(link)]
    return tuple(args)


def render_example_job(
    s: Settings,
    t: JobTemplates,
    kind: JobKind,
    example: tuple[str, str, int, int],
    key: str = "render",
    *,
    device: bool = False,
) -> dict[str, object]:
    """A Job exactly as the planners build it, for `gpu-node-guard render`.

    `example` is (node, faulted PCI address, Xid, GPUs of the node); `device`: the load test of
    one DRA device, its GPU by the ResourceClaim named as the Job (guard.plan.device_taint).
    """
    node, pci, xid, gpus = example
    gpus = 1 if device else gpus
    incident = Incident(node, datetime(2026, 1, 1, tzinfo=UTC), xid, pci, EXAMPLE_UUID)
    builders = {
        "evidence": lambda: evidence_args(incident, ledger.Counts(1, 1, None)),
        "loadtest": lambda: loadtest_args(s, gpus, xid, pci),
        "conformance": lambda: conformance_args(s),
        "fence": lambda: fence_args(s, "set", pci, EXAMPLE_UUID),
    }
    gpus = gpus if kind == "loadtest" else 0
    spec = job_spec(s, kind, node, key, xid_reason(xid), builders[kind](), gpus=gpus)
    return t.render(replace(spec, claim=spec.name) if device else spec)
