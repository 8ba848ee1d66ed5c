"""One frozen value with every setting of a guard run; built once by the CLI.

Each field carries its help text in `metadata`; `guard.cli` turns every field into a click option
``--field-name`` with environment variable ``GUARD_FIELD_NAME``, so a setting is declared once.
Defaults come from the incident write-up the guard was built from (five-minute cadence, ten-minute
hold window, user-code Xids 13,31,43,45,68,109, breaker at five auto-cordoned nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

# Upper bounds of the guard's Jobs, written into the admission policies (guard/policies): a Job
# asking for longer is refused, so a setting beyond them is a usage error at start.
MAX_ACTIVE_DEADLINE_S = 3600
MAX_TTL_S = 30 * 86400


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class Settings:
    # Where to read.
    prometheus_url: str = _opt("", "Prometheus base URL, e.g. http://prometheus:9090")
    prometheus_timeout_s: float = _opt(10.0, "Timeout of one Prometheus request")
    prometheus_bearer_token_file: str = _opt("", "File with a bearer token for Prometheus")
    kubeconfig: str = _opt("", "Kubeconfig path; in-cluster config when empty")
    # Detection.
    cadence_s: int = _opt(300, "How often the CronJob runs (used for the worst-case log line)")
    hold_window_s: int = _opt(600, "GPU loss must hold this long before a cordon")
    fast_hold_window_s: int = _opt(120, "Shorter hold for hardware-certain Xids (fast path)")
    fast_path_xids: tuple[int, ...] = _opt((79,), "Hardware-certain Xids that use the short hold")
    user_code_xids: tuple[int, ...] = _opt(
        (13, 31, 43, 45, 68, 109), "Xids caused by user code: never a reason to cordon"
    )
    query_step_s: int = _opt(60, "Subquery resolution of the hold window")
    # Safety.
    breaker_max_nodes: int = _opt(5, "No new cordon when this many nodes carry the guard's reason")
    breaker_max_fraction: float = _opt(
        0.0, "Also stop at this fraction of GPU nodes (0 = off; the lower limit binds)"
    )
    # Return.
    reset_class_xids: tuple[int, ...] = _opt(
        (48, 94, 95, 119, 120), "Xids repaired by a GPU reset: need reset-done instead of a reboot"
    )
    memory_class_xids: tuple[int, ...] = _opt(
        (48, 63, 64, 94, 95, 140), "Xids that add a memory pattern test to the load test"
    )
    repeat_fault_limit: int = _opt(2, "Hold the node when the card has this many ledger incidents")
    return_conformance: bool = _opt(False, "Run the conformance Job before the load test")
    conformance_control_plane_version: str = _opt(
        "", "RKE2/Kubernetes version of the control plane for the conformance Job (empty: skip)"
    )
    conformance_allowed_dns: str = _opt(
        "", "CIDRs (comma-separated) the pods' upstream resolvers must be in (empty: skip)"
    )
    # Names (owner: security; the admission policies in policies/ are generated from these).
    annotation_prefix: str = _opt("gpu-node-guard.io/", "Prefix of the guard's node annotations")
    namespace: str = _opt("gpu-node-guard", "Namespace of the guard (CronJob) and its ledger")
    jobs_namespace: str = _opt(
        "gpu-node-guard-jobs", "Namespace of the guard's privileged Jobs (evidence, conformance)"
    )
    ledger_configmap: str = _opt("gpu-fault-ledger", "ConfigMap holding the fault ledger")
    job_service_account: str = _opt(
        "gpu-node-guard-job", "ServiceAccount of the guard's Jobs (in the jobs namespace)"
    )
    gpu_node_label: str = _opt(
        "nvidia.com/gpu.present=true",
        "key=value label every GPU node carries; the guard's Jobs require it (nodeSelector)",
    )
    # Jobs.
    image: str = _opt(
        "ghcr.io/gpu-node-guard/gpu-node-guard:0.1.0", "Image of the evidence and conformance Jobs"
    )
    loadtest_image: str = _opt(
        "ghcr.io/gpu-node-guard/gpu-node-guard-loadtest:0.1.0", "Image of the load-test Job"
    )
    evidence_deadline_s: int = _opt(600, "activeDeadlineSeconds of the evidence Job")
    loadtest_deadline_s: int = _opt(1800, "activeDeadlineSeconds of the load-test Job")
    job_ttl_s: int = _opt(7 * 86400, "ttlSecondsAfterFinished of every guard Job")
    loadtest_duration_s: int = _opt(90, "Matmul burn per GPU in the load test")
    loadtest_matrix_size: int = _opt(8192, "Square fp16 matrix size of the burn")
    loadtest_min_ratio: float = _opt(0.8, "Pass when min/max per-GPU throughput is at least this")

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def gpu_node_selector(self) -> tuple[str, str]:
        """`gpu_node_label` as (key, value), the nodeSelector of every guard Job."""
        key, _, value = self.gpu_node_label.partition("=")
        return key, value

    def as_log_pairs(self) -> list[tuple[str, str]]:
        """Sorted key=value pairs for the one `settings` log line."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = ",".join(str(v) for v in value)
            out.append((f.name, str(value)))
        return sorted(out)


def _problems(s: Settings) -> list[str]:
    checks = [
        (s.hold_window_s >= 60, "hold_window_s must be at least 60"),
        (0 < s.fast_hold_window_s <= s.hold_window_s, "fast_hold_window_s must be in (0, hold]"),
        (0 < s.query_step_s <= s.fast_hold_window_s, "query_step_s must be in (0, fast hold]"),
        (s.breaker_max_nodes >= 1, "breaker_max_nodes must be at least 1"),
        (0.0 <= s.breaker_max_fraction <= 1.0, "breaker_max_fraction must be in [0, 1]"),
        (s.repeat_fault_limit >= 1, "repeat_fault_limit must be at least 1"),
        (0.0 < s.loadtest_min_ratio <= 1.0, "loadtest_min_ratio must be in (0, 1]"),
        (s.prometheus_timeout_s > 0, "prometheus_timeout_s must be positive"),
        (s.annotation_prefix.endswith("/"), "annotation_prefix must end with '/'"),
        (not set(s.fast_path_xids) & set(s.user_code_xids), "a fast-path Xid is a user-code Xid"),
        *_name_problems(s),
    ]
    return [message for ok, message in checks if not ok]


_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _name_problems(s: Settings) -> list[tuple[bool, str]]:
    key, sep, value = s.gpu_node_label.partition("=")
    deadlines = (s.evidence_deadline_s, s.loadtest_deadline_s)
    return [
        (bool(_PREFIX.match(s.annotation_prefix)), "annotation_prefix must be a DNS name and '/'"),
        (bool(_DNS_LABEL.match(s.namespace)), "namespace must be a DNS-1123 label"),
        (bool(_DNS_LABEL.match(s.jobs_namespace)), "jobs_namespace must be a DNS-1123 label"),
        (s.jobs_namespace != s.namespace, "jobs_namespace must differ from namespace"),
        (
            bool(sep and _LABEL_KEY.match(key) and _LABEL_VALUE.match(value)),
            "gpu_node_label must be key=value, a valid label (e.g. nvidia.com/gpu.present=true)",
        ),
        (
            all(0 < d <= MAX_ACTIVE_DEADLINE_S for d in deadlines),
            f"Job deadlines must be in [1, {MAX_ACTIVE_DEADLINE_S}] s (the policies' bound)",
        ),
        (0 < s.job_ttl_s <= MAX_TTL_S, f"job_ttl_s must be in [1, {MAX_TTL_S}] s"),
    ]


def setting_default(name: str) -> Any:
    """The default of one setting, for commands that run without a Settings (inside Jobs)."""
    return next(f.default for f in fields(Settings) if f.name == name)


def setting_fields() -> tuple[Any, ...]:
    """The dataclass fields, for the CLI to build options from."""
    return fields(Settings)
