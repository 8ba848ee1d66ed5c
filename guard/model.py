"""Plain frozen data the planners read: the `Snapshot` of one cycle and its parts (`guard.read`
converts at the edge: no client object or raw API dict crosses into the planners)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from guard.ledger import LedgerLine
from guard.states import Reason

# One item a guard Job found wrong (a conformance item, a load-test reason word) and why: the
# summary's own value (guard.wire).
from guard.wire import Finding as Finding

JobStatus = Literal["running", "succeeded", "failed", "unreadable"]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A value the guard could not read: where it sits, what it says, why, and the fix."""

    where: str  # an annotation key, or a field path such as status.capacity[nvidia.com/gpu]
    value: str
    why: str
    fix: str  # what a person does about it, one sentence
    # "prometheus": a series refused at the snapshot boundary (`PromUnreadable`); reported in the
    # log only, never in an Event or on the node.
    source: Literal["node", "prometheus"] = "node"


@dataclass(frozen=True, slots=True)
class GpuRef:
    """The faulted GPU of a cordon: ``<pci> <uuid>`` (either may be `unknown`)."""

    pci: str
    uuid: str

    def __str__(self) -> str:
        return f"{self.pci} {self.uuid}"


@dataclass(frozen=True, slots=True)
class CordonRecord:
    """The guard's ``auto-cordon-*`` annotations of a node, parsed; None where a key is absent."""

    reason: Reason  # xid-79, or another reason word (conformance-…)
    xid: int | None
    at: datetime | None
    boot_id: str  # "" when absent or empty: then no reboot can be proven
    gpu_capacity: int | None
    gpu: GpuRef | None


@dataclass(frozen=True, slots=True)
class CancelRecord:
    """A person's uncordon of a guard cordon: that incident (boot, GPU, Xid) is not cordoned
    again; for a cordon without a GPU (nvml-mismatch) the incident is (boot, reason)."""

    boot_id: str  # "" when the guard knew no boot id
    uuid: str  # "" for a cordon without a GPU
    xid: int | None  # None for a cordon without a GPU
    at: datetime
    reason: str = ""  # the cancelled cordon's reason: xid-79, nvml-mismatch


@dataclass(frozen=True, slots=True)
class ReturnRecord:
    """The last return after a passed load test."""

    at: datetime
    job: str  # job/<name>


@dataclass(frozen=True, slots=True)
class Taint:
    """One of the node's taints, every field kept: removing the onboarding gate rewrites the list,
    and the node-scope policy admits only the old list minus exactly that taint."""

    key: str
    value: str = ""
    effect: str = ""
    time_added: str = ""  # timeAdded as the API wrote it (NoExecute taints), "" when absent

    def as_dict(self) -> dict[str, str]:
        out = {"value": self.value, "effect": self.effect, "timeAdded": self.time_added}
        return {"key": self.key} | {k: v for k, v in out.items() if v}


@dataclass(frozen=True, slots=True)
class CheckedBoot:
    """``checked-boot``: the last boot whose conformance passed (or a person accepted)."""

    boot_id: str
    at: datetime
    by: str  # job/<name> of the passed conformance Job, or `uncordon` (a person's uncordon)


@dataclass(frozen=True, slots=True)
class FailedCheck:
    """``conformance-failed`` / ``onboarding-failed``: which Job failed, when, on which items."""

    at: datetime
    job: str  # job/<name>
    items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """``job-<kind>``: the guard's Job of that kind for the node: its uid as the API answered the
    create, the digest of its containers as the guard rendered it."""

    kind: str  # loadtest or conformance
    name: str
    uid: str
    digest: str


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """``claim-loadtest``: the ResourceClaim of a device load test the guard created for the
    node, as the API answered the create (its uid): only that claim's allocation counts."""

    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class FenceRecord:
    """``gpu-fence``: what the guard's last fence Job read back on the cordon's GPU, in which
    boot (compute mode returns to Default at a reboot: a record of another boot holds nothing)."""

    state: str  # fenced | gpu-absent | lifted
    boot_id: str
    at: datetime
    job: str  # job/<name>


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One Node, every value the guard reads parsed once (`guard.read.objects.node_info`);
    `annotations`, the raw values of the guard's keys, are for presence checks and the executor's
    re-checks. A node with `unreadable` entries is reported and otherwise left alone."""

    name: str
    resource_version: str
    unschedulable: bool
    ready: bool
    boot_id: str
    gpu_capacity: int
    gpu_allocatable: int
    annotations: tuple[tuple[str, str], ...] = ()
    uid: str = ""  # metadata.uid: Events name the node by it (kubectl describe matches it)
    cordon: CordonRecord | None = None
    hold: str | None = None
    reset_done: str | None = None
    reset_done_at: datetime | None = None  # the leading RFC 3339 time of reset-done, if any
    loadtest_result: str = ""
    conformance_result: str = ""
    cancelled: CancelRecord | None = None
    returned: ReturnRecord | None = None
    # The lifecycle checks (guard/plan/boot_check.py, onboarding.py).
    taints: tuple[Taint, ...] = ()
    checked_boot: CheckedBoot | None = None
    pcie_links: tuple[RecordedLink, ...] = ()  # recorded from the evidence Job at the cordon
    conformance_failed: FailedCheck | None = None
    onboarding_failed: FailedCheck | None = None
    job_records: tuple[JobRecord, ...] = ()  # what the guard made (guard.codec.check_records)
    claim_record: ClaimRecord | None = None  # its device load test's ResourceClaim, likewise
    fence: FenceRecord | None = None  # the cordon's GPU fenced on the host (guard.plan.fence)
    fence_jobs: tuple[str, ...] = ()  # uids of the guard's last fence Jobs here, oldest first
    unreadable: tuple[Unreadable, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # metadata.labels: the node's GPU class

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)

    def has(self, key: str) -> bool:
        return any(k == key for k, _ in self.annotations)

    def job_record(self, kind: str) -> JobRecord | None:
        return next((r for r in self.job_records if r.kind == kind), None)


def rebooted(before: str, now: str) -> bool:
    """A reboot is proven only by two known boot ids that differ; a missing one proves nothing."""
    return bool(before) and bool(now) and before != now


@dataclass(frozen=True, slots=True)
class RecordedLink:
    """A GPU's PCIe link as the evidence Job read it: ``0000:18:00.0`` and ``16GT/s,x16``."""

    pci: str
    link: str

    def __str__(self) -> str:
        return f"{self.pci}={self.link}"


@dataclass(frozen=True, slots=True)
class JobResult:
    """The validated summary of a finished guard Job's Pod (guard.read.job_results). Neither
    `unreadable` (no summary of the documented shape) nor `rejected` (the kubelet refused the Pod:
    OutOfcpu, …) is a pass or a failure; `problem` says why."""

    state: Literal["read", "unreadable", "rejected"]
    problem: str = ""
    passed: bool = False  # conformance PASS / load-test pass; evidence: always False
    failed: tuple[Finding, ...] = ()  # FAIL items (conformance) or failing reasons (load test)
    links: tuple[RecordedLink, ...] = ()  # evidence: the node's GPU links at cordon time
    gpus: tuple[str, ...] = ()  # load test: the UUIDs of the GPUs it ran on, as it reported them
    # The Pod it came from is not the Job's own (another controller, other containers, another
    # node): the Job counts as one the guard did not make (check_jobs.foreign), never a result.
    foreign: bool = False


@dataclass(frozen=True, slots=True)
class JobInfo:
    name: str
    kind: str
    node: str
    status: JobStatus
    problem: str = ""  # why the status is unreadable
    result: JobResult | None = None  # None: no finished Pod of this Job was read
    uid: str = ""  # metadata.uid: compared with the node's record of what the guard made
    digest: str = ""  # guard.jobs.spec_digest of its pod template (the record holds the rendered)
    run: str = ""  # guard.jobs.run_digest of its pod template: what its Pods must run
    created: datetime | None = None  # metadata.creationTimestamp (the API sets it; None: unread)
    ended: datetime | None = None  # completionTime, else its Complete/Failed condition's time
    fence_mode: str = ""  # a fence Job's `set` or `lift` (the word after `fence` in its argv)


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A Running pod that holds GPUs (the guard's own Jobs are excluded when read)."""

    namespace: str
    name: str
    node: str
    gpus: int
    uid: str = ""  # kube-state-metrics' uid label: an Event about the pod names it by it


@dataclass(frozen=True, slots=True)
class GpuHolder:
    """A pod dcgm-exporter names on a faulted GPU's Xid series (its `pod` and `namespace`
    labels, present when the exporter's pod mapping is on and a pod holds the GPU)."""

    node: str
    uuid: str
    namespace: str
    pod: str


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU series from dcgm-exporter, joined to its node; `value` is the metric's value."""

    node: str
    gpu: str
    uuid: str
    pci: str
    value: int


@dataclass(frozen=True, slots=True)
class AgentCheck:
    """The node agent's nvidia-match result on a node now (one per agent series)."""

    node: str
    status: str  # PASS, WARN, FAIL, UNKNOWN or SKIP (docs/agent.md)
    detail: str  # what the check saw, e.g. "module 580.126.09 != NVML 580.159.03 (…)"

    @property
    def ok(self) -> bool:
        """The agent's check_ok is 1 for these two (docs/agent.md)."""
        return self.status in ("PASS", "WARN")


@dataclass(frozen=True, slots=True)
class ServicePod:
    """A kube-proxy or CNI pod on an unschedulable node, as kube-state-metrics reports it."""

    selector: str  # the selector that picked it: kube-proxy or cni (guard.codec.queries)
    namespace: str
    name: str
    node: str
    ready: bool


@dataclass(frozen=True, slots=True)
class PromUnreadable:
    """A series dropped at the snapshot boundary (`guard.read.prom_view`), a label or value not of
    its format: its node ("" when none reads) is left alone this cycle."""

    node: str
    query: str  # the `guard.codec.queries.Query` name
    label: str  # the label's name, or "value"
    value: str  # as Prometheus sent it (shown escaped and shortened, never written)
    why: str


# The node-naming labels of one dcgm-exporter series that are set: (("node", "gpu-1"), …).
HostLabels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class PromView:
    """Validated Prometheus answers at `Snapshot.now` (`guard.read.prom_view.read_prom`): facts
    only; guard/plan/hold.py decides which make a cordon candidate."""

    hardware_xids: tuple[GpuSample, ...] = ()  # gauge and windowed counter, one per GPU and Xid
    row_remap: tuple[GpuSample, ...] = ()
    # Per node with GPU loss now: when the run of observed loss began (see prom_view).
    loss_since: tuple[tuple[str, datetime], ...] = ()
    cordoned: tuple[str, ...] = ()  # nodes kube-state-metrics reports unschedulable
    # Running, on the nodes queries.gpu_pods names (kube-state-metrics)
    gpu_pods: tuple[GpuPod, ...] = ()
    gpu_holders: tuple[GpuHolder, ...] = ()  # pods on the hardware-Xid GPUs (dcgm-exporter)
    xid_hosts: tuple[HostLabels, ...] = ()  # naming labels of the Xid gauge's series
    exporter_hosts: tuple[HostLabels, ...] = ()  # … of every dcgm-exporter (GPU_TEMP or Xid)
    # Node signals. Nodes whose agent says nvidia-match FAILed at every step since
    # `nvml_since`, up to now (the same run of steps as GPU loss).
    nvml_since: tuple[tuple[str, datetime], ...] = ()
    nvml_status: tuple[AgentCheck, ...] = ()  # now, on nodes failing it or unschedulable
    service_pods: tuple[ServicePod, ...] = ()  # the selected pods on unschedulable nodes
    service_seen: tuple[tuple[str, int], ...] = ()  # selector → pods it selects in the cluster
    # Node triggers without an Xid (guard/plan/triggers). Per node, its GPU count at each step
    # of the lookback (the lower of capacity and dcgm-exporter's GPUs), and when the run of
    # steps with at least the minimum of GPU pods rejected at admission began, with the count now.
    gpu_counts: tuple[tuple[str, tuple[tuple[datetime, int], ...]], ...] = ()
    admission_since: tuple[tuple[str, datetime], ...] = ()
    admission_now: tuple[tuple[str, int], ...] = ()
    # Fabric (dcgm-exporter's Fabric Manager status): when the run of steps with a GPU of the
    # node in Failure began; the nodes with a GPU not in Success now; whether any series of the
    # field exists (None: not asked, as in the watch's narrowed reads).
    fabric_since: tuple[tuple[str, datetime], ...] = ()
    fabric_not_success: tuple[str, ...] = ()
    fabric_seen: bool | None = None
    # Series refused at the boundary; every fact of their nodes is left out above.
    unreadable: tuple[PromUnreadable, ...] = ()

    def agent(self, node: str) -> tuple[AgentCheck, ...]:
        return tuple(a for a in self.nvml_status if a.node == node)


@dataclass(frozen=True, slots=True)
class GuardEvent:
    """One of the guard's own Events (label-selected in `default`), by its deterministic name."""

    name: str
    node: str
    reason: str
    count: int


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One GPU, or a MIG device of one, a DRA driver publishes in a node's ResourceSlice: where it
    is (driver, pool, name) and which GPU (`uuid`, a MIG device's `parentUUID`, `pcieBusID`)."""

    node: str
    driver: str
    pool: str
    name: str
    uuid: str  # the whole GPU's; "" when the driver gives none, or for a MIG device
    pci: str  # normalised PCI address, "" when the driver gives none
    parent_uuid: str = ""  # a MIG device's GPU (the driver's `parentUUID`)

    @property
    def ref(self) -> str:
        """``<driver>/<pool>/<device>``: what a DeviceTaintRule selects."""
        return f"{self.driver}/{self.pool}/{self.name}"


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim of the jobs namespace: its uid and the devices its allocation names (empty
    unallocated: the resourceclaim controller clears it once the claim's Pod has finished)."""

    name: str
    uid: str
    allocated: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TaintRule:
    """A DeviceTaintRule as read: its selector and taint; `guard`: it carries the guard's label
    (only those are ever deleted, and only by name and uid)."""

    name: str
    uid: str
    guard: bool
    driver: str
    pool: str
    device: str
    key: str
    value: str
    effect: str
    node: str = ""  # the guard's node annotation on its own rules
    record: str = ""  # the guard's incident annotation on its own rules (guard.plan.device_taint)

    @property
    def ref(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


# The isolation units (guard.plan.units registers each): how the guard takes a GPU out of service.
Unit = Literal["cordon", "device-taint"]


@dataclass(frozen=True, slots=True)
class Isolation:
    """One isolation the guard holds, whatever its unit, made from the node's records and the
    guard's DeviceTaintRules (guard.codec.records `isolations`): what the breaker counts and the
    return table (guard.plan.return_rule) decides about. An unreadable record's fields are empty."""

    unit: Unit
    node: str
    gpu: str  # the GPU's UUID; "" for a cordon without a GPU or an unreadable record
    pci: str
    reason: str  # xid-79, nvml-mismatch, conformance-<item>; "" when unreadable
    at: datetime | None  # when the guard isolated it
    boot_id: str  # the node's boot at the isolation ("" unknown)
    rule: str = ""  # device-taint: a guard rule whose record cannot be read, by name

    @property
    def key(self) -> str:
        """One per cordoned node; one per tainted GPU (a GPU with several device rules once)."""
        if self.unit == "cordon":
            return f"cordon/{self.node}"
        return f"{self.node}/{self.gpu.lower() or self.rule or 'unreadable'}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: datetime
    nodes: tuple[NodeInfo, ...]
    jobs: tuple[JobInfo, ...]
    gpu_pods: tuple[GpuPod, ...]
    ledger: tuple[LedgerLine, ...]
    prom: PromView
    events: tuple[GuardEvent, ...] = ()
    # Objects the guard could not even name (a Node or guard Job without a name, only possible
    # in a hand-made file): one line each, reported and otherwise ignored.
    ignored: tuple[str, ...] = ()
    ledger_bytes: int = 0  # the ledger ConfigMap's size as read (guard.doors.ledger_store.size_of)
    # DRA: the GPUs the DRA driver publishes (ResourceSlices) and the DeviceTaintRules read.
    devices: tuple[DraDevice, ...] = ()
    taint_rules: tuple[TaintRule, ...] = ()
    claims: tuple[Claim, ...] = ()  # the jobs namespace's ResourceClaims

    def node(self, name: str) -> NodeInfo | None:
        return next((n for n in self.nodes if n.name == name), None)
