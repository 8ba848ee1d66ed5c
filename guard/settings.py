"""One frozen value with every setting of a guard run; built once by the CLI. A site setting's
help is its field's `metadata` (guard/settings_flags.py makes ``--field-name`` and
``GUARD_FIELD_NAME`` of it). Defaults come from the incident write-up the guard was built from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from guard.gpu_classes import parse_classes
from guard.names import PRINTABLE_WORD, is_dns_label, is_dns_subdomain, is_label_pair
from guard.runbook import PUBLISHED_URL
from guard.wire import allowed_dns_prefixes, parse_allowed_dns, parse_exact

# Bounds the admission policies enforce on the guard's Jobs (the policy generator imports these);
# the Jobs' deadlines and TTLs are fixed values within them (tests/unit/test_cli_input.py).
JOB_DEADLINE_MIN_S = 1
JOB_DEADLINE_MAX_S = 3600
JOB_TTL_MIN_S = 1
JOB_TTL_MAX_S = 2_592_000  # 30 days
# Other bounds: no setting is meant to go near them; they turn typing errors and overflow
# (a duration of 10**30 s) into one usage line instead of a failure in the middle of a cycle.
MAX_DURATION_S = 86_400
KUBECONFIG_HELP = (
    "Kubeconfig path; else $KUBECONFIG, else in-cluster, else ~/.kube/config (kubectl's rule)"
)
CRONJOB_DEADLINE_S = 270  # activeDeadlineSeconds of manifests/base/cronjob.yaml
# The in-run watch ends this long before the CronJob's deadline: the last decision's reads and
# writes and the Lease's release fit in it (guard/watch.py). Not longer: a pod that starts a
# minute late must still watch past the next scrape step of a fault at the tick's end.
WATCH_MARGIN_S = 30
# The longest lease_duration_s, so the longest leaseDurationSeconds a run writes: a killed run's
# Lease is free again within the CronJob's deadline (guard/doors/lease.py; the guard-scope policy).
LEASE_MAX_S = CRONJOB_DEADLINE_S

# Upstreams counted as internal when Settings.conformance_allowed_dns is empty: private, shared
# (CGNAT), link-local and loopback IPv4. The incident's resolver was a public one.
INTERNAL_UPSTREAMS = (
    "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,169.254.0.0/16,127.0.0.0/8"
)
MAX_XID = 999_999  # the reason annotation carries at most six digits
LEDGER_NAME_MAX = 253 - len("-archive-999999")  # a ConfigMap name with room for its archives


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


class SettingsError(ValueError):
    """Settings that the guard refuses; `problems` is (field, what is wrong) for each."""

    def __init__(self, problems: tuple[tuple[str, str], ...]) -> None:
        super().__init__("; ".join(f"{name}: {text}" for name, text in problems))
        self.problems = problems


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
    dcgm_selector: str = _opt(
        "",
        "PromQL label matchers every dcgm-exporter series must carry, e.g."
        ' job="nvidia-dcgm-exporter" (the GPU Operator\'s); empty: any job',
    )
    ksm_selector: str = _opt(
        "",
        "PromQL label matchers every kube-state-metrics series must carry, e.g."
        ' job="kube-state-metrics" (kube-prometheus-stack\'s); empty: any job',
    )
    kubeconfig: str = _opt("", KUBECONFIG_HELP)
    # Detection.
    cadence_s: int = 300  # the CronJob's schedule; a lost evidence Job is made again within 2
    hold_window_s: int = _opt(600, "GPU loss must hold this long before a cordon")
    fast_hold_window_s: int = _opt(120, "Shorter hold for hardware-certain Xids (fast path)")
    fast_path_xids: tuple[int, ...] = _opt((79,), "Hardware-certain Xids that use the short hold")
    user_code_xids: tuple[int, ...] = _opt(
        (13, 31, 43, 45, 68, 109), "Xids caused by user code: never a reason to cordon"
    )
    query_step_s: int = 60  # the hold window's subquery resolution
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
    return_conformance: bool = _opt(
        True, "Run the conformance Job of the new boot before the load test and the uncordon"
    )
    conformance_control_plane_version: str = _opt(
        "", "RKE2/Kubernetes version of the control plane for the conformance Job (empty: skip)"
    )
    conformance_allowed_dns: str = _opt(
        "", "CIDRs (comma-separated) the pods' upstream resolvers must be in (empty: skip)"
    )
    # Names (owner: security; the admission policies in policies/ are generated from these).
    annotation_prefix: str = "gpu-node-guard.io/"  # the prefix of the guard's node annotations
    namespace: str = "gpu-node-guard"  # the guard's (CronJob, ledger, Lease): its pod's
    jobs_namespace: str = "gpu-node-guard-jobs"  # the guard's Jobs; their pods never count
    ledger_configmap: str = "gpu-fault-ledger"  # the fault ledger
    job_service_account: str = "gpu-node-guard-job"  # the Jobs' ServiceAccount (jobs namespace)
    gpu_node_label: str = "nvidia.com/gpu.present=true"  # on every GPU node; the Jobs' nodeSelector
    # Jobs.
    image: str = "ghcr.io/gpu-node-guard/gpu-node-guard:0.1.0"  # evidence, conformance, fence Jobs
    loadtest_image: str = "ghcr.io/gpu-node-guard/gpu-node-guard-loadtest:0.1.0"  # load-test Job
    evidence_deadline_s: int = 600  # activeDeadlineSeconds: evidence, conformance, fence
    loadtest_deadline_s: int = 1800  # activeDeadlineSeconds of the load-test Job
    job_ttl_s: int = 7 * 86400  # ttlSecondsAfterFinished of every guard Job
    loadtest_duration_s: int = 90  # the matmul burn per GPU
    loadtest_matrix_size: int = 8192  # the burn's square fp16 matrix
    loadtest_min_ratio: float = 0.8  # pass: min/max per-GPU throughput
    # Lifecycle checks: after each reboot, onboarding, all-reduce (docs/lifecycle.md, onboarding.md)
    boot_check: bool = _opt(
        True,
        "Run the conformance Job on a GPU node after every new boot (a bootID not yet checked);"
        " a FAIL cordons it conformance-<item>",
    )
    boot_check_max_jobs: int = _opt(
        20,
        "At most this many after-reboot and onboarding conformance Jobs run at once; a cycle"
        " starts new ones only below it (a first deployment's backlog drains this many per cycle)",
    )
    boot_check_job_ttl_s: int = 21_600  # ttlSecondsAfterFinished of the after-reboot Jobs
    boot_check_return_loadtest: bool = _opt(
        False, "A node cordoned for conformance also passes the load test before it returns"
    )
    onboarding_taint: str = _opt(
        "gpu-node-guard.io/onboarding=pending:NoSchedule",
        "key=value:effect a new node registers with; removed once conformance and the burn-in"
        " pass (empty: no onboarding gate)",
    )
    onboarding_burnin_s: int = 900  # the onboarding load test's burn (longer than the return's)
    loadtest_allreduce: bool = _opt(True, "The load test all-reduces across every GPU (NCCL)")
    loadtest_allreduce_min_ratio: float = 0.7  # each GPU's all-reduce bandwidth / the best's
    loadtest_allreduce_timeout_s: int = 60  # an all-reduce rank silent this long is hung
    # Node signals: the agent's driver/NVML mismatch, the service network a node needs to return.
    nvml_mismatch_cordon: bool = _opt(
        True,
        "Cordon a node whose node agent reports nvidia-match failed for nvml_mismatch_hold_s "
        "(reason nvml-mismatch)",
    )
    nvml_mismatch_hold_s: int = 0  # the driver/NVML mismatch's hold (0: hold_window_s)
    service_network_kube_proxy_namespace: str = _opt(
        "kube-system", "Namespace of the kube-proxy pods (empty: any namespace)"
    )
    service_network_kube_proxy_pods: str = _opt(
        "kube-proxy-.+",
        "Regex of kube-proxy pod names (RKE2's static pod kube-proxy-<node>, kubeadm's DaemonSet "
        "pods) that must be Ready on a node before it returns; empty: no kube-proxy condition",
    )
    service_network_cni_namespace: str = _opt(
        "", "Namespace of the CNI DaemonSets (empty: any, e.g. Calico's calico-system)"
    )
    service_network_cni_daemonsets: str = _opt(
        "rke2-canal|canal|calico-node|cilium",
        "Regex of the CNI DaemonSet names whose pod must be Ready on a node before it returns; "
        "empty: no CNI condition",
    )
    # GPU isolation beside the node cordon (docs/isolation.md): the fence Job on the host.
    fence_gpu: bool = _opt(
        False,
        "Fence the cordon's GPU on the host (compute mode PROHIBITED, read back) until its return",
    )
    fence_drain: bool = _opt(
        False,
        "The fence also drains the GPU (nvidia-smi drain; only where the product supports it)",
    )
    # Writes (the executor, the API door, the ledger's storage).
    cycle_deadline_s: int = 200  # transient API errors and conflicts retried until then
    api_timeout_s: float = 10.0  # one API server request
    api_page_size: int = _opt(
        500,
        "Nodes per page of the node list: one page of raw Nodes (about 14 KB each) is alive at a "
        "time; larger pages mean fewer requests, more memory",
    )
    # The in-run watch and the cycle's Lease (guard/watch.py, guard/doors/lease.py).
    watch_until_s: int = CRONJOB_DEADLINE_S - WATCH_MARGIN_S  # after the Job's schedule
    scrape_interval_s: int = _opt(
        15,
        "Scrape interval of dcgm-exporter and kube-state-metrics: the watch polls once per scrape "
        "and re-reads a due node's loss history at this step (a divisor of query_step_s)",
    )
    job_name: str = ""  # the run's Job, its name ends in its schedule (the watch's end)
    lease_duration_s: int = 90  # the Lease expires this long after its last renewal
    ledger_archive_bytes: int = 768 * 1024  # past it, a ledger write archives its oldest lines
    # The base of every runbook link, absolute (docs/alerts.md, docs/status.md).
    runbook_base_url: str = _opt(
        PUBLISHED_URL,
        "Absolute URL of docs/runbook.md (a site's own copy) that every hint links: the alerts'"
        " runbook_url (through the alerts component), the log's next= and status",
    )
    # Metrics (the push at the end of a run; docs/metrics.md).
    pushgateway_url: str = _opt(
        "",
        "Pushgateway base URL (http:// or https://, no credentials): every run that is not a dry "
        "run pushes its gpu_node_guard_* metrics there at the end (empty: no push)",
    )
    # The quarantine budget: the repair time a verdict is expected to take (guard/figures.py);
    # an isolation past it gets one Warning Event, a state in `status` and an alert.
    budget_reset_h: float = _opt(4.0, "Expected repair time of a GPU reset verdict, hours")
    budget_power_cycle_h: float = _opt(24.0, "Expected repair time of a power cycle, hours")
    budget_rma_h: float = _opt(504.0, "Expected repair time of an RMA (card swap), hours")
    budget_human_h: float = _opt(24.0, "Expected repair time of a human verdict, hours")
    # Node triggers without an Xid (docs/triggers.md): gpu-short, admission-rejected, fabric.
    gpu_classes: str = _opt(
        "",
        "Node classes and their GPU count, `selector:count` entries split by `;` (selector: "
        "k=v,k!=v,k on Node labels; count: a number, or `auto` for the majority of the class's "
        "other nodes); a node in none is not checked. Empty: no gpu-short trigger",
    )
    gpu_short_hold_s: int = 0  # below its class's GPU count this long: a cordon (0: hold window)
    admission_rejected_min_pods: int = _opt(
        5,
        "GPU pods rejected with UnexpectedAdmissionError on one node within 10 minutes that make "
        "it a candidate (reason admission-rejected; 0: the trigger is off)",
    )
    admission_rejected_window_s: int = 600  # a rejected pod counts for this long after its creation
    admission_rejected_hold_s: int = 0  # at or over the minimum this long (0: the hold window)
    fabric_hold_s: int = 0  # Fabric Manager status Failure this long (0: hold window)
    # A shared cause: a failure domain the site knows (docs/triggers.md, "Domain incidents").
    topology_label: str = _opt(
        "",
        "Node label key whose value names a shared failure domain (rack, switch, NVLink "
        "domain): isolations and candidates sharing a value within an hour are one domain "
        "incident. Empty: off",
    )

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise SettingsError(tuple(problems))

    # Each trigger's hold: its own, else the hold window.
    @property
    def gpu_short_hold(self) -> int:
        return self.gpu_short_hold_s or self.hold_window_s

    @property
    def admission_hold(self) -> int:
        return self.admission_rejected_hold_s or self.hold_window_s

    @property
    def fabric_hold(self) -> int:
        return self.fabric_hold_s or self.hold_window_s

    @property
    def nvml_hold_s(self) -> int:
        return self.nvml_mismatch_hold_s or self.hold_window_s

    @property
    def gpu_node_selector(self) -> tuple[str, str]:
        """`gpu_node_label` as (key, value), the nodeSelector of every guard Job."""
        key, _, value = self.gpu_node_label.partition("=")
        return key, value

    @property
    def onboarding_gate(self) -> tuple[str, str, str] | None:
        """`onboarding_taint` as (key, value, effect); None when there is no gate."""
        return parse_taint(self.onboarding_taint) if self.onboarding_taint else None

    @property
    def dcgm_node_label_names(self) -> tuple[str, ...]:
        return tuple(v.strip() for v in self.dcgm_node_labels.split(",") if v.strip())

    @property
    def prometheus_header_pairs(self) -> tuple[tuple[str, str], ...]:
        """``Name=value`` entries of `prometheus_headers`, in order."""
        pairs = (e.partition("=") for e in self.prometheus_headers.split(",") if e.strip())
        return tuple((name.strip(), value.strip()) for name, _, value in pairs)


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_taint(text: str) -> tuple[str, str, str] | None:
    """``key[=value]:effect`` as kubelet's --register-with-taints and RKE2's node-taint write it;
    None when it is not one (a valid label key and value, a known effect).

    >>> parse_taint("example.com/gate:NoExecute"), parse_taint("gate=a b:NoSchedule")
    (('example.com/gate', '', 'NoExecute'), None)
    """
    pair, sep, effect = text.rpartition(":")
    key, _, value = pair.partition("=")
    if not sep or effect not in TAINT_EFFECTS or not is_label_pair(f"{key}={value}"):
        return None
    return key, value, effect


# Pod and DaemonSet name patterns go into PromQL strings as RE2: names' own characters and the
# regex operators, nothing that needs escaping (no quote, no backslash).
_NAME_PATTERN = re.compile(r"^[-a-z0-9.|()\[\]*+?{},^$]+\Z", re.ASCII)


def _is_name_pattern(text: str) -> bool:
    return bool(_NAME_PATTERN.fullmatch(text)) and is_re2(text)


_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_CLASS = re.compile(r"\[\^?\]?[^\]]*\]")
# What Python's re takes and RE2 (Prometheus) refuses: a repeat of a repeat (possessive `a++`,
# `a*+`), lookaround, atomic groups, named backreferences, and backreferences.
_NOT_RE2 = re.compile(r"[*+?}][*+]|\(\?(?:[=!>]|<[=!]|P=)|\\[1-9]")


def is_re2(text: str) -> bool:
    """A regex both Python and Prometheus's RE2 accept, so a pattern refused at the first query
    is refused at start instead.

    >>> is_re2("kube-proxy-.+"), is_re2("a{1001}"), is_re2("a++"), is_re2("[*+]x")
    (True, False, False, True)
    """
    try:
        re.compile(text)
    except re.error:
        return False
    bare = _CLASS.sub("", text)
    repeats = (int(n) for m in _REPEAT.finditer(bare) for n in m.groups() if n)
    return not _NOT_RE2.search(bare) and all(n <= 1000 for n in repeats)


# No user:password@ in a logged URL.
_HTTP_URL = re.compile(r"^https?://[^\s/@]+(/\S*)?\Z", re.ASCII)


def _listed(text: str) -> tuple[str, ...]:
    """Setting names, whitespace-separated (a wrong one fails at import: `setting_fields`)."""
    return tuple(text.split())


# Settings by lifetime (docs/deploy.md, "Settings by lifetime"). What a site sets: a flag and a
# GUARD_* variable each (its overlay's settings.env), in these groups, in this order.
SITE_GROUPS: dict[str, tuple[str, ...]] = {
    "reading": _listed(
        "prometheus_url prometheus_bearer_token_file prometheus_service_account_token "
        "prometheus_basic_auth_user prometheus_basic_auth_password_file prometheus_ca_file "
        "prometheus_cert_file prometheus_key_file prometheus_headers kubeconfig"
    ),
    "selectors": _listed("dcgm_node_labels dcgm_selector ksm_selector scrape_interval_s"),
    "hold": _listed(
        "hold_window_s fast_hold_window_s fast_path_xids user_code_xids reset_class_xids "
        "memory_class_xids nvml_mismatch_cordon"
    ),
    "breaker": _listed("breaker_max_nodes breaker_max_fraction"),
    "return": _listed(
        "repeat_fault_limit return_conformance conformance_control_plane_version "
        "conformance_allowed_dns loadtest_allreduce service_network_kube_proxy_namespace "
        "service_network_kube_proxy_pods service_network_cni_namespace "
        "service_network_cni_daemonsets"
    ),
    "lifecycle": _listed("boot_check boot_check_return_loadtest onboarding_taint"),
    "fence": _listed("fence_gpu fence_drain"),
    "triggers": _listed("gpu_classes admission_rejected_min_pods topology_label"),
    "budget": _listed("budget_reset_h budget_power_cycle_h budget_rma_h budget_human_h"),
    "links": _listed("runbook_base_url pushgateway_url"),
    "large-site": _listed(
        "prometheus_timeout_s prometheus_max_answer_bytes prometheus_max_series "
        "api_page_size boot_check_max_jobs"
    ),
}
SITE_SETTINGS = tuple(name for group in SITE_GROUPS.values() for name in group)
# Site settings set together: one option and one GUARD_* variable each, written
# ``key=value,key=value`` (`--budget rma=720h,human=48h`, GUARD_BUDGET); a key left out keeps
# its default. Option → key → (its field, the unit its value may end in).
COMPOUNDS: dict[str, dict[str, tuple[str, str]]] = {
    "prometheus_tls": {
        "ca": ("prometheus_ca_file", ""),
        "cert": ("prometheus_cert_file", ""),
        "key": ("prometheus_key_file", ""),
    },
    "budget": {
        "reset": ("budget_reset_h", "h"),
        "power-cycle": ("budget_power_cycle_h", "h"),
        "rma": ("budget_rma_h", "h"),
        "human": ("budget_human_h", "h"),
    },
    "prometheus_limits": {
        "timeout": ("prometheus_timeout_s", "s"),
        "answer-bytes": ("prometheus_max_answer_bytes", ""),
        "series": ("prometheus_max_series", ""),
    },
}
COMPOUND_OF = {f: name for name, keys in COMPOUNDS.items() for f, _ in keys.values()}


def site_options(names: tuple[str, ...]) -> tuple[str, ...]:
    """The options that set `names`: a compound's name in place of its first member, each once.

    >>> site_options(("prometheus_url", "prometheus_ca_file", "prometheus_key_file"))
    ('prometheus_url', 'prometheus_tls')
    """
    return tuple(dict.fromkeys(COMPOUND_OF.get(n, n) for n in names))


def compound_key(name: str) -> str:
    """The key of a compound's member (``budget_rma_h`` → ``rma``)."""
    return next(k for k, (f, _) in COMPOUNDS[COMPOUND_OF[name]].items() if f == name)


# What the CronJob's own manifest gives its pod: a GUARD_* variable only, no flag, never in
# settings.env (docs/deploy.md, "Settings by lifetime").
CRONJOB_ENV = _listed(
    "namespace job_name image loadtest_image cadence_s cycle_deadline_s watch_until_s "
    "lease_duration_s"
)
# Every other field is the guard's own value: no flag, no variable (`fixed_settings`); Python
# (tests, the policy generator) may still build a Settings with another value.
RENDER_SETTINGS = _listed(
    "memory_class_xids conformance_control_plane_version conformance_allowed_dns "
    "loadtest_allreduce fence_drain onboarding_taint"
)  # what reaches a Job's spec beside the images (`render`)
STATUS_GROUPS = ("reading", "selectors", "large-site")  # `status`: only where it reads from
# `report`: where it reads the cluster from and the quarantine budget (the rest decides nothing
# there; the CronJob's ConfigMap still gives the budget a site set).
REPORT_SETTINGS = ("kubeconfig", "api_page_size", *SITE_GROUPS["budget"])

# Layout, not runtime: names the manifests, the RBAC and the admission policies pin (docs/deploy.md,
# "Settings by lifetime"); the commands warn at start when one differs.
LAYOUT_SETTINGS = _listed(
    "namespace jobs_namespace job_service_account ledger_configmap annotation_prefix gpu_node_label"
)


def setting_default(name: str) -> Any:
    """The default of one setting, for commands that run without a Settings (inside Jobs)."""
    return next(f.default for f in fields(Settings) if f.name == name)


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_SERIES = 50_000


# One PromQL label matcher: name, operator, a double-quoted value without quotes, backslashes
# or control characters (it goes into every query of the exporter as written).
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\\x00-\x1f\x7f]*"\s*'
_MATCHERS = re.compile(rf"{_MATCHER}(,{_MATCHER})*", re.ASCII)
_MATCHERS_PROBLEM = (
    'must be empty or comma-separated PromQL label matchers such as job="kube-state-metrics"'
    " (=, !=, =~ or !~; no quotes or backslashes inside the value)"
)


def _is_matchers(text: str) -> bool:
    """
    >>> _is_matchers('job="a", namespace=~"gpu-operator|nvidia"'), _is_matchers('job=a')
    (True, False)
    >>> _is_matchers(''), _is_matchers('job="a"}) or vector(1) #'), _is_matchers('job="a\\nb"')
    (True, False, False)
    """
    if not text.strip():
        return True
    if _MATCHERS.fullmatch(text) is None:
        return False
    regexes = re.finditer(r'(=~|!~)\s*"([^"]*)"', text)
    return all(is_re2(m.group(2)) for m in regexes)


def setting_fields(names: tuple[str, ...] | None = None) -> tuple[Any, ...]:
    """The dataclass fields (those of `names`, in that order), for the CLI to build options."""
    if names is None:
        return fields(Settings)
    by_name = {f.name: f for f in fields(Settings)}
    return tuple(by_name[n] for n in names)


def fixed_settings() -> tuple[str, ...]:
    """The fields that are neither the site's nor the CronJob's: the guard's own values."""
    given = {*SITE_SETTINGS, *CRONJOB_ENV}
    return tuple(f.name for f in fields(Settings) if f.name not in given)


# (field, holds, what is wrong otherwise: a text, or made from the settings), checked in order.
Rule = tuple[str, Callable[["Settings"], object], "str | Callable[[Settings], str]"]


def _problems(s: Settings) -> list[tuple[str, str]]:
    return [
        (name, text if isinstance(text, str) else text(s))
        for name, holds, text in _RULES
        if not holds(s)
    ]


def _refusal(parse: Callable[[str], object], text: str) -> str:
    """What `parse` says is wrong with `text` (its ValueError), "" when it takes it."""
    try:
        parse(text)
    except ValueError as exc:
        return str(exc) or "refused"
    return ""


def _within(name: str, low: float, high: float, text: str = "") -> Rule:
    return name, lambda s: low <= getattr(s, name) <= high, text or f"must be in {low}..{high}"


def _is(name: str, ok: Callable[[Any], object], text: str) -> Rule:
    return name, lambda s: ok(getattr(s, name)), text


def _empty_or(name: str, ok: Callable[[Any], object], text: str) -> Rule:
    return name, lambda s: not getattr(s, name) or ok(getattr(s, name)), text


def _up_to(name: str, other: str) -> Rule:
    return name, lambda s: 0 < getattr(s, name) <= getattr(s, other), f"must be in (0, {other}]"


def _apart(name: str, other: str, text: str) -> Rule:
    """`name` is refused when `other` lists a fast-path Xid."""
    return name, lambda s: not set(s.fast_path_xids) & set(getattr(s, other)), text


def _both(name: str, other: str) -> Rule:
    text = f"goes together with {other} (both or neither)"
    return name, lambda s: bool(getattr(s, name)) == bool(getattr(s, other)), text


def _label_names(labels: tuple[str, ...]) -> bool:
    return bool(labels) and all(_LABEL_NAME.fullmatch(v) and not v.startswith("__") for v in labels)


def _xids(xids: tuple[int, ...]) -> bool:
    return all(1 <= x <= MAX_XID for x in xids)


_CREDENTIALS = _listed(
    "prometheus_bearer_token_file prometheus_service_account_token prometheus_basic_auth_user"
)
_XID_LISTS = ("fast_path_xids", "user_code_xids", "reset_class_xids", "memory_class_xids")
_LABEL = "must be a DNS-1123 label (a-z, 0-9, -; at most 63)"
_IMAGE = "must be an image reference without spaces"
_NAMESPACE = "must be empty (any) or a DNS-1123 label"
_PATTERN = "must be empty or a regex of a-z, 0-9, . - and | ( ) [ ] * + ? { } , ^ $"
_RULES: tuple[Rule, ...] = (
    # Where to read.
    _empty_or(
        "prometheus_url",
        _HTTP_URL.fullmatch,
        "must be http://host:port or https://host:port with an optional path prefix, no"
        " credentials (they would be logged: use --prometheus-basic-auth-user)",
    ),
    # A tenth of a second at least: 1e-320 passed `> 0` and timed out every request.
    _within("prometheus_timeout_s", 0.1, 600, "must be in [0.1, 600]"),
    (
        "prometheus_timeout_s",
        lambda s: not CRONJOB_DEADLINE_S <= s.prometheus_timeout_s <= 600,
        f"must be below the CronJob's activeDeadlineSeconds ({CRONJOB_DEADLINE_S}): one slow"
        " answer would outlive the run",
    ),
    # The upper bounds keep one answer well inside the guard's 384 Mi memory limit.
    _within("prometheus_max_answer_bytes", 65536, MAX_ANSWER_BYTES),
    _within("prometheus_max_series", 100, MAX_SERIES),
    _is("dcgm_selector", _is_matchers, _MATCHERS_PROBLEM),
    _is("ksm_selector", _is_matchers, _MATCHERS_PROBLEM),
    (
        "dcgm_node_labels",
        lambda s: _label_names(s.dcgm_node_label_names),
        "must be comma-separated Prometheus label names (not the reserved __…)",
    ),
    (
        "prometheus_headers",
        lambda s: all(_HEADER_NAME.fullmatch(n) and v for n, v in s.prometheus_header_pairs),
        "must be comma-separated Name=value with a valid header name",
    ),
    (
        "prometheus_headers",
        lambda s: all(v.isascii() and v.isprintable() for _, v in s.prometheus_header_pairs),
        "values must be printable ASCII (no line breaks)",
    ),
    (
        "prometheus_headers",
        lambda s: all(n.lower() != "authorization" for n, _ in s.prometheus_header_pairs),
        "must not set Authorization (it is logged): use a token file",
    ),
    _both("prometheus_basic_auth_user", "prometheus_basic_auth_password_file"),
    _both("prometheus_cert_file", "prometheus_key_file"),
    (
        "prometheus_bearer_token_file",
        lambda s: sum(bool(getattr(s, n)) for n in _CREDENTIALS) <= 1,
        "is one credential of three: set at most one of prometheus_bearer_token_file,"
        " prometheus_service_account_token and prometheus_basic_auth_user",
    ),
    # Detection, the breaker, the return.
    *(_is(n, _xids, f"must list Xids in 1..{MAX_XID}") for n in _XID_LISTS),
    _within("cadence_s", 1, MAX_DURATION_S),
    _within(
        "hold_window_s", 60, MAX_DURATION_S, f"must be at least 60 (and at most {MAX_DURATION_S})"
    ),
    _up_to("fast_hold_window_s", "hold_window_s"),
    _up_to("query_step_s", "fast_hold_window_s"),
    _within("breaker_max_nodes", 1, 10**6, "must be at least 1"),
    _within("breaker_max_fraction", 0.0, 1.0, "must be in [0, 1]"),
    _within("repeat_fault_limit", 1, 10**6, "must be at least 1"),
    _apart("fast_path_xids", "user_code_xids", "a fast-path Xid is a user-code Xid"),
    # A fast-path Xid is hardware-certain (79: the GPU fell off the bus): only a power cycle
    # brings it back, so `reset-done` after a reset must not return its node.
    _apart(
        "reset_class_xids",
        "reset_class_xids",
        "must not list a fast-path Xid (fast_path_xids: fixed only by a power cycle, "
        "never by a GPU reset)",
    ),
    *(_within(n, 0.01, 24 * 366, "must be in 0.01..8784 hours") for n in SITE_GROUPS["budget"]),
    # Names.
    _is(
        "annotation_prefix",
        lambda v: v.endswith("/") and is_dns_subdomain(v[:-1]),
        "must be a DNS subdomain followed by '/', e.g. gpu-node-guard.io/",
    ),
    _is("namespace", is_dns_label, _LABEL),
    _is(
        "ledger_configmap",
        lambda v: is_dns_subdomain(v, LEDGER_NAME_MAX),
        f"must be a DNS-1123 subdomain of at most {LEDGER_NAME_MAX} characters",
    ),
    _is("job_service_account", is_dns_subdomain, "must be a DNS-1123 subdomain (a-z, 0-9, -, .)"),
    _is("jobs_namespace", is_dns_label, _LABEL),
    ("jobs_namespace", lambda s: s.jobs_namespace != s.namespace, "must differ from namespace"),
    _is(
        "gpu_node_label",
        is_label_pair,
        "must be key=value, a valid label (e.g. nvidia.com/gpu.present=true)",
    ),
    # Jobs and writes.
    _is("image", PRINTABLE_WORD.fullmatch, _IMAGE),
    _is("loadtest_image", PRINTABLE_WORD.fullmatch, _IMAGE),
    _within(
        "cycle_deadline_s",
        1,
        CRONJOB_DEADLINE_S - 10,
        f"must be in 1..{CRONJOB_DEADLINE_S - 10} (below the CronJob's activeDeadlineSeconds,"
        f" {CRONJOB_DEADLINE_S})",
    ),
    _within("api_page_size", 100, 5000),
    _within(
        "watch_until_s",
        0,
        CRONJOB_DEADLINE_S - WATCH_MARGIN_S,
        f"must be in 0..{CRONJOB_DEADLINE_S - WATCH_MARGIN_S} (the CronJob's"
        f" activeDeadlineSeconds, {CRONJOB_DEADLINE_S}, less {WATCH_MARGIN_S})",
    ),
    (
        "scrape_interval_s",
        lambda s: 5 <= s.scrape_interval_s <= 120 and s.query_step_s % s.scrape_interval_s == 0,
        "must be in 5..120 and divide query_step_s",
    ),
    _empty_or("job_name", is_dns_subdomain, "must be empty or a Job name (a DNS-1123 subdomain)"),
    (
        "lease_duration_s",
        lambda s: 2 * s.scrape_interval_s <= s.lease_duration_s <= LEASE_MAX_S,
        f"must be in 2 × scrape_interval_s..{LEASE_MAX_S} (renewed at every poll; free"
        " again within the CronJob's deadline)",
    ),
    # Links and node signals.
    _empty_or(
        "pushgateway_url",
        _HTTP_URL.fullmatch,
        "must be http://host:port or https://host:port with an optional path, no credentials",
    ),
    (
        "runbook_base_url",
        lambda s: _HTTP_URL.fullmatch(s.runbook_base_url) and "#" not in s.runbook_base_url,
        "must be an absolute http:// or https:// URL without a #fragment",
    ),
    _empty_or("service_network_kube_proxy_namespace", is_dns_label, _NAMESPACE),
    _empty_or("service_network_cni_namespace", is_dns_label, _NAMESPACE),
    _empty_or("service_network_kube_proxy_pods", _is_name_pattern, _PATTERN),
    _empty_or("service_network_cni_daemonsets", _is_name_pattern, _PATTERN),
    (
        "service_network_cni_daemonsets",
        lambda s: s.service_network_kube_proxy_pods or s.service_network_cni_daemonsets,
        "must not be empty when service_network_kube_proxy_pods is empty too",
    ),
    # Triggers and the lifecycle.
    (
        "gpu_classes",
        lambda s: not _refusal(parse_classes, s.gpu_classes),
        lambda s: _refusal(parse_classes, s.gpu_classes),
    ),
    _within("admission_rejected_min_pods", 0, 100000),
    _empty_or(
        "topology_label",
        lambda v: is_label_pair(f"{v}=x"),
        "must be a Node label key (example.com/rack) or empty",
    ),
    _within("boot_check_max_jobs", 1, 1000),
    _empty_or(
        "onboarding_taint",
        parse_taint,
        f"must be key=value:effect (effect {', '.join(TAINT_EFFECTS)}), e.g."
        " gpu-node-guard.io/onboarding=pending:NoSchedule, or empty",
    ),
    # What the conformance Job's own flags refuse (exit 2 on the node, every time).
    _empty_or(
        "conformance_control_plane_version",
        parse_exact,
        "must be empty or a version like v1.34.3+rke2r1",
    ),
    _empty_or(
        "conformance_allowed_dns",
        lambda v: not _refusal(parse_allowed_dns, v),
        "must be empty or comma-separated CIDRs",
    ),
    _empty_or(
        "conformance_allowed_dns",
        lambda v: _refusal(parse_allowed_dns, v) or not _refusal(allowed_dns_prefixes, v),
        "each CIDR at most 8 bits short of a whole octet (IPv4) or 16-bit group (IPv6): the "
        "guard pushes the prefixes it covers for the CoreDNS alert",
    ),
)
