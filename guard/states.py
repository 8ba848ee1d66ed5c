"""The decision words and the runbook state of each: one table for `status`, the pushed metrics
and the log lines' ``next=``. To add a word or a state: docs/architecture.md, "Name the decision".
A word without a state still works: `status` shows it verbatim, the push counts it under that
word, and its log line has no anchor."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal, NewType

from guard.runbook import CYCLE_CONDITIONS, Hint, Section

S = Section

# One closed set, held by the type: an action's reason is a `Reason`, so mypy refuses any other
# word. The open families have one builder each, the only makers of a `FaultReason`:
# ``xid-<code>`` (`xid_reason`), ``conformance-<item>`` (`conformance_reason`) and a guard Job's
# ``<kind>-<stage>`` (`job_stage`); a word read back from a record is checked (`as_reason`).


class Decision(StrEnum):
    """A decision word, and the runbook state it speaks of (None: no state of its own)."""

    _value_: str
    state: Section | None

    def __new__(cls, word: str, state: Section | None = None) -> Decision:
        member = str.__new__(cls, word)
        member._value_ = word
        member.state = state
        return member

    # The return check, in the order of its conditions (guard/plan/returning.py).
    HOLD = "hold", S.HELD_BY_A_PERSON
    REPEAT_FAULT_HOLD = "repeat-fault-hold", S.REPEAT_FAULT_HOLD  # a hold the guard set itself
    SAME_BOOT = "same-boot", S.WAITING_FOR_POWER_CYCLE
    WAITING_RESET = "waiting-reset", S.WAITING_FOR_RESET_DONE
    # no proof of a reboot: reset-done stands in
    BOOT_UNKNOWN = "boot-unknown", S.WAITING_FOR_RESET_DONE
    NOT_READY = "not-ready", S.RETURN_CONDITION_NOT_MET
    GPU_COUNT = "gpu-count", S.RETURN_CONDITION_NOT_MET
    XID_PRESENT = "xid-present", S.RETURN_CONDITION_NOT_MET
    ROW_REMAP = "row-remap", S.RETURN_CONDITION_NOT_MET
    GPU_PODS_RUNNING = "gpu-pods-running", S.RETURN_CONDITION_NOT_MET
    # the agent says FAIL (guard/plan/mismatch.py)
    NVML_MISMATCH = "nvml-mismatch", S.ISOLATED_DRIVER_MISMATCH
    # … or not PASS yet after the reboot
    NVML_UNCONFIRMED = "nvml-unconfirmed", S.ISOLATED_DRIVER_MISMATCH
    SERVICE_NETWORK_NOT_READY = "service-network-not-ready", S.WAITING_FOR_SERVICE_NETWORK
    SERVICE_NETWORK_NOT_APPLICABLE = (
        "service-network-not-applicable",
        S.SERVICE_NETWORK_NOT_APPLICABLE,
    )
    REPEAT_FAULT = "repeat-fault", S.REPEAT_FAULT_HOLD  # the SetHold it plans
    EVIDENCE_MISSING = "evidence-missing"
    # its PCIe links go to the load test
    EVIDENCE_RUNNING = "evidence-running", S.WAITING_FOR_THE_EVIDENCE_JOB
    PCIE_LINKS = "pcie-links"
    REPAIR_EVENT = "repair-event"
    REPAIR_EVIDENCE = "repair-evidence"
    REPAIR_LEDGER = "repair-ledger"
    CONDITIONS_MET = "conditions-met"
    # conditions met: the next cycle creates the Job
    LOADTEST_STARTING = "loadtest-starting", S.LOAD_TEST_RUNNING
    # The node triggers without an Xid (guard/plan/triggers).
    # the return waits: GPU pods still refused
    ADMISSION_REJECTED = "admission-rejected", S.ISOLATED_REJECTING_GPU_PODS
    GPU_SHORT = "gpu-short"  # a node below its class's GPU count (the return checks it again)
    # the return waits: a GPU's fabric is not in Success
    FABRIC = "fabric", S.ISOLATED_FOR_A_FABRIC_FAULT
    # the run's line: no fabric status at all
    FABRIC_NOT_APPLICABLE = "fabric-not-applicable", S.FABRIC_NOT_APPLICABLE
    # the gate: below its class's GPU count
    ONBOARDING_GPU_SHORT = "onboarding-gpu-short", S.ONBOARDING_PENDING
    LOADTEST_RUNNING = "loadtest-running", S.LOAD_TEST_RUNNING
    # the Job succeeded: the next cycle uncordons
    LOADTEST_PASSED = "loadtest-passed", S.LOAD_TEST_RUNNING
    LOADTEST_FAILED = "loadtest-failed", S.LOAD_TEST_FAILED
    # succeeded, but no summary saying pass
    LOADTEST_UNREADABLE = "loadtest-unreadable", S.JOB_RESULT_UNREADABLE
    # A Job found by name that the guard did not make (docs/lifecycle.md, "Job results").
    LOADTEST_FOREIGN = "loadtest-foreign", S.JOB_NOT_MADE_BY_THE_GUARD
    CONFORMANCE_STARTING = "conformance-starting"
    CONFORMANCE_RUNNING = "conformance-running"
    CONFORMANCE_PASSED = "conformance-passed"
    CONFORMANCE_FAILED = "conformance-failed"
    CONFORMANCE_UNREADABLE = "conformance-unreadable", S.JOB_RESULT_UNREADABLE
    CONFORMANCE_FOREIGN = "conformance-foreign", S.JOB_NOT_MADE_BY_THE_GUARD
    CONFORMANCE_SAME_BOOT = "conformance-same-boot", S.CORDONED_FOR_CONFORMANCE
    HUMAN_UNCORDON = "human-uncordon", S.CANCELLED_BY_A_PERSON  # the next cycle records the cancel
    RETURNED = "returned", S.RETURNED_RECENTLY
    # The isolation check and the records a node keeps after the guard let it go.
    CANCELLED = "cancelled", S.CANCELLED_BY_A_PERSON
    BREAKER_OPEN = "breaker-open", S.BREAKER_OPEN
    ONE_PER_CYCLE = "one-per-cycle"
    NOT_IN_API = "not-in-api"
    ALREADY_CORDONED = "already-cordoned"
    ALREADY_GUARDED = "already-guarded"
    # the API would refuse the guard's cordon
    NO_GPU_RESOURCE = "no-gpu-resource", S.FAULTED_NOT_CORDONABLE
    EVIDENCE_NO_PCI = "evidence-no-pci"  # cordoned without an evidence Job (no pci_bus_id)
    WORKLOAD_NOTIFIED = "workload-notified"  # a pod on the isolated GPU told (plan/workload.py)
    DOMAIN_INCIDENT = "domain-incident"  # nodes of one failure domain (guard/plan/domain.py)
    # DRA nodes: a device taint instead of the cordon (guard/plan/device_taint.py).
    DEVICE_ISOLATED = "device-isolated", S.DEVICE_TAINTED
    # a DRA node's faulted GPU no device names: no device to taint, no cordon either
    DEVICE_UNPUBLISHED = "device-unpublished", S.FAULTED_NOT_CORDONABLE
    DEVICE_WAITING_RESET = "device-waiting-reset", S.DEVICE_TAINTED
    DEVICE_NOT_PUBLISHED = "device-not-published", S.DEVICE_TAINTED
    DEVICE_REPEAT_FAULT = "device-repeat-fault", S.DEVICE_REPEAT_FAULT
    DEVICE_RECORD_REPAIR = "device-record-repair", S.DEVICE_TAINTED
    DEVICE_RULE_UNREADABLE = "device-rule-unreadable", S.DEVICE_REPEAT_FAULT
    DEVICE_RETURNED = "device-returned", S.RETURNED_RECENTLY
    # An isolation past its verdict's quarantine budget (guard/plan/budget.py).
    PAST_BUDGET = "past-budget", S.PAST_ITS_BUDGET
    # What the guard cannot read (guard/plan/unreadable.py).
    UNREADABLE = "unreadable", S.UNREADABLE_ANNOTATIONS
    LEDGER_UNREADABLE = "ledger-unreadable"
    OBJECT_UNREADABLE = "object-unreadable"
    UNREADABLE_EVENTS_LATER = "unreadable-events-later"
    # The lifecycle checks (guard/plan/boot_check.py, onboarding.py, check_jobs.py).
    NEW_BOOT = "new-boot"
    NEVER_CHECKED = "never-checked"
    BOOT_CHECK = "boot-check"
    BOOT_CHECK_STARTING = "boot-check-starting"
    BOOT_CHECK_RUNNING = "boot-check-running", S.AFTER_REBOOT_CHECK_RUNNING
    # the next cycle records the boot
    BOOT_CHECK_PASSED = "boot-check-passed", S.AFTER_REBOOT_CHECK_RUNNING
    BOOT_CHECK_UNREADABLE = "boot-check-unreadable", S.JOB_RESULT_UNREADABLE
    BOOT_CHECK_FOREIGN = "boot-check-foreign", S.JOB_NOT_MADE_BY_THE_GUARD
    BOOT_CHECK_QUEUED = "boot-check-queued", S.AFTER_REBOOT_CHECKS_QUEUED
    BOOT_CHECK_DEFERRED = "boot-check-deferred"
    BOOT_CHECK_NO_BOOT_ID = "boot-check-no-boot-id"
    ONBOARDING = "onboarding"
    # the next cycle creates a gate Job
    ONBOARDING_STARTING = "onboarding-starting", S.ONBOARDING_PENDING
    ONBOARDING_WAITING = "onboarding-waiting", S.ONBOARDING_PENDING
    ONBOARDING_RUNNING = "onboarding-running", S.ONBOARDING_PENDING
    ONBOARDING_NO_BOOT_ID = "onboarding-no-boot-id", S.ONBOARDING_PENDING
    # the next cycle removes the taint
    ONBOARDING_PASSED = "onboarding-passed", S.ONBOARDING_PENDING
    ONBOARDING_FAILED = "onboarding-failed", S.ONBOARDING_FAILED
    ONBOARDING_UNREADABLE = "onboarding-unreadable", S.JOB_RESULT_UNREADABLE
    ONBOARDING_FOREIGN = "onboarding-foreign", S.JOB_NOT_MADE_BY_THE_GUARD
    ONBOARDED = "onboarded"
    # The host fence of the cordon's GPU (guard/plan/fence.py, docs/isolation.md): its lift is
    # the return's step before the load test.
    FENCE_SET = "fence-set"
    FENCE_REAPPLY = "fence-reapply"
    # the lift Job the return would create
    FENCE_STARTING = "fence-starting", S.LIFTING_THE_GPU_FENCE
    # a set Job of this boot ends before the lift
    FENCE_RUNNING = "fence-running", S.LIFTING_THE_GPU_FENCE
    FENCE_UNREADABLE = "fence-unreadable", S.JOB_RESULT_UNREADABLE
    FENCE_FOREIGN = "fence-foreign", S.JOB_NOT_MADE_BY_THE_GUARD
    # a fence Job no record explains (fence_audit.py)
    FENCE_JOB_FOREIGN = "fence-job-foreign", S.JOB_NOT_MADE_BY_THE_GUARD
    # A lift Job the guard did not make, after its `fenced` record: the host may be unfenced.
    FENCE_LIFTED_FOREIGN = "fence-lifted-foreign", S.GPU_FENCE_NOT_SET
    FENCED = "fenced", S.LIFTING_THE_GPU_FENCE  # a set Job recorded: the lift next cycle
    FENCE_GPU_ABSENT = "fence-gpu-absent", S.GPU_FENCE_NOT_SET
    FENCE_FAILED = "fence-failed", S.GPU_FENCE_NOT_SET
    FENCE_LIFT = "fence-lift", S.LIFTING_THE_GPU_FENCE
    FENCE_LIFT_RUNNING = "fence-lift-running", S.LIFTING_THE_GPU_FENCE
    FENCE_LIFTED = "fence-lifted", S.LIFTING_THE_GPU_FENCE  # the next cycle creates the load test
    FENCE_LIFT_FAILED = "fence-lift-failed", S.GPU_FENCE_LIFT_FAILED
    # A guard Job whose Pod the node's kubelet refused (guard/plan/check_jobs.py), any kind.
    JOB_REJECTED = "job-rejected", S.JOB_REJECTED_BY_THE_NODE
    # The executor's own planned writes (guard/apply/__init__.py, guard/plan/common.py).
    JOB_RECORDED = "job-recorded"
    LEDGER_ARCHIVED = "ledger-archived"


# The Job kinds' words `<kind>-<stage>` (guard/plan/return_jobs.py builds them from the kind).
JobStage = Literal["starting", "running", "passed", "failed", "unreadable", "foreign"]
_FAMILY = re.compile(r"xid-[1-9][0-9]{0,3}|conformance-[a-z0-9]+(-[a-z0-9]+)*")
FaultReason = NewType("FaultReason", str)  # a family's word, made only by its builder below
Reason = Decision | FaultReason


def _word(word: str) -> Reason:
    return Decision(word) if word in Decision._value2member_map_ else FaultReason(word)


def xid_reason(code: int) -> FaultReason:
    """The cordon reason of a hardware Xid."""
    return FaultReason(f"xid-{code}")


def conformance_reason(item: str) -> Reason:
    """The cordon reason of a failed conformance item (an item word, guard.codec.check_records)."""
    return _word(f"conformance-{item}")


def job_stage(kind: str, stage: JobStage) -> Reason:
    """The word of a guard Job of `kind` at `stage`: ``loadtest-running``."""
    return _word(f"{kind}-{stage}")


def as_reason(word: str) -> Reason | None:
    """A word read back (an annotation, a record): of the closed set or of the xid and
    conformance families; None for any other."""
    known = word in Decision._value2member_map_ or _FAMILY.fullmatch(word)
    return _word(word) if known else None


STATES: dict[str, Section] = {d: d.state for d in Decision if d.state is not None}
# The lifecycle checks' words that give a node without the guard's cordon a row of its own.
_LIFECYCLE = (
    S.AFTER_REBOOT_CHECK_RUNNING,
    S.JOB_RESULT_UNREADABLE,
    S.ONBOARDING_PENDING,
    S.ONBOARDING_FAILED,
    S.JOB_NOT_MADE_BY_THE_GUARD,
    S.JOB_REJECTED_BY_THE_NODE,
)
LIFECYCLE_ROWS = frozenset(w for w, state in STATES.items() if state in _LIFECYCLE)

# Node states (everything but the cycle conditions), in runbook order: the push's `state` values.
NODE_STATES = tuple(s for s in Section if s not in CYCLE_CONDITIONS)


def anchored(text: str, word: str) -> str:
    """A log line's ``next=`` with the runbook section of the decision's state, if it has one
    (a `Hint`: the Log links the site's runbook, GUARD_RUNBOOK_BASE_URL)."""
    state = STATES.get(word)
    return Hint(text, state) if state is not None else text
