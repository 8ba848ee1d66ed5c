"""The cordon's `GuardCordoned` Event, written again under its name (node, reason, cordon time)
when the cycle that cordoned lost it, while the cordon is younger than the API server's event
TTL (docs/writes.md, "Events").
"""

from __future__ import annotations

from guard import ledger
from guard.actions import EmitEvent
from guard.model import CordonRecord, NodeInfo, Snapshot
from guard.plan import mismatch
from guard.plan.check_jobs import is_conformance_cordon
from guard.states import Decision

# The API server keeps an Event 1 h after its last write (--event-ttl); re-emitting a cordon Event
# later than this could recreate one that simply expired.
EVENT_REPAIR_S = 50 * 60
LATE = "(Event written late: its first write failed)"


def if_lost(snap: Snapshot, event: EmitEvent, c: CordonRecord) -> tuple[EmitEvent, ...]:
    """`event` when the cordon's Event is missing and young enough to be lost, not expired."""
    if c.at is None or (snap.now - c.at).total_seconds() > EVENT_REPAIR_S:
        return ()
    return () if any(e.name == event.name for e in snap.events) else (event,)


def xid_event(node: str, c: CordonRecord, job: str) -> EmitEvent:
    assert c.at is not None and c.gpu is not None
    return _event(node, c, f"Xid {c.xid} on GPU {c.gpu.pci} {c.gpu.uuid}; evidence job/{job}")


def gpuless_event(node: NodeInfo, c: CordonRecord) -> EmitEvent:
    """A cordon without a GPU: nvml-mismatch, conformance-<item>, another reason word."""
    what: str = c.reason
    if c.reason == mismatch.NVML_MISMATCH:
        what = (
            "the NVIDIA kernel module and the NVML library differ, so new CUDA and NVML "
            f"processes fail here; {mismatch.CORDON_NEXT}"
        )
    elif is_conformance_cordon(c) and node.conformance_failed is not None:
        f = node.conformance_failed
        what = f"conformance failed on boot {c.boot_id}: {', '.join(f.items)}; {f.job}"
    return _event(node.name, c, what)


def _event(node: str, c: CordonRecord, what: str) -> EmitEvent:
    assert c.at is not None
    at = ledger.format_time(c.at)
    message = f"cordoned by gpu-node-guard at {at}: {what} {LATE}"
    return EmitEvent(node, Decision.REPAIR_EVENT, "Warning", "GuardCordoned", message, incident=at)
