"""The agent's metric names and the check the guard acts on: a contract (docs/agent.md).

A module of names only, so the guard's queries read them without importing the checks.
"""

from __future__ import annotations

PREFIX = "gpu_node_guard_agent_"
CHECK_OK = PREFIX + "check_ok"
CHECK_STATUS = PREFIX + "check_status"
CHECK_INFO = PREFIX + "check_info"
NVIDIA_INFO = PREFIX + "nvidia_info"
LAST_RUN = PREFIX + "last_run_timestamp_seconds"
INTERVAL = PREFIX + "interval_seconds"
# The check whose held failure makes the guard cordon (reason `nvml-mismatch`).
NVIDIA_MATCH = "nvidia-match"
