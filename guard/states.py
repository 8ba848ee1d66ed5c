"""The runbook state of each planner decision: one table for `status`, the pushed metrics and the
log lines' ``next=``.

A decision is named by a word of `Decision` (below): a `Skip`'s reason (``same-boot``), the
reason of the action the return check plans next (``repeat-fault`` for its `SetHold`), or
``<kind>-starting`` for the Job it would create (`guard.status.derive.decision_word`). `STATES`
maps the word to the state, a `guard.runbook.Section`, whose anchor is the state's name
everywhere.

To add a state (a new planner decision a person should know about):
  1. a `Section` in guard/runbook.py and its section in docs/runbook.md (tests/unit/test_runbook.py)
  2. its value in the `state` row of docs/metrics.md (tests/unit/test_metric_names.py)
  3. its decision words below (a new word joins `Decision` first).
A word not in the table still works: `status` shows it verbatim as the state (with the planner's
detail and next step), the push counts it under that word, and its log line has no anchor.

>>> Decision("same-boot") is Decision.SAME_BOOT, is_decision("xid-79"), is_decision("maybe")
(True, True, False)
>>> state_of("same-boot")
<Section.WAITING_FOR_POWER_CYCLE: 'isolated-waiting-for-power-cycle'>
>>> anchored("checked again next cycle", "gpu-count")
'checked again next cycle (https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#return-condition-not-met)'
>>> anchored("stays cordoned", "a-new-word")
'stays cordoned'
"""

from __future__ import annotations

import re
from enum import StrEnum

from guard.runbook import CYCLE_CONDITIONS, Hint, Section

# ── The decision words ────────────────────────────────────────────────────────────────────
# Every decision word of the guard: the reason of each action and `Skip` the planners make,
# which the log lines, ``--output json``, `STATES` (the runbook anchors) and the
# push's node states speak. One closed set: tests/unit/test_decisions.py fails on a word in
# guard/plan/ that is not one of them.
#
# Two families are open by construction and have one builder each: a hardware fault's cordon
# ``xid-<code>`` (`xid_reason`) and a conformance failure's ``conformance-<item>``
# (`conformance_reason`, an item word of the conformance program).
#


class Decision(StrEnum):
    # The return check, in the order of its conditions (guard/plan/returning.py).
    HOLD = "hold"
    REPEAT_FAULT_HOLD = "repeat-fault-hold"
    SAME_BOOT = "same-boot"
    WAITING_RESET = "waiting-reset"
    BOOT_UNKNOWN = "boot-unknown"
    NOT_READY = "not-ready"
    GPU_COUNT = "gpu-count"
    XID_PRESENT = "xid-present"
    ROW_REMAP = "row-remap"
    GPU_PODS_RUNNING = "gpu-pods-running"
    NVML_MISMATCH = "nvml-mismatch"
    NVML_UNCONFIRMED = "nvml-unconfirmed"
    SERVICE_NETWORK_NOT_READY = "service-network-not-ready"
    SERVICE_NETWORK_NOT_APPLICABLE = "service-network-not-applicable"
    REPEAT_FAULT = "repeat-fault"
    EVIDENCE_MISSING = "evidence-missing"
    EVIDENCE_RUNNING = "evidence-running"
    PCIE_LINKS = "pcie-links"
    REPAIR_EVENT = "repair-event"
    REPAIR_EVIDENCE = "repair-evidence"
    REPAIR_LEDGER = "repair-ledger"
    CONDITIONS_MET = "conditions-met"
    LOADTEST_STARTING = "loadtest-starting"
    # The node triggers without an Xid (guard/plan/triggers).
    ADMISSION_REJECTED = "admission-rejected"  # the return waits: GPU pods still refused
    FABRIC = "fabric"  # the return waits: a GPU's fabric is not in Success
    FABRIC_NOT_APPLICABLE = "fabric-not-applicable"  # the run's line: no fabric status at all
    ONBOARDING_GPU_SHORT = "onboarding-gpu-short"  # the gate: below its class's GPU count
    LOADTEST_RUNNING = "loadtest-running"
    LOADTEST_PASSED = "loadtest-passed"
    LOADTEST_FAILED = "loadtest-failed"
    LOADTEST_UNREADABLE = "loadtest-unreadable"
    LOADTEST_FOREIGN = "loadtest-foreign"
    CONFORMANCE_STARTING = "conformance-starting"
    CONFORMANCE_RUNNING = "conformance-running"
    CONFORMANCE_PASSED = "conformance-passed"
    CONFORMANCE_FAILED = "conformance-failed"
    CONFORMANCE_UNREADABLE = "conformance-unreadable"
    CONFORMANCE_FOREIGN = "conformance-foreign"
    CONFORMANCE_SAME_BOOT = "conformance-same-boot"
    HUMAN_UNCORDON = "human-uncordon"
    RETURNED = "returned"
    # The isolation check.
    CANCELLED = "cancelled"
    BREAKER_OPEN = "breaker-open"
    ONE_PER_CYCLE = "one-per-cycle"
    NOT_IN_API = "not-in-api"
    ALREADY_CORDONED = "already-cordoned"
    ALREADY_GUARDED = "already-guarded"
    NO_GPU_RESOURCE = "no-gpu-resource"
    EVIDENCE_NO_PCI = "evidence-no-pci"  # cordoned without an evidence Job (no pci_bus_id)
    WORKLOAD_NOTIFIED = "workload-notified"  # a pod on the isolated GPU told (plan/workload.py)
    DOMAIN_INCIDENT = "domain-incident"  # nodes of one failure domain (guard/plan/domain.py)
    # DRA nodes: a device taint instead of the cordon (guard/plan/device_taint.py).
    DEVICE_ISOLATED = "device-isolated"
    DEVICE_UNPUBLISHED = "device-unpublished"  # a DRA node's faulted GPU no device names
    DEVICE_WAITING_RESET = "device-waiting-reset"
    DEVICE_NOT_PUBLISHED = "device-not-published"
    DEVICE_REPEAT_FAULT = "device-repeat-fault"
    DEVICE_RECORD_REPAIR = "device-record-repair"
    DEVICE_RULE_UNREADABLE = "device-rule-unreadable"
    DEVICE_RETURNED = "device-returned"
    # An isolation past its verdict's quarantine budget (guard/plan/budget.py).
    PAST_BUDGET = "past-budget"
    # What the guard cannot read (guard/plan/unreadable.py).
    UNREADABLE = "unreadable"
    LEDGER_UNREADABLE = "ledger-unreadable"
    OBJECT_UNREADABLE = "object-unreadable"
    UNREADABLE_EVENTS_LATER = "unreadable-events-later"
    # The lifecycle checks (guard/plan/boot_check.py, onboarding.py, check_jobs.py).
    NEW_BOOT = "new-boot"
    NEVER_CHECKED = "never-checked"
    BOOT_CHECK = "boot-check"
    BOOT_CHECK_STARTING = "boot-check-starting"
    BOOT_CHECK_RUNNING = "boot-check-running"
    BOOT_CHECK_PASSED = "boot-check-passed"
    BOOT_CHECK_UNREADABLE = "boot-check-unreadable"
    BOOT_CHECK_FOREIGN = "boot-check-foreign"
    BOOT_CHECK_QUEUED = "boot-check-queued"
    BOOT_CHECK_DEFERRED = "boot-check-deferred"
    BOOT_CHECK_NO_BOOT_ID = "boot-check-no-boot-id"
    ONBOARDING = "onboarding"
    ONBOARDING_STARTING = "onboarding-starting"
    ONBOARDING_WAITING = "onboarding-waiting"
    ONBOARDING_RUNNING = "onboarding-running"
    ONBOARDING_NO_BOOT_ID = "onboarding-no-boot-id"
    ONBOARDING_PASSED = "onboarding-passed"
    ONBOARDING_FAILED = "onboarding-failed"
    ONBOARDING_UNREADABLE = "onboarding-unreadable"
    ONBOARDING_FOREIGN = "onboarding-foreign"
    ONBOARDED = "onboarded"
    # The host fence of the cordon's GPU (guard/plan/fence.py, docs/isolation.md).
    FENCE_SET = "fence-set"
    FENCE_REAPPLY = "fence-reapply"
    FENCE_STARTING = "fence-starting"
    FENCE_RUNNING = "fence-running"
    FENCE_UNREADABLE = "fence-unreadable"
    FENCE_FOREIGN = "fence-foreign"
    FENCE_JOB_FOREIGN = "fence-job-foreign"  # a fence Job no record explains (fence_audit.py)
    # A lift Job the guard did not make, after its `fenced` record: the host may be unfenced.
    FENCE_LIFTED_FOREIGN = "fence-lifted-foreign"
    FENCED = "fenced"
    FENCE_GPU_ABSENT = "fence-gpu-absent"
    FENCE_FAILED = "fence-failed"
    FENCE_LIFT = "fence-lift"
    FENCE_LIFT_RUNNING = "fence-lift-running"
    FENCE_LIFTED = "fence-lifted"
    FENCE_LIFT_FAILED = "fence-lift-failed"
    # A guard Job whose Pod the node's kubelet refused (guard/plan/check_jobs.py), any kind.
    JOB_REJECTED = "job-rejected"
    # The executor's own planned writes (guard/apply/__init__.py, guard/plan/common.py).
    JOB_RECORDED = "job-recorded"
    LEDGER_ARCHIVED = "ledger-archived"


# The Job kinds' words `<kind>-<stage>` (guard/plan/return_jobs.py builds them from the kind).
JOB_STAGES = ("starting", "running", "passed", "failed", "unreadable", "foreign")
_XID = re.compile(r"xid-[1-9][0-9]{0,3}")
_CONFORMANCE = re.compile(r"conformance-[a-z0-9]+(-[a-z0-9]+)*")


def xid_reason(code: int) -> str:
    """The cordon reason of a hardware Xid."""
    return f"xid-{code}"


def conformance_reason(item: str) -> str:
    """The cordon reason of a failed conformance item (an item word, guard.codec.check_records)."""
    return f"conformance-{item}"


def is_decision(word: str) -> bool:
    """A word of the closed set or of one of its two families."""
    return word in Decision._value2member_map_ or bool(
        _XID.fullmatch(word) or _CONFORMANCE.fullmatch(word)
    )


S = Section
D = Decision
STATES: dict[str, Section] = {  # keys: Decision members
    # The return check, in the order of its conditions (guard/plan/returning.py).
    D.HOLD: S.HELD_BY_A_PERSON,
    D.REPEAT_FAULT_HOLD: S.REPEAT_FAULT_HOLD,  # a hold the guard set itself
    D.SAME_BOOT: S.WAITING_FOR_POWER_CYCLE,
    D.WAITING_RESET: S.WAITING_FOR_RESET_DONE,
    D.BOOT_UNKNOWN: S.WAITING_FOR_RESET_DONE,  # no proof of a reboot: reset-done stands in
    D.NOT_READY: S.RETURN_CONDITION_NOT_MET,
    D.GPU_COUNT: S.RETURN_CONDITION_NOT_MET,
    D.XID_PRESENT: S.RETURN_CONDITION_NOT_MET,
    D.ROW_REMAP: S.RETURN_CONDITION_NOT_MET,
    D.GPU_PODS_RUNNING: S.RETURN_CONDITION_NOT_MET,
    D.NVML_MISMATCH: S.ISOLATED_DRIVER_MISMATCH,  # the agent says FAIL (guard/plan/mismatch.py)
    D.NVML_UNCONFIRMED: S.ISOLATED_DRIVER_MISMATCH,  # … or not PASS yet after the reboot
    D.SERVICE_NETWORK_NOT_READY: S.WAITING_FOR_SERVICE_NETWORK,
    D.ADMISSION_REJECTED: S.ISOLATED_REJECTING_GPU_PODS,
    D.FABRIC: S.ISOLATED_FOR_A_FABRIC_FAULT,
    D.FABRIC_NOT_APPLICABLE: S.FABRIC_NOT_APPLICABLE,
    D.ONBOARDING_GPU_SHORT: S.ONBOARDING_PENDING,
    D.EVIDENCE_RUNNING: S.WAITING_FOR_THE_EVIDENCE_JOB,  # its PCIe links go to the load test
    D.REPEAT_FAULT: S.REPEAT_FAULT_HOLD,  # the SetHold it plans
    D.LOADTEST_STARTING: S.LOAD_TEST_RUNNING,  # conditions met: the next cycle creates the Job
    D.LOADTEST_RUNNING: S.LOAD_TEST_RUNNING,
    D.LOADTEST_PASSED: S.LOAD_TEST_RUNNING,  # the Job succeeded: the next cycle uncordons
    D.LOADTEST_FAILED: S.LOAD_TEST_FAILED,
    D.LOADTEST_UNREADABLE: S.JOB_RESULT_UNREADABLE,  # succeeded, but no summary saying pass
    # A Job found by name that the guard did not make (docs/lifecycle.md, "Job results").
    D.LOADTEST_FOREIGN: S.JOB_NOT_MADE_BY_THE_GUARD,
    D.CONFORMANCE_FOREIGN: S.JOB_NOT_MADE_BY_THE_GUARD,
    D.ONBOARDING_FOREIGN: S.JOB_NOT_MADE_BY_THE_GUARD,
    D.BOOT_CHECK_FOREIGN: S.JOB_NOT_MADE_BY_THE_GUARD,
    D.HUMAN_UNCORDON: S.CANCELLED_BY_A_PERSON,  # the next cycle records the cancel
    # The isolation check and the records a node keeps after the guard let it go.
    D.CANCELLED: S.CANCELLED_BY_A_PERSON,
    D.RETURNED: S.RETURNED_RECENTLY,
    D.BREAKER_OPEN: S.BREAKER_OPEN,
    D.NO_GPU_RESOURCE: S.FAULTED_NOT_CORDONABLE,  # the API would refuse the guard's cordon
    D.DEVICE_UNPUBLISHED: S.FAULTED_NOT_CORDONABLE,  # no device to taint, no cordon either
    D.SERVICE_NETWORK_NOT_APPLICABLE: S.SERVICE_NETWORK_NOT_APPLICABLE,
    # What the guard cannot read (guard/plan/unreadable.py).
    D.UNREADABLE: S.UNREADABLE_ANNOTATIONS,
    # The lifecycle checks (guard/plan/boot_check.py, onboarding.py, returning.py).
    D.BOOT_CHECK_RUNNING: S.AFTER_REBOOT_CHECK_RUNNING,
    D.BOOT_CHECK_PASSED: S.AFTER_REBOOT_CHECK_RUNNING,  # the next cycle records the boot
    D.BOOT_CHECK_UNREADABLE: S.JOB_RESULT_UNREADABLE,
    D.BOOT_CHECK_QUEUED: S.AFTER_REBOOT_CHECKS_QUEUED,
    D.CONFORMANCE_SAME_BOOT: S.CORDONED_FOR_CONFORMANCE,
    D.ONBOARDING_STARTING: S.ONBOARDING_PENDING,  # the next cycle creates a gate Job
    D.ONBOARDING_WAITING: S.ONBOARDING_PENDING,
    D.ONBOARDING_RUNNING: S.ONBOARDING_PENDING,
    D.ONBOARDING_NO_BOOT_ID: S.ONBOARDING_PENDING,
    D.ONBOARDING_PASSED: S.ONBOARDING_PENDING,  # the next cycle removes the taint
    D.ONBOARDING_FAILED: S.ONBOARDING_FAILED,
    D.ONBOARDING_UNREADABLE: S.JOB_RESULT_UNREADABLE,
    D.CONFORMANCE_UNREADABLE: S.JOB_RESULT_UNREADABLE,
    # The host fence (guard/plan/fence.py): its lift is the return's step before the load test.
    D.FENCE_STARTING: S.LIFTING_THE_GPU_FENCE,  # the lift Job the return would create
    D.FENCE_LIFT: S.LIFTING_THE_GPU_FENCE,
    D.FENCE_LIFT_RUNNING: S.LIFTING_THE_GPU_FENCE,
    D.FENCE_LIFTED: S.LIFTING_THE_GPU_FENCE,  # the next cycle creates the load test
    D.FENCE_LIFT_FAILED: S.GPU_FENCE_LIFT_FAILED,
    D.FENCE_RUNNING: S.LIFTING_THE_GPU_FENCE,  # a set Job of this boot ends before the lift
    D.FENCED: S.LIFTING_THE_GPU_FENCE,  # … and is recorded: the lift next cycle
    D.FENCE_FAILED: S.GPU_FENCE_NOT_SET,
    D.FENCE_GPU_ABSENT: S.GPU_FENCE_NOT_SET,
    D.FENCE_UNREADABLE: S.JOB_RESULT_UNREADABLE,
    D.FENCE_FOREIGN: S.JOB_NOT_MADE_BY_THE_GUARD,
    D.FENCE_JOB_FOREIGN: S.JOB_NOT_MADE_BY_THE_GUARD,
    D.FENCE_LIFTED_FOREIGN: S.GPU_FENCE_NOT_SET,
    # DRA nodes (guard/plan/device_taint.py).
    D.DEVICE_ISOLATED: S.DEVICE_TAINTED,
    D.DEVICE_WAITING_RESET: S.DEVICE_TAINTED,
    D.DEVICE_NOT_PUBLISHED: S.DEVICE_TAINTED,
    D.DEVICE_RECORD_REPAIR: S.DEVICE_TAINTED,
    D.DEVICE_REPEAT_FAULT: S.DEVICE_REPEAT_FAULT,
    D.DEVICE_RULE_UNREADABLE: S.DEVICE_REPEAT_FAULT,
    D.DEVICE_RETURNED: S.RETURNED_RECENTLY,
    D.JOB_REJECTED: S.JOB_REJECTED_BY_THE_NODE,
    D.PAST_BUDGET: S.PAST_ITS_BUDGET,
}
# The lifecycle checks' words that give a node without the guard's cordon a row of its own.
LIFECYCLE_ROWS = frozenset(
    w
    for w, state in STATES.items()
    if state
    in (
        S.AFTER_REBOOT_CHECK_RUNNING,
        S.JOB_RESULT_UNREADABLE,
        S.ONBOARDING_PENDING,
        S.ONBOARDING_FAILED,
        S.JOB_NOT_MADE_BY_THE_GUARD,
        S.JOB_REJECTED_BY_THE_NODE,
    )
)

# Node states (everything but the cycle conditions), in runbook order: the push's `state` values.
NODE_STATES = tuple(s for s in Section if s not in CYCLE_CONDITIONS)


def state_of(word: str) -> Section | None:
    return STATES.get(word)


def anchored(text: str, word: str) -> str:
    """A log line's ``next=`` with the runbook section of the decision's state, if it has one
    (a `Hint`: the Log links the site's runbook, GUARD_RUNBOOK_BASE_URL)."""
    state = STATES.get(word)
    return Hint(text, state) if state is not None else text
