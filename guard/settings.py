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


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class Settings:
    # Where to read.
    prometheus_url: str = _opt(
        "", "Prometheus base URL with any path prefix, e.g. http://thanos-query:9090/prometheus"
    )
    prometheus_timeout_s: float = _opt(
        10.0, "Total time one Prometheus request may take, whole answer included"
    )
    prometheus_bearer_token_file: str = _opt(
        "", "File with a bearer token for Prometheus (e.g. a mounted Secret); read at start"
    )
    prometheus_service_account_token: bool = _opt(
        False, "Send the pod's own ServiceAccount token (kube-rbac-proxy in front of Prometheus)"
    )
    prometheus_basic_auth_user: str = _opt("", "Basic-auth user name for Prometheus")
    prometheus_basic_auth_password_file: str = _opt("", "File with the basic-auth password")
    prometheus_ca_file: str = _opt("", "CA bundle that signs Prometheus's certificate")
    prometheus_cert_file: str = _opt("", "Client certificate for mutual TLS (with the key file)")
    prometheus_key_file: str = _opt("", "Private key of the client certificate")
    prometheus_headers: str = _opt(
        "", "Extra request headers, comma-separated Name=value (e.g. X-Scope-OrgID=team-a)"
    )
    prometheus_max_answer_bytes: int = _opt(
        16 * 1024 * 1024, "Abort when one answer is larger than this (decoded bytes)"
    )
    prometheus_max_series: int = _opt(20000, "Abort when one answer has more series than this")
    dcgm_node_labels: str = _opt(
        "Hostname,hostname",
        "dcgm-exporter labels that name the Node, in order; a `node` label naming a Node wins",
    )
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
    # Names.
    annotation_prefix: str = _opt("gpu-node-guard.io/", "Prefix of the guard's node annotations")
    namespace: str = _opt("gpu-node-guard", "Namespace of the guard, its Jobs and its ledger")
    jobs_namespace: str = _opt(
        "gpu-node-guard-jobs", "Namespace of the guard's privileged Jobs; its pods never count"
    )
    ledger_configmap: str = _opt("gpu-fault-ledger", "ConfigMap holding the fault ledger")
    job_service_account: str = _opt("gpu-node-guard-job", "ServiceAccount of the guard's Jobs")
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
    def dcgm_node_label_names(self) -> tuple[str, ...]:
        return tuple(v.strip() for v in self.dcgm_node_labels.split(",") if v.strip())

    @property
    def prometheus_header_pairs(self) -> tuple[tuple[str, str], ...]:
        """``Name=value`` entries of `prometheus_headers`, in order."""
        pairs = (e.partition("=") for e in self.prometheus_headers.split(",") if e.strip())
        return tuple((name.strip(), value.strip()) for name, _, value in pairs)

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
        *_prometheus_problems(s),
        (s.annotation_prefix.endswith("/"), "annotation_prefix must end with '/'"),
        (not set(s.fast_path_xids) & set(s.user_code_xids), "a fast-path Xid is a user-code Xid"),
    ]
    return [message for ok, message in checks if not ok]


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _prometheus_problems(s: Settings) -> list[tuple[bool, str]]:
    labels = s.dcgm_node_label_names
    return [
        (0 < s.prometheus_timeout_s <= 600, "prometheus_timeout_s must be in (0, 600]"),
        (s.prometheus_max_answer_bytes >= 65536, "prometheus_max_answer_bytes must be ≥ 65536"),
        (s.prometheus_max_series >= 100, "prometheus_max_series must be at least 100"),
        (
            bool(labels) and all(_LABEL_NAME.match(v) for v in labels),
            "dcgm_node_labels must be comma-separated Prometheus label names",
        ),
        (
            all(_HEADER_NAME.match(n) and v for n, v in s.prometheus_header_pairs),
            "prometheus_headers must be comma-separated Name=value with a valid header name",
        ),
        (
            all(n.lower() != "authorization" for n, _ in s.prometheus_header_pairs),
            "prometheus_headers must not set Authorization (it is logged): use a token file",
        ),
        (
            bool(s.prometheus_basic_auth_user) == bool(s.prometheus_basic_auth_password_file),
            "prometheus_basic_auth_user and prometheus_basic_auth_password_file go together",
        ),
        (
            bool(s.prometheus_cert_file) == bool(s.prometheus_key_file),
            "prometheus_cert_file and prometheus_key_file go together",
        ),
        (
            sum((bool(s.prometheus_bearer_token_file), s.prometheus_service_account_token,
                 bool(s.prometheus_basic_auth_user))) <= 1,
            "choose one of prometheus_bearer_token_file, prometheus_service_account_token and"
            " prometheus_basic_auth_user",
        ),
    ]  # fmt: skip


def setting_fields() -> tuple[Any, ...]:
    """The dataclass fields, for the CLI to build options from."""
    return fields(Settings)
