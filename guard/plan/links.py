"""The PCIe links the cordon's evidence Job read: recorded on the node, waited for, and handed to
the load test as ``--expect-link`` (docs/loadtest.md, "PCIe links"; docs/lifecycle.md).

Case list, for a node under the guard's Xid cordon:
  the evidence Job still runs           → the load test waits (skip evidence-running), at most
                                          until the Job's deadline is a cycle past
  its result has links, node has none   → annotate auto-cordon-pcie-links (once)
  links recorded on the node            → those go to the load test
  else the evidence result's links      → those (the annotation may land in this same cycle)
  no result (Job gone, failed, unread)  → no --expect-link: the load test checks only the max
  an evidence Job the guard did not make (no record of it on the node, another uid or spec)
                                        → its links are never taken (no --expect-link from it)
"""

from __future__ import annotations

from guard import ledger
from guard.actions import Annotate, Skip
from guard.check_records import links_value
from guard.jobs import job_name
from guard.model import NodeInfo, RecordedLink, Snapshot
from guard.plan.check_jobs import foreign
from guard.plan.common import keys
from guard.settings import Settings


def evidence_job_name(node: NodeInfo) -> str | None:
    """The cordon's evidence Job (guard.plan.common `evidence_job`: keyed by the cordon time)."""
    c = node.cordon
    if c is None or c.xid is None or c.at is None:
        return None
    return job_name("evidence", node.name, ledger.format_time(c.at))


def _evidence_links(snap: Snapshot, node: NodeInfo) -> tuple[RecordedLink, ...]:
    name = evidence_job_name(node)
    job = next((j for j in snap.jobs if j.name == name), None)
    if job is None or job.result is None or job.result.state != "read" or foreign(node, job):
        return ()
    return job.result.links


def recorded_links(snap: Snapshot, node: NodeInfo) -> tuple[RecordedLink, ...]:
    return node.pcie_links or _evidence_links(snap, node)


def record_links(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Annotate, ...]:
    links = () if node.pcie_links else _evidence_links(snap, node)
    if not links:
        return ()
    value = links_value(links)
    then = "the load test checks each GPU's link against it (--expect-link)"
    note = ((keys(s).pcie_links, value),)
    return (Annotate(node.name, "pcie-links", node.resource_version, note, then),)


def evidence_running(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Skip, ...]:
    """The load test waits while the evidence Job runs, at most until its deadline has passed
    (a Job still shown running after that has lost its controller: go on without its links)."""
    name = evidence_job_name(node)
    job = next((j for j in snap.jobs if j.name == name), None)
    if job is None or job.status != "running" or node.cordon is None or node.cordon.at is None:
        return ()
    if (snap.now - node.cordon.at).total_seconds() > s.evidence_deadline_s + s.cadence_s:
        return ()
    detail = f"job/{name} still reads the node; its PCIe links go to the load test"
    return (Skip(node.name, "evidence-running", detail, "checked again next cycle"),)
