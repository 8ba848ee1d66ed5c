"""Fence Jobs the guard did not make: any fence Job, set or lift, that no record of its node
explains (by uid, never by time) is one WARN and one Warning Event, once per Job uid: a stolen
token or a bug (docs/isolation.md, "The host fence"; docs/security.md, "The fence Job").
"""

from __future__ import annotations

from collections.abc import Iterable

from guard import ledger
from guard.actions import Action, EmitEvent, Skip
from guard.model import JobInfo, NodeInfo, Snapshot
from guard.plan.check_jobs import foreign_job
from guard.settings import Settings
from guard.states import Decision

# What stays, as the WARN of a fence Job no record explains says.
STAYS = (
    "the guard's records are unchanged; its GPU's compute mode may differ from them "
    "(on the host: nvidia-smi -q -d COMPUTE)"
)


def why_foreign(node: NodeInfo, job: JobInfo) -> str:
    """Why no record of the node explains `job` ("" when one does): by uid, never by time."""
    created = job.created
    if created is None:
        return ""
    rec = node.job_record("fence")
    if (rec is not None and rec.uid == job.uid) or (job.uid and job.uid in node.fence_jobs):
        return ""
    c = node.cordon
    if c is None:
        floors = [r.at for r in (node.returned, node.cancelled) if r is not None]
        return "" if floors and created < max(floors) else "the node carries no guard cordon"
    if c.at is not None and created < c.at:
        return ""
    last = f" (the guard's last fence Job here is job/{rec.name} uid {rec.uid})" if rec else ""
    return f"created {ledger.format_time(created)} in this cordon, its uid in no fence record{last}"


def plan_audit(snap: Snapshot, s: Settings, planned: Iterable[Action]) -> tuple[Action, ...]:
    """One WARN and one Event per fence Job no record explains, once per Job uid."""
    said = {e.name for e in snap.events} | {a.name for a in planned if isinstance(a, EmitEvent)}
    out: list[Action] = []
    for warn, event in foreign_fence_jobs(snap, s):
        if event.name not in said:
            said.add(event.name)
            out.extend((warn, event))
    return tuple(out)


def foreign_fence_jobs(snap: Snapshot, s: Settings) -> tuple[tuple[Skip, EmitEvent], ...]:
    """Every fence Job no record explains now, said or not (`status` shows them all)."""
    out = []
    for job in (j for j in snap.jobs if j.kind == "fence"):
        node = snap.node(job.node)
        if node is not None and not node.unreadable and (why := why_foreign(node, job)):
            out.append(foreign_job(s, node, job, Decision.FENCE_JOB_FOREIGN, why, STAYS))
    return tuple(out)
