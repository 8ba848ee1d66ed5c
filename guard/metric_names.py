"""The metrics a guard run pushes to a Pushgateway at the end of its cycle: names, labels, help,
in the one list `PUSHED` (docs/metrics.md lists each; a unit test holds the two together).

Every metric is a gauge of the last run: a CronJob process lives for one cycle, so a per-run
count is replaced by the next push, never added to (hence no ``_total`` suffix).
"""

from __future__ import annotations

from dataclasses import dataclass

# The push's `job` and its grouping key: {job="gpu-node-guard", namespace=<Settings.namespace>}.
PUSH_JOB = "gpu-node-guard"
GROUPING_LABEL = "namespace"


@dataclass(frozen=True, slots=True)
class PushedMetric:
    name: str
    help: str
    labels: tuple[str, ...] = ()


_PUSHED: list[PushedMetric] = []


def _pushed(name: str, help: str, labels: tuple[str, ...] = ()) -> PushedMetric:
    metric = PushedMetric(name, help, labels)
    _PUSHED.append(metric)
    return metric


LAST_RUN = _pushed(
    "gpu_node_guard_last_run_timestamp_seconds", "Unix time the last run ended, whatever its result"
)
LAST_SUCCESS = _pushed(
    "gpu_node_guard_last_success_timestamp_seconds",
    "Unix time the last run that exited 0 ended; pushed by such runs only",
)
LAST_RUN_EXIT_CODE = _pushed(
    "gpu_node_guard_last_run_exit_code", "Exit code of the last run (0 ok, 1 abort or failed write)"
)
LAST_RUN_DURATION = _pushed(
    "gpu_node_guard_last_run_duration_seconds", "Wall time of the last run, start to push"
)
LAST_RUN_ACTIONS = _pushed(
    "gpu_node_guard_last_run_actions",
    "Writes of the last run by action type (cordon, uncordon, …) and outcome (applied, failed)",
    ("type", "outcome"),
)
PENDING_CANDIDATES = _pushed(
    "gpu_node_guard_pending_candidates",
    "GPUs with a hardware Xid whose GPU loss, and nodes whose driver/NVML mismatch, GPU count"
    " below their class's or GPU pods rejected at admission, has not held long enough yet"
    " (not cordoned)",
)
NODES = _pushed(
    "gpu_node_guard_nodes",
    "Nodes the guard holds or watches, by state (the node-state anchors of docs/runbook.md)",
    ("state",),
)
BREAKER_LIMIT = _pushed(
    "gpu_node_guard_breaker_limit_nodes",
    "Isolations (nodes cordoned + devices tainted) at which the breaker opens",
)
BREAKER_ISOLATIONS = _pushed(
    "gpu_node_guard_breaker_isolations",
    "What the breaker counts: nodes the guard cordoned plus GPUs it taints (DRA DeviceTaintRules)",
)
BREAKER_HEADROOM = _pushed(
    "gpu_node_guard_breaker_headroom_nodes",
    "Isolations left before the breaker opens: limit minus the breaker's count (<= 0: open)",
)
LAST_RUN_REQUESTS = _pushed(
    "gpu_node_guard_last_run_requests",
    "Requests of the last run by target (kubernetes, prometheus) and HTTP code (or error)",
    ("target", "code"),
)
# The cycle's Lease (guard/doors/lease.py): each pushed only by the runs it names, so the two
# together tell how many runs in a row found the Lease held (GPUNodeGuardLeaseHeld).
LEASE_TAKEN = _pushed(
    "gpu_node_guard_lease_taken_timestamp_seconds",
    "Unix time the last run that took the cycle's Lease took it; pushed by such runs only",
)
LEASE_HELD = _pushed(
    "gpu_node_guard_lease_held_timestamp_seconds",
    "Unix time the last run that found the cycle's Lease held by another (lease-held, nothing"
    " decided) found it; pushed by such runs only",
)
# The site's alert filters (GUARD_USER_CODE_XIDS, GUARD_CONFORMANCE_ALLOWED_DNS) as series the
# shipped rules join with, so a rule file generated from the defaults follows the site.
USER_CODE_XID = _pushed(
    "gpu_node_guard_user_code_xid",
    "1 for each Xid the guard counts as user code (never a cordon); the Xid alerts leave these out",
    ("xid",),
)
ALLOWED_DNS_PREFIX = _pushed(
    "gpu_node_guard_allowed_dns_prefix",
    "1 for each address prefix (whole octets or 16-bit groups) of the upstream resolvers the"
    " CoreDNS alert allows: GUARD_CONFORMANCE_ALLOWED_DNS, else the internal IPv4 ranges",
    ("prefix",),
)

# Repair figures (guard/figures.py) of the ledger and the nodes' records at the run's read.
ISOLATIONS = _pushed(
    "gpu_node_guard_isolations",
    "Open isolations (a node cordoned, or one GPU for a GPU-level unit) by verdict and unit",
    ("verdict", "unit"),
)
ISOLATION_OLDEST_AGE = _pushed(
    "gpu_node_guard_isolation_oldest_age_seconds",
    "Age of the oldest open isolation of each verdict at the run's read (0: none open)",
    ("verdict",),
)
ISOLATIONS_PAST_BUDGET = _pushed(
    "gpu_node_guard_isolations_past_budget",
    "Open isolations older than their verdict's quarantine budget",
    ("verdict",),
)
QUARANTINE_BUDGET = _pushed(
    "gpu_node_guard_quarantine_budget_seconds",
    "The expected repair time of each verdict (GUARD_BUDGET)",
    ("verdict",),
)
GPU_HOURS_LOST = _pushed(
    "gpu_node_guard_gpu_hours_lost",
    "GPU-hours out of service over the trailing window: the faulted GPUs' and the healthy GPUs'"
    " a node-wide cordon held with them",
    ("gpus", "window"),
)
REPAIR_PHASE = _pushed(
    "gpu_node_guard_repair_phase_seconds",
    "Mean duration of each repair phase (onset-to-cordon, cordon-to-repair, repair-to-return,"
    " isolated) over the isolations of the last 30 days (NaN: none)",
    ("phase",),
)
INCIDENTS = _pushed(
    "gpu_node_guard_incidents", "Ledger incidents within the trailing window", ("window",)
)
REPEAT_CARDS = _pushed(
    "gpu_node_guard_repeat_fault_cards",
    "Cards (GPU UUIDs) with two incidents or more in the last 30 days",
)
DOMAIN_INCIDENT_NODES = _pushed(
    "gpu_node_guard_domain_incident_nodes",
    "Nodes of one domain incident (isolated within the hour or candidates, sharing the value of"
    ' the site\'s topology label), by domain (label=value); one domain="" series at 0 when'
    " there is none",
    ("domain",),
)

PUSHED = tuple(_PUSHED)  # in the order declared above


# ── The node agent's series (docs/agent.md): it exposes them, the guard's queries and alerts
# read them; names only here, so the guard reads them without importing the agent's checks.
AGENT_PREFIX = "gpu_node_guard_agent_"
AGENT_CHECK_OK = AGENT_PREFIX + "check_ok"
AGENT_CHECK_STATUS = AGENT_PREFIX + "check_status"
AGENT_CHECK_INFO = AGENT_PREFIX + "check_info"
AGENT_NVIDIA_INFO = AGENT_PREFIX + "nvidia_info"
AGENT_LAST_RUN = AGENT_PREFIX + "last_run_timestamp_seconds"
AGENT_INTERVAL = AGENT_PREFIX + "interval_seconds"
# The agent check whose held failure makes the guard cordon (reason `nvml-mismatch`).
NVIDIA_MATCH = "nvidia-match"
