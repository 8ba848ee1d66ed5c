"""Sections of docs/runbook.md: one per guard state, one per alert, at anchors that never change.

The anchors are a contract (alert rules, log lines, `status` and old notifications link them): add
sections, never rename or remove one. Each anchor is the GitHub slug of its heading
(tests/unit/test_runbook.py checks docs/runbook.md has every one); every link is `url(base,
anchor)` with the site's absolute base (GUARD_RUNBOOK_BASE_URL, default PUBLISHED_URL)."""

from __future__ import annotations

from enum import StrEnum

# The project's own runbook, absolute so a pager link opens; a site sets its own copy
# (GUARD_RUNBOOK_BASE_URL, docs/alerts.md).
PUBLISHED_URL = "https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md"


class Section(StrEnum):
    """A node state (the words `gpu-node-guard status` shows) or a cycle condition."""

    WAITING_FOR_POWER_CYCLE = "isolated-waiting-for-power-cycle"
    WAITING_FOR_RESET_DONE = "waiting-for-reset-done"
    RETURN_CONDITION_NOT_MET = "return-condition-not-met"
    WAITING_FOR_THE_EVIDENCE_JOB = "waiting-for-the-evidence-job"
    LOAD_TEST_RUNNING = "load-test-running"
    LOAD_TEST_FAILED = "load-test-failed"
    HELD_BY_A_PERSON = "held-by-a-person"
    REPEAT_FAULT_HOLD = "repeat-fault-hold"
    CANCELLED_BY_A_PERSON = "cancelled-by-a-person"
    RETURNED_RECENTLY = "returned-in-the-last-24-h"
    BREAKER_OPEN = "breaker-open"
    UNREADABLE_ANNOTATIONS = "unreadable-annotations"
    FAULTED_NOT_CORDONABLE = "faulted-but-not-cordonable"
    # The lifecycle checks (docs/lifecycle.md, docs/onboarding.md).
    AFTER_REBOOT_CHECK_RUNNING = "after-reboot-check-running"
    CORDONED_FOR_CONFORMANCE = "cordoned-for-conformance"
    ONBOARDING_PENDING = "onboarding-pending"
    ONBOARDING_FAILED = "onboarding-failed"
    AFTER_REBOOT_CHECKS_QUEUED = "after-reboot-checks-queued"
    JOB_RESULT_UNREADABLE = "job-result-unreadable"
    JOB_NOT_MADE_BY_THE_GUARD = "job-not-made-by-the-guard"
    JOB_REJECTED_BY_THE_NODE = "job-rejected-by-the-node"
    # Node signals: a driver/NVML mismatch cordon, a return waiting for kube-proxy
    # or the CNI, and the cycle line when the cluster runs none of the selected pods.
    ISOLATED_DRIVER_MISMATCH = "isolated-for-a-driver-mismatch"
    WAITING_FOR_SERVICE_NETWORK = "waiting-for-the-service-network"
    SERVICE_NETWORK_NOT_APPLICABLE = "service-network-not-applicable"
    # The node triggers without an Xid (guard/plan/triggers, docs/triggers.md).
    ISOLATED_REJECTING_GPU_PODS = "isolated-for-rejecting-gpu-pods"
    ISOLATED_FOR_A_FABRIC_FAULT = "isolated-for-a-fabric-fault"
    FABRIC_NOT_APPLICABLE = "fabric-not-applicable"
    # The host fence of a cordon's GPU (docs/isolation.md).
    LIFTING_THE_GPU_FENCE = "lifting-the-gpu-fence"
    GPU_FENCE_LIFT_FAILED = "gpu-fence-lift-failed"
    GPU_FENCE_NOT_SET = "gpu-fence-not-set"
    # DRA nodes: one GPU isolated by the guard's DeviceTaintRule, the node in service.
    DEVICE_TAINTED = "device-tainted"
    DEVICE_REPEAT_FAULT = "device-repeat-fault"
    # An isolation older than its verdict's quarantine budget (guard/plan/budget.py).
    PAST_ITS_BUDGET = "isolated-past-its-budget"


# Conditions of a whole cycle, not states of a node (the pushed `gpu_node_guard_nodes{state}`
# has every other section).
CYCLE_CONDITIONS = frozenset(
    {
        Section.BREAKER_OPEN,
        Section.SERVICE_NETWORK_NOT_APPLICABLE,
        Section.FABRIC_NOT_APPLICABLE,
        Section.AFTER_REBOOT_CHECKS_QUEUED,
    }
)


def alert_anchor(alert: str) -> str:
    """An alert's section is its name as a heading: `## GPUHardwareXid` → ``gpuhardwarexid``."""
    return alert.lower()


def url(base: str, anchor: str) -> str:
    """The link to one section: the alerts' runbook_url, the log's and status' hints."""
    return f"{base}#{anchor}"


class Hint(str):
    """A log line's ``next=`` text with its runbook section: as a string it links the published
    runbook; the Log writes it with the site's base (`at`), which the action does not know."""

    text: str
    anchor: str

    def __new__(cls, text: str, anchor: str) -> Hint:
        hint = super().__new__(cls, f"{text} ({url(PUBLISHED_URL, anchor)})")
        hint.text, hint.anchor = text, anchor
        return hint

    def at(self, base: str) -> str:
        return f"{self.text} ({url(base, self.anchor)})"
