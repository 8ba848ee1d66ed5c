"""Names the guard writes or reads on the cluster: one place for every key and label."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    guard creates (guard.doors.ledger_store) and all that the ledger policies let it create.

    >>> ledger_archive_pattern("ledger")
    '^ledger-archive-[1-9][0-9]{0,5}$'
    """
    return f"^{re.escape(ledger)}-archive-[1-9][0-9]{{0,5}}$"


# Kubernetes object names (apimachinery validation: IsDNS1123Label, IsDNS1123Subdomain).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z", re.ASCII)
_DNS_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z", re.ASCII
)


def is_dns_label(name: str) -> bool:
    """A namespace name: a-z, 0-9 and -, at most 63.

    >>> is_dns_label("gpu-node-guard"), is_dns_label("Bad_NS"), is_dns_label("a" * 64)
    (True, False, False)
    """
    return bool(_DNS_LABEL.fullmatch(name))


def is_dns_subdomain(name: str, longest: int = 253) -> bool:
    """A ConfigMap, ServiceAccount or Node name: dot-separated DNS labels, at most `longest`.

    >>> is_dns_subdomain("gpu-node-guard.io"), is_dns_subdomain("gpu_node"), is_dns_subdomain("")
    (True, False, False)
    """
    return len(name) <= longest and bool(_DNS_SUBDOMAIN.fullmatch(name))


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z",
    re.ASCII,
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z", re.ASCII)


def is_label_pair(pair: str) -> bool:
    """`key=value` with a valid label key and value (a nodeSelector of one label).

    >>> is_label_pair("nvidia.com/gpu.present=true"), is_label_pair("gpu"), is_label_pair("a=b c")
    (True, False, False)
    """
    key, sep, value = pair.partition("=")
    return bool(sep and _LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Annotations:
    """The guard's node annotation keys under a prefix (default ``gpu-node-guard.io/``).

    >>> Annotations("gpu-node-guard.io/").reason
    'gpu-node-guard.io/auto-cordon-reason'
    """

    prefix: str

    @property
    def reason(self) -> str:
        return f"{self.prefix}auto-cordon-reason"

    @property
    def at(self) -> str:
        return f"{self.prefix}auto-cordon-at"

    @property
    def boot_id(self) -> str:
        return f"{self.prefix}auto-cordon-boot-id"

    @property
    def gpu_capacity(self) -> str:
        return f"{self.prefix}auto-cordon-gpu-capacity"

    @property
    def gpu(self) -> str:
        return f"{self.prefix}auto-cordon-gpu"

    @property
    def loadtest_result(self) -> str:
        return f"{self.prefix}loadtest-result"

    @property
    def conformance_result(self) -> str:
        return f"{self.prefix}conformance-result"

    @property
    def cancelled(self) -> str:
        """`<bootID> <GPU-UUID> xid-<n> <RFC3339>`: a person's uncordon cancelled this incident."""
        return f"{self.prefix}cancelled"

    @property
    def returned(self) -> str:
        """`<RFC3339> job/<name>`: the node came back after a passed load test."""
        return f"{self.prefix}returned"

    # The lifecycle checks (docs/lifecycle.md, docs/onboarding.md).
    @property
    def checked_boot(self) -> str:
        """`<bootID> <RFC3339> job/<name>|uncordon`: the last boot whose conformance passed."""
        return f"{self.prefix}checked-boot"

    @property
    def pcie_links(self) -> str:
        """`<pci>=<speed>GT/s,x<width> …`: the GPUs' links read by the cordon's evidence Job."""
        return f"{self.prefix}auto-cordon-pcie-links"

    @property
    def conformance_failed(self) -> str:
        """`<RFC3339> job/<name> <item>[,<item>…]`: the conformance items that failed."""
        return f"{self.prefix}conformance-failed"

    @property
    def onboarding_failed(self) -> str:
        """`<RFC3339> job/<name> <item>[,<item>…]`: why the onboarding gate stays closed."""
        return f"{self.prefix}onboarding-failed"

    # What the guard made (docs/lifecycle.md, "Job results"): a result counts only from that Job.
    @property
    def loadtest_job(self) -> str:
        """`<job name> <uid> <spec digest>`: the last load-test Job the guard created here."""
        return f"{self.prefix}job-loadtest"

    @property
    def conformance_job(self) -> str:
        """`<job name> <uid> <spec digest>`: the last conformance Job the guard created here."""
        return f"{self.prefix}job-conformance"

    @property
    def evidence_job(self) -> str:
        """`<job name> <uid> <spec digest>`: the last evidence Job the guard created here."""
        return f"{self.prefix}job-evidence"

    @property
    def fence_job(self) -> str:
        """`<job name> <uid> <spec digest>`: the last fence Job (set or lift) the guard created."""
        return f"{self.prefix}job-fence"

    @property
    def loadtest_claim(self) -> str:
        """`<claim name> <uid>`: the last device load test's ResourceClaim the guard created."""
        return f"{self.prefix}claim-loadtest"

    @property
    def fence_jobs(self) -> str:
        """`<uid> <uid> …`: the uids of the guard's last fence Jobs on the node (at most
        `FENCE_JOBS_KEPT`, oldest first), written with `job-fence` at each create: a fence Job
        is the guard's by its uid, never by when it was made (guard.plan.fence_audit)."""
        return f"{self.prefix}fence-jobs"

    def job_record(self, kind: str) -> str | None:
        """The record key of a Job kind whose result the guard acts on; None for the others."""
        return {
            "loadtest": self.loadtest_job,
            "conformance": self.conformance_job,
            "evidence": self.evidence_job,
            "fence": self.fence_job,
        }.get(kind)

    # GPU isolation beside the cordon (docs/isolation.md).
    @property
    def fence(self) -> str:
        """`<fenced|gpu-absent|lifted> <bootID> <RFC3339> job/<name>`: the cordon's GPU on the
        host as the guard's last fence Job read it back."""
        return f"{self.prefix}gpu-fence"

    # DRA nodes (docs/lifecycle.md, "DRA nodes: a device taint instead of the cordon").
    @property
    def device_taint(self) -> str:
        """`<reason> <RFC3339> <bootID|-> <pci> <GPU-UUID> <driver>/<pool>/<device> <rule>`: the
        guard isolates that GPU with its DeviceTaintRule <rule> (the node stays schedulable)."""
        return f"{self.prefix}device-taint"

    @property
    def fault_taint(self) -> str:
        """The key of the guard's device taint (a label name, not a node annotation)."""
        return f"{self.prefix}fault"

    @property
    def hold(self) -> str:
        return f"{self.prefix}hold"

    @property
    def reset_done(self) -> str:
        return f"{self.prefix}reset-done"

    @property
    def node_label(self) -> str:
        """Label on the guard's Jobs naming the node they run on."""
        return f"{self.prefix}node"

    @property
    def cordon_keys(self) -> tuple[str, ...]:
        """Keys the guard sets when it cordons and clears when the node returns."""
        return (self.reason, self.at, self.boot_id, self.gpu_capacity, self.gpu)

    @property
    def guard_keys(self) -> tuple[str, ...]:
        """Keys the guard removes when a node leaves its care (return or a person's uncordon).

        Never `hold` (the guard may add one, a person removes it) nor `reset-done` (a person's).
        """
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
        """Kept across cordons: the checked boot (replaced by the next check that passes) and
        the onboarding gate's failure (removed when the gate passes) and the records of the Jobs
        the guard made (replaced by its next Job of that kind)."""
        return (
            self.checked_boot,
            self.onboarding_failed,
            self.loadtest_job,
            self.conformance_job,
            self.evidence_job,
            self.fence_job,
            self.fence_jobs,
        )
