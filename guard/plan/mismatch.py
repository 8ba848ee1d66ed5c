"""`nvml-mismatch`: cordon a node whose node agent says the loaded NVIDIA kernel module and the
NVML library on disk differ, once that has held; return it after a new boot where they match.
No ledger line and no evidence Job, and why: docs/node-signals.md, "Driver/NVML mismatch".
"""

from __future__ import annotations

from guard.actions import Action, Skip
from guard.model import CordonRecord, NodeInfo, Snapshot
from guard.plan import hold
from guard.plan.common import node_cordon
from guard.settings import Settings
from guard.states import Decision

NVML_MISMATCH = Decision.NVML_MISMATCH
CORDON_NEXT = (
    "let its GPU jobs end, reboot it into the installed driver; it returns after the load test"
)


def seen(snap: Snapshot, node: str) -> str:
    """What the agent saw on the node (its FAIL detail), for the Event and the log line."""
    failed = [a.detail for a in snap.prom.agent(node) if a.status == "FAIL" and a.detail]
    return failed[0] if failed else "nvidia-match FAIL"


def cordon(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Action, ...]:
    held = hold.nvml_held_s(snap.prom, node.name, snap.now)
    detail = seen(snap, node.name)
    message = (
        f"cordoned by gpu-node-guard: the NVIDIA kernel module and the NVML library differ "
        f"({detail}) for {held}s, so new CUDA and NVML processes fail here; {CORDON_NEXT}"
    )
    return node_cordon(snap, s, node, NVML_MISMATCH, ("", held, CORDON_NEXT, detail), message)


def return_gate(snap: Snapshot, s: Settings, node: NodeInfo, c: CordonRecord) -> tuple[Action, ...]:
    checks = snap.prom.agent(node.name)
    failed = [a for a in checks if a.status == "FAIL"]
    if failed:
        detail = f"node agent: nvidia-match FAIL ({failed[0].detail})"
        fix = "reboot it into the installed driver; no load test while they differ"
        return (Skip(node.name, NVML_MISMATCH, detail, fix, "WARN"),)
    if c.reason != NVML_MISMATCH or (checks and all(a.ok for a in checks)):
        return ()
    said = ", ".join(a.status for a in checks) or "no nvidia-match series"
    agent = (
        f"kubectl -n {s.jobs_namespace} get pods -l app.kubernetes.io/component=agent "
        f"--field-selector spec.nodeName={node.name}"
    )
    detail = f"node agent: {said}; an nvml-mismatch cordon returns once the agent reports PASS"
    fix = f"checked again next cycle; if it lasts, {agent}"
    return (Skip(node.name, Decision.NVML_UNCONFIRMED, detail, fix),)
