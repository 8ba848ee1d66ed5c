"""Node triggers without an Xid: `gpu-short`, `admission-rejected` and `fabric` (docs/triggers.md).
Each has its own hold and then everything an Xid cordon has: the isolation check's screen,
breaker and one pick (after the Xid and nvml-mismatch nodes), a ledger line, the node-wide
evidence Job, its return row and a person's uncordon that cancels it for this boot.
"""

from __future__ import annotations

from guard import ledger
from guard.actions import Action, AppendLedgerLine, Skip
from guard.jobs import JobTemplates
from guard.model import CordonRecord, NodeInfo, Snapshot
from guard.names import RECORDER
from guard.plan.common import node_cordon, node_evidence_job, trigger_evidence_args
from guard.plan.triggers import admission, fabric, gpu_short
from guard.plan.triggers.model import Hit as Hit
from guard.settings import Settings
from guard.states import Reason

REASONS = ledger.NODE_REASONS
RANK = 3  # after hardware Xids (0, 1) and nvml-mismatch (2)
NEXT = {
    ledger.GPU_SHORT: (
        "power-cycle it (BMC/PDU); it returns with its class's GPU count after the load test"
    ),
    ledger.ADMISSION_REJECTED: (
        "power-cycle it or restart the device plugin and reboot; it returns after the load test"
    ),
    ledger.FABRIC: (
        "restart nvidia-fabricmanager, else reset the GPUs and NVSwitches or power-cycle it; "
        "failing again: a person (NVSwitch, baseboard or cable: RMA); it returns with every GPU's "
        "fabric in Success after the load test"
    ),
}


def hits(snap: Snapshot, s: Settings) -> tuple[Hit, ...]:
    """Every node trigger's finding now, held or not, by node then reason."""
    found = (*gpu_short.hits(snap, s), *admission.hits(snap, s), *fabric.hits(snap, s))
    return tuple(sorted(found, key=lambda h: (h.node, h.reason)))


def cordon(
    snap: Snapshot, s: Settings, t: JobTemplates, node: NodeInfo, found: Hit
) -> tuple[Action, ...]:
    args = trigger_evidence_args(node.name, found.reason, found.gpu_capacity)
    job = node_evidence_job(s, t, node.name, snap.now, found.reason, args)
    message = (
        f"cordoned by gpu-node-guard: {found.reason}: {found.detail}, held {found.held_s}s; "
        f"evidence job/{job.name} (its log: the verdict and the request); {NEXT[found.reason]}"
    )
    entry = ledger.LedgerEntry(
        node.name, snap.now, 0, ledger.UNKNOWN_PCI, ledger.NO_CARD, RECORDER, found.reason
    )
    cordon = ("", found.held_s, NEXT[found.reason], found.detail)
    return (
        *node_cordon(snap, s, node, found.reason, cordon, message, capacity=found.gpu_capacity),
        AppendLedgerLine(node.name, found.reason, entry.format(), s.ledger_configmap),
        job,
    )


def return_gate(snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    now = dict(snap.prom.admission_now).get(node.name)
    if c.reason != ledger.ADMISSION_REJECTED or now is None:
        return ()
    detail = f"{now} GPU pods still rejected at admission within {s.admission_rejected_window_s}s"
    return _waits(node, ledger.ADMISSION_REJECTED, detail, "kubelet admits GPU pods")


def fabric_gate(snap: Snapshot, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    """The fabric's return: every GPU of the node in Fabric Manager status Success again."""
    if c.reason != ledger.FABRIC or node.name not in snap.prom.fabric_not_success:
        return ()
    detail = "a GPU of the node is not in Fabric Manager status Success"
    return _waits(node, ledger.FABRIC, detail, "the fabric has trained")


def _waits(node: NodeInfo, reason: Reason, detail: str, until: str) -> tuple[Skip]:
    then = f"checked again next cycle; the load test waits until {until}"
    return (Skip(node.name, reason, detail, then, "WARN"),)
