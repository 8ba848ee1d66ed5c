"""Small pure helpers shared by both planners."""

from __future__ import annotations

from pathlib import Path

from guard import ledger
from guard.jobs import JobKind as JobKind
from guard.jobs import JobSpec, default_templates_dir, job_name, render_job
from guard.model import Snapshot
from guard.names import Annotations
from guard.settings import Settings


def keys(s: Settings) -> Annotations:
    return Annotations(s.annotation_prefix)


def templates(s: Settings) -> Path:
    return Path(s.templates_dir) if s.templates_dir else default_templates_dir()


def xid_of(reason: str | None) -> int | None:
    """The Xid in a reason annotation such as ``xid-79``; None when it is not one.

    >>> xid_of("xid-79"), xid_of("manual")
    (79, None)
    """
    if reason and reason.startswith("xid-") and reason[4:].isdigit():
        return int(reason[4:])
    return None


def guarded_nodes(snap: Snapshot, s: Settings) -> tuple[str, ...]:
    """Nodes carrying the guard's reason annotation (what the circuit breaker counts)."""
    key = keys(s).reason
    return tuple(n.name for n in snap.nodes if n.annotation(key) is not None)


def job_spec(
    s: Settings,
    kind: JobKind,
    node: str,
    key: str,
    reason: str,
    args: tuple[str, ...],
    gpus: int = 0,
) -> JobSpec:
    image = s.loadtest_image if kind == "loadtest" else s.image
    deadline = s.loadtest_deadline_s if kind == "loadtest" else s.evidence_deadline_s
    return JobSpec(
        kind=kind,
        name=job_name(kind, node, key),
        namespace=s.namespace,
        node=node,
        reason=reason,
        prefix=s.annotation_prefix,
        image=image,
        command=("gpu-node-guard", *args),
        deadline_s=deadline,
        ttl_s=s.job_ttl_s,
        workload_service_account=s.job_service_account,
        gpus=gpus,
    )


def render(s: Settings, spec: JobSpec) -> dict[str, object]:
    return render_job(spec, templates(s))


def card_counts(snap: Snapshot, uuid: str, node: str, pci: str) -> ledger.Counts:
    return ledger.count(snap.ledger, uuid, node, pci)
