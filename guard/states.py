"""The runbook state of each planner decision: one table for `status`, the pushed metrics and the
log lines' ``next=``.

A decision is named by a word: a `Skip`'s reason (``same-boot``), the reason of the action the
return check plans next (``repeat-fault`` for its `SetHold`), or ``<kind>-starting`` for the
Job it would create (`guard.status.derive.decision_word`). `STATES` maps the word to the
state, a `guard.runbook.Section`, whose anchor is the state's name everywhere.

To add a state (a new planner decision a person should know about):
  1. a `Section` in guard/runbook.py and its section in docs/runbook.md (tests/unit/test_runbook.py)
  2. its value in the `state` row of docs/metrics.md (tests/unit/test_metric_names.py)
  3. its decision words below.
A word not in the table still works: `status` shows it verbatim as the state (with the planner's
detail and next step), the push counts it under that word, and its log line has no anchor.

>>> state_of("same-boot")
<Section.WAITING_FOR_POWER_CYCLE: 'isolated-waiting-for-power-cycle'>
>>> anchored("checked again next cycle", "gpu-count")
'checked again next cycle (docs/runbook.md#return-condition-not-met)'
>>> anchored("stays cordoned", "a-new-word")
'stays cordoned'
"""

from __future__ import annotations

from guard.runbook import CYCLE_CONDITIONS, DEFAULT_BASE_URL, Section, url

S = Section
STATES: dict[str, Section] = {
    # The return check, in the order of its conditions (guard/plan/returning.py).
    "hold": S.HELD_BY_A_PERSON,
    "repeat-fault-hold": S.REPEAT_FAULT_HOLD,  # a hold the guard set itself
    "same-boot": S.WAITING_FOR_POWER_CYCLE,
    "waiting-reset": S.WAITING_FOR_RESET_DONE,
    "boot-unknown": S.WAITING_FOR_RESET_DONE,  # no proof of a reboot: reset-done stands in
    "not-ready": S.RETURN_CONDITION_NOT_MET,
    "gpu-count": S.RETURN_CONDITION_NOT_MET,
    "xid-present": S.RETURN_CONDITION_NOT_MET,
    "row-remap": S.RETURN_CONDITION_NOT_MET,
    "gpu-pods-running": S.RETURN_CONDITION_NOT_MET,
    "nvml-mismatch": S.ISOLATED_DRIVER_MISMATCH,  # the agent says FAIL (guard/plan/mismatch.py)
    "nvml-unconfirmed": S.ISOLATED_DRIVER_MISMATCH,  # … or not PASS yet after the reboot
    "service-network-not-ready": S.WAITING_FOR_SERVICE_NETWORK,
    "repeat-fault": S.REPEAT_FAULT_HOLD,  # the SetHold it plans
    "loadtest-starting": S.LOAD_TEST_RUNNING,  # conditions met: the next cycle creates the Job
    "loadtest-running": S.LOAD_TEST_RUNNING,
    "loadtest-passed": S.LOAD_TEST_RUNNING,  # the Job succeeded: the next cycle uncordons
    "loadtest-failed": S.LOAD_TEST_FAILED,
    "loadtest-unreadable": S.JOB_RESULT_UNREADABLE,  # succeeded, but no summary saying pass
    # A Job found by name that the guard did not make (docs/lifecycle.md, "Job results").
    "loadtest-foreign": S.JOB_NOT_MADE_BY_THE_GUARD,
    "conformance-foreign": S.JOB_NOT_MADE_BY_THE_GUARD,
    "onboarding-foreign": S.JOB_NOT_MADE_BY_THE_GUARD,
    "boot-check-foreign": S.JOB_NOT_MADE_BY_THE_GUARD,
    "human-uncordon": S.CANCELLED_BY_A_PERSON,  # the next cycle records the cancel
    # The isolation check and the records a node keeps after the guard let it go.
    "cancelled": S.CANCELLED_BY_A_PERSON,
    "returned": S.RETURNED_RECENTLY,
    "breaker-open": S.BREAKER_OPEN,
    "no-gpu-resource": S.FAULTED_NOT_CORDONABLE,  # the API would refuse the guard's cordon
    "service-network-not-applicable": S.SERVICE_NETWORK_NOT_APPLICABLE,
    # What the guard cannot read (guard/plan/unreadable.py).
    "unreadable": S.UNREADABLE_ANNOTATIONS,
    # The lifecycle checks (guard/plan/boot_check.py, onboarding.py, returning.py).
    "boot-check-running": S.AFTER_REBOOT_CHECK_RUNNING,
    "boot-check-passed": S.AFTER_REBOOT_CHECK_RUNNING,  # the next cycle records the boot
    "boot-check-unreadable": S.JOB_RESULT_UNREADABLE,
    "boot-check-queued": S.AFTER_REBOOT_CHECKS_QUEUED,
    "conformance-same-boot": S.CORDONED_FOR_CONFORMANCE,
    "onboarding-starting": S.ONBOARDING_PENDING,  # the next cycle creates a gate Job
    "onboarding-waiting": S.ONBOARDING_PENDING,
    "onboarding-running": S.ONBOARDING_PENDING,
    "onboarding-no-boot-id": S.ONBOARDING_PENDING,
    "onboarding-passed": S.ONBOARDING_PENDING,  # the next cycle removes the taint
    "onboarding-failed": S.ONBOARDING_FAILED,
    "onboarding-unreadable": S.JOB_RESULT_UNREADABLE,
    "conformance-unreadable": S.JOB_RESULT_UNREADABLE,
}
# The lifecycle checks' words that give a node without the guard's cordon a row of its own.
LIFECYCLE_ROWS = frozenset(
    w for w, state in STATES.items()
    if state in (S.AFTER_REBOOT_CHECK_RUNNING, S.JOB_RESULT_UNREADABLE, S.ONBOARDING_PENDING,
                 S.ONBOARDING_FAILED, S.JOB_NOT_MADE_BY_THE_GUARD)
)  # fmt: skip

# Node states (everything but the cycle conditions), in runbook order: the push's `state` values.
NODE_STATES = tuple(s for s in Section if s not in CYCLE_CONDITIONS)


def state_of(word: str) -> Section | None:
    return STATES.get(word)


def anchored(text: str, word: str) -> str:
    """A log line's ``next=`` with the runbook section of the decision's state, if it has one."""
    state = STATES.get(word)
    return f"{text} ({url(DEFAULT_BASE_URL, state)})" if state is not None else text
