"""`nvml-mismatch`: cordon a node whose node agent says the loaded NVIDIA kernel module and the
NVML library on disk differ, once that has held; return it after a new boot where they match.

Isolation. The candidates are `guard.plan.hold.nvml_candidates` (nvidia-match FAILed at every
step for `Settings.nvml_hold_s`, decided like the GPU loss hold; not cordoned); the screen, the
breaker and the one cordon per cycle are the isolation check's (guard.plan.isolation). Case list:
  cordon off (--no-nvml-mismatch-cordon)   → nothing
  the node is also a hardware-Xid candidate → the Xid path decides (its line, its cordon)
  a person uncordoned this incident         → skip cancelled; a new boot re-arms
                                               (`cancelled`: <boot> - nvml-mismatch <time>)
  otherwise, after every hardware-Xid node (a GPU gone outranks a driver that fails only new
  processes), longest held first           → cordon: the guard's cordon annotations without a
                                               GPU, a Warning Event with the agent's detail
No ledger line: the fault ledger counts a card's (UUID) and a slot's (PCI) incidents to choose
inspect / replace / riser, and a repeat puts a hold on the node. A mismatch is the host's
software (a driver upgraded on disk without a reboot), names no card, and counted there it would
hold nodes for driver upgrades. No evidence Job: the agent's detail is the evidence (both
versions and the library's directory, from the files conformance's nvidia-match reads), carried
by the Event and the log line; Prometheus keeps `gpu_node_guard_agent_check_info` for the record.

Return (`return_gate`, for every guard cordon, after Ready and the GPU count; the new boot is the
common boot gate, which a cordon without an Xid always needs):
  the agent says nvidia-match FAIL now       → skip nvml-mismatch (WARN): no load test on a node
                                               whose new CUDA processes fail
  an nvml-mismatch cordon and the agent does not say PASS (or WARN) now — UNKNOWN, SKIP or no
  series at all                               → skip nvml-unconfirmed: absent is not ok
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
        return (
            Skip(
                node.name,
                NVML_MISMATCH,
                f"node agent: nvidia-match FAIL ({failed[0].detail})",
                "reboot it into the installed driver; no load test while they differ",
                "WARN",
            ),
        )
    if c.reason != NVML_MISMATCH or (checks and all(a.ok for a in checks)):
        return ()
    said = ", ".join(a.status for a in checks) or "no nvidia-match series"
    agent = (
        f"kubectl -n {s.jobs_namespace} get pods -l app.kubernetes.io/component=agent "
        f"--field-selector spec.nodeName={node.name}"
    )
    return (
        Skip(
            node.name,
            Decision.NVML_UNCONFIRMED,
            f"node agent: {said}; an nvml-mismatch cordon returns once the agent reports PASS",
            f"checked again next cycle; if it lasts, {agent}",
        ),
    )
