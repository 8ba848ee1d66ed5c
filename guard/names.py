"""Names the guard writes or reads on the cluster: one place for every key and label."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import overload

GPU_RESOURCE = "nvidia.com/gpu"
# NVIDIA's DRA driver: the driver name of its ResourceSlices and the name of its DeviceClass.
DRA_DRIVER = "gpu.nvidia.com"
DRA_DEVICE_CLASS = "gpu.nvidia.com"
# COMPONENT_LABEL of the guard's DeviceTaintRules and of its load-test ResourceClaims.
DEVICE_TAINT_COMPONENT = "device-taint"
RECORDER = "gpu-node-guard"
APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "gpu-node-guard"  # the value of APP_LABEL on everything the guard makes or ships
# the cycle's Lease in the guard's namespace (guard.doors.lease)
CYCLE_LEASE = "gpu-node-guard-cycle"
# Its holderIdentity as a run writes it, `<hostname>-<pid>` (the pod's name in a CronJob's pod;
# guard.doors.lease `holder_identity`); the guard-scope policy admits no other (or "": free).
LEASE_HOLDER_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?-[0-9]{1,10}$"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The Job controller labels its Pods with the Job name under both keys (the short one is legacy).
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
# COMPONENT_LABEL of the ledger's archives (with APP_LABEL=APP_NAME): how readers find them, and
# what the guard-scope policy requires of an archive's name (guard.generate.policies.ledger).
LEDGER_ARCHIVE_COMPONENT = "ledger-archive"
FIELD_MANAGER = "gpu-node-guard"
# Events about cluster-scoped objects (Nodes) must live in `default` (API validation).
NODE_EVENT_NAMESPACE = "default"
# events.k8s.io/v1 `reportingController` (a qualified name, like `kubernetes.io/kubelet`).
REPORTING_CONTROLLER = "gpu-node-guard.io/gpu-node-guard"
# Every reason of an Event the guard writes about a Pod (guard/plan/workload.py): the guard-scope
# admission policy admits no other.
GPU_ISOLATED_EVENT = "GuardGpuIsolated"
POD_EVENT_REASONS = (GPU_ISOLATED_EVENT,)
# The site's settings (manifests/base, merged by the overlay's settings.env): the CronJob reads it
# whole (envFrom), the admission policies take it as their params, `status` reads it. One fixed
# name, no content hash: a binding's paramRef names it, and kustomize rewrites no paramRef.
SETTINGS_CONFIGMAP = "gpu-node-guard-settings"


def ledger_archive_pattern(ledger: str) -> str:
    """The names of the ledger's archives, ``<ledger>-archive-<n>`` with n = 1..999999: what the
    guard creates (guard.doors.ledger_store) and all that the ledger policies let it create."""
    return f"^{re.escape(ledger)}-archive-[1-9][0-9]{{0,5}}$"


# One word of printable ASCII, no space: a record's token, a ledger field, an image reference.
PRINTABLE_WORD = re.compile(r"^[!-~]+\Z", re.ASCII)
# Kubernetes object names (apimachinery validation: IsDNS1123Label, IsDNS1123Subdomain).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z", re.ASCII)
_DNS_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z", re.ASCII
)


def is_dns_label(name: str) -> bool:
    """A namespace name: a-z, 0-9 and -, at most 63."""
    return bool(_DNS_LABEL.fullmatch(name))


def is_dns_subdomain(name: str, longest: int = 253) -> bool:
    """A ConfigMap, ServiceAccount or Node name: dot-separated DNS labels, at most `longest`."""
    return len(name) <= longest and bool(_DNS_SUBDOMAIN.fullmatch(name))


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z",
    re.ASCII,
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z", re.ASCII)


def is_label_pair(pair: str) -> bool:
    """`key=value` with a valid label key and value (a nodeSelector of one label)."""
    key, sep, value = pair.partition("=")
    return bool(sep and _LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(value))


class AnnotationKey:
    """A node annotation key of the guard (an `Annotations` attribute): prefix, then `suffix`."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    @overload
    def __get__(self, keys: None, owner: object) -> AnnotationKey: ...
    @overload
    def __get__(self, keys: Annotations, owner: object) -> str: ...
    def __get__(self, keys: Annotations | None, owner: object) -> str | AnnotationKey:
        return self if keys is None else keys.prefix + self.suffix


@dataclass(frozen=True, slots=True)
class Annotations:
    """The guard's node annotation keys under a prefix (default ``gpu-node-guard.io/``): the
    prefix, then the key's suffix (`AnnotationKey`)."""

    prefix: str

    # Each key's value, writer and lifetime: docs/node-annotations.md.
    reason = AnnotationKey("auto-cordon-reason")
    at = AnnotationKey("auto-cordon-at")
    boot_id = AnnotationKey("auto-cordon-boot-id")
    gpu_capacity = AnnotationKey("auto-cordon-gpu-capacity")
    gpu = AnnotationKey("auto-cordon-gpu")
    loadtest_result = AnnotationKey("loadtest-result")
    conformance_result = AnnotationKey("conformance-result")
    cancelled = AnnotationKey("cancelled")
    returned = AnnotationKey("returned")
    checked_boot = AnnotationKey("checked-boot")
    pcie_links = AnnotationKey("auto-cordon-pcie-links")
    conformance_failed = AnnotationKey("conformance-failed")
    onboarding_failed = AnnotationKey("onboarding-failed")
    # What the guard made: a result counts only from that Job (docs/lifecycle.md, "Job results").
    loadtest_job = AnnotationKey("job-loadtest")
    conformance_job = AnnotationKey("job-conformance")
    evidence_job = AnnotationKey("job-evidence")
    fence_job = AnnotationKey("job-fence")  # set or lift
    loadtest_claim = AnnotationKey("claim-loadtest")
    # A fence Job is the guard's by its uid here, never by when it was made (plan.fence_audit).
    fence_jobs = AnnotationKey("fence-jobs")
    fence = AnnotationKey("gpu-fence")
    device_taint = AnnotationKey("device-taint")
    fault_taint = AnnotationKey("fault")  # the key of the guard's device taint (a label name)
    hold = AnnotationKey("hold")
    reset_done = AnnotationKey("reset-done")
    node_label = AnnotationKey("node")  # label on the guard's Jobs naming the node they run on

    def job_record(self, kind: str) -> str | None:
        """The record key of a Job kind (`job-<kind>`); None for any other word."""
        key: str | None = getattr(self, f"{kind}_job", None)
        return key

    @property
    def cordon_keys(self) -> tuple[str, ...]:
        """Keys the guard sets when it cordons and clears when the node returns."""
        return (self.reason, self.at, self.boot_id, self.gpu_capacity, self.gpu)

    @property
    def guard_keys(self) -> tuple[str, ...]:
        """Keys the guard removes when a node leaves its care (return or a person's uncordon);
        never `hold` (the guard may add one, a person removes it) nor a person's `reset-done`."""
        return (
            *self.cordon_keys,
            self.loadtest_result,
            self.conformance_result,
            self.pcie_links,
            self.conformance_failed,
            self.fence,
        )

    @property
    def record_keys(self) -> tuple[str, ...]:
        """Kept after a node leaves the guard's care; removed by its next cordon."""
        return (self.cancelled, self.returned)

    @property
    def lifecycle_keys(self) -> tuple[str, ...]:
        """Kept across cordons: the checked boot, the onboarding gate's failure and the records of
        the Jobs the guard made (each replaced by its next check, gate pass or Job)."""
        return (
            self.checked_boot,
            self.onboarding_failed,
            self.loadtest_job,
            self.conformance_job,
            self.evidence_job,
            self.fence_job,
            self.fence_jobs,
        )
