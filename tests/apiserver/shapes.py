"""Out-of-shape guard Jobs: one row per route a stolen guard token or a namespace admin would try
(issue: hooks, probes, argv and env injection, volumes, hardening dropped, placement, scale,
priority, images, identity). Each row changes one thing in a Job the planners really render and
names the refusal it must get: the kind's policy (`gpu-node-guard-<kind>-job`, and for Pods
`-pod`) or the namespace gate, with the policy's own words.

`{pod}` in a refusal stands for the PodSpec's path: spec.template.spec in a Job, spec in a Pod.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guard.jobs import JobKind

Doc = dict[str, Any]
Change = Callable[[Doc], None]
POD = ("spec", "template", "spec")
C0 = (*POD, "containers", 0)
SC = (*C0, "securityContext")
CMD = (*C0, "command")
GUARD_IMAGE = "ghcr.io/gpu-node-guard/gpu-node-guard:0.1.0"
LOADTEST_IMAGE = "ghcr.io/gpu-node-guard/gpu-node-guard-loadtest:0.1.0"
PAYLOAD = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
SHELL = ["sh", "-c", "nsenter -t 1 -m -u -i -n -p -- sh -c 'id > /tmp/pwned'"]
LEDGER_VOLUME = {"name": "ledger", "configMap": {"name": "gpu-fault-ledger", "defaultMode": 493}}


def _walk(doc: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        doc = doc.setdefault(key, {}) if isinstance(key, str) else doc[key]
    return doc


def put(path: tuple[str | int, ...], value: object) -> Change:
    def change(doc: Doc) -> None:
        _walk(doc, path[:-1])[path[-1]] = copy.deepcopy(value)

    return change


def drop(path: tuple[str | int, ...]) -> Change:
    def change(doc: Doc) -> None:
        del _walk(doc, path[:-1])[path[-1]]

    return change


def add(path: tuple[str | int, ...], *items: object) -> Change:
    """Append to the list at `path` (created when absent)."""

    def change(doc: Doc) -> None:
        parent = _walk(doc, path[:-1])
        parent.setdefault(path[-1], []).extend(copy.deepcopy(list(items)))

    return change


def argv(edit: Callable[[list[str]], list[str]]) -> Change:
    def change(doc: Doc) -> None:
        command = _walk(doc, CMD[:-1])
        command["command"] = edit(list(command["command"]))

    return change


def both(*changes: Change) -> Change:
    def change(doc: Doc) -> None:
        for one in changes:
            one(doc)

    return change


def _set_arg(flag: str, value: str) -> Callable[[list[str]], list[str]]:
    def edit(command: list[str]) -> list[str]:
        command[command.index(flag) + 1] = value
        return command

    return edit


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    kind: JobKind
    change: Change
    says: str
    gate: bool = False  # refused by the namespace gate instead of the kind's policy
    pod_too: bool = True  # a PodSpec change: also tried as the Job controller's Pod
    privileged: bool = False  # asks for more than Pod Security `restricted`
    pod_says: str | None = None  # the Pod's refusal, where it differs from the Job's
    pod_gate: bool = False  # the Pod (not the Job) is refused by the gate

    @property
    def beyond_restricted(self) -> bool:
        return self.kind != "loadtest" or self.privileged


def probe(kind: JobKind, field: str) -> Case:
    return Case(
        f"{kind}-{field}-exec",
        kind,
        put((*C0, field), {"exec": {"command": SHELL}, "periodSeconds": 10}),
        f"{{pod}}.containers[0] may not hold field(s) {field}",
    )


NOT_ALLOWED = "{pod} may not hold field(s) "
PULL_SECRETS = "{pod}.imagePullSecrets must be at most 8 entries, each only a Secret name"
IN_C0 = "{pod}.containers[0] may not hold field(s) "
EV_CMD = "{pod}.containers[0].command must be gpu-node-guard evidence collect --node <node>"
CF_CMD = "{pod}.containers[0].command must be gpu-node-guard conformance --root /proc/1/root"
LT_CMD = "{pod}.containers[0].command must be gpu-node-guard loadtest run --backend torch"
FN_CMD = "{pod}.containers[0].command must be gpu-node-guard fence set --pci <pci> --uuid "
FN_DRAIN = "--drain only where the site sets fence_drain (GUARD_FENCE_DRAIN in the settings"
EV_SC = "{pod}.containers[0].securityContext must be exactly "
LT_SC = EV_SC
PSA = "violates PodSecurity"
HOOK = {"exec": {"command": SHELL}}

CASES: list[Case] = [
    # ── code execution in the privileged container: hooks and probes ────────────────────────
    Case(
        "evidence-poststart-hook",
        "evidence",
        put((*C0, "lifecycle"), {"postStart": HOOK}),
        IN_C0 + "lifecycle",
    ),
    Case(
        "evidence-prestop-hook",
        "evidence",
        put((*C0, "lifecycle"), {"preStop": HOOK}),
        IN_C0 + "lifecycle",
    ),
    Case(
        "conformance-poststart-hook",
        "conformance",
        put((*C0, "lifecycle"), {"postStart": HOOK}),
        IN_C0 + "lifecycle",
    ),
    Case(
        "loadtest-poststart-hook",
        "loadtest",
        put((*C0, "lifecycle"), {"postStart": HOOK}),
        IN_C0 + "lifecycle",
    ),
    probe("evidence", "livenessProbe"),
    probe("evidence", "readinessProbe"),
    probe("evidence", "startupProbe"),
    probe("conformance", "livenessProbe"),
    probe("loadtest", "startupProbe"),
    # ── argv: template injection, other programs, other flags, values that are not values ───
    Case(
        "evidence-args-history-template",
        "evidence",
        put((*C0, "args"), ["--history", PAYLOAD]),
        IN_C0 + "args",
    ),
    Case(
        "evidence-history-template-in-command",
        "evidence",
        argv(lambda c: [*c, "--history", PAYLOAD]),
        EV_CMD,
    ),
    Case(
        "evidence-request-template-cmdline",
        "evidence",
        argv(lambda c: [*c, "--request-template", "/proc/self/cmdline"]),
        EV_CMD,
    ),
    Case(
        "evidence-xid-classes-from-environ",
        "evidence",
        argv(lambda c: [*c, "--xid-classes", "/proc/self/environ"]),
        EV_CMD,
    ),
    Case(
        "evidence-host-root-elsewhere",
        "evidence",
        argv(lambda c: [*c, "--host-root", "/tmp"]),
        EV_CMD,
    ),
    Case("evidence-shell-instead", "evidence", put(CMD, SHELL), EV_CMD),
    Case(
        "evidence-python-instead",
        "evidence",
        put(CMD, ["python3", "-c", "import os; os.system('id')"]),
        EV_CMD,
    ),
    Case(
        "evidence-runs-conformance",
        "evidence",
        put(
            CMD,
            [
                "gpu-node-guard",
                "conformance",
                "--root",
                "/proc/1/root",
                "--nsenter",
                "--role",
                "worker",
                "--output",
                "json",
            ],
        ),
        EV_CMD,
    ),
    Case("evidence-node-with-shell", "evidence", argv(_set_arg("--node", "gpu-a;id")), EV_CMD),
    Case(
        "evidence-node-not-the-pods",
        "evidence",
        argv(_set_arg("--node", "control-plane-1")),
        EV_CMD,
    ),
    Case(
        "evidence-pci-not-an-address",
        "evidence",
        argv(_set_arg("--pci", "0000:99:00.0 $(id)")),
        EV_CMD,
    ),
    Case("evidence-xid-not-a-number", "evidence", argv(_set_arg("--xid", "79 or 13")), EV_CMD),
    Case("evidence-uuid-free-text", "evidence", argv(_set_arg("--uuid", PAYLOAD)), EV_CMD),
    Case(
        "evidence-count-free-text",
        "evidence",
        argv(_set_arg("--card-incidents", "2nd time")),
        EV_CMD,
    ),
    Case(
        "evidence-flags-reordered",
        "evidence",
        argv(lambda c: c[:3] + c[5:7] + c[3:5] + c[7:]),
        EV_CMD,
    ),
    Case("evidence-flag-dropped", "evidence", argv(lambda c: c[:-2]), EV_CMD),
    Case("conformance-fix", "conformance", argv(lambda c: [*c[:2], "--fix", *c[2:]]), CF_CMD),
    Case("conformance-fix-at-the-end", "conformance", argv(lambda c: [*c, "--fix"]), CF_CMD),
    Case("conformance-root-is-slash", "conformance", argv(_set_arg("--root", "/")), CF_CMD),
    Case(
        "conformance-version-free-text",
        "conformance",
        argv(lambda c: [*c[:7], "--control-plane-version", PAYLOAD, *c[7:]]),
        CF_CMD,
    ),
    # The fence writes a GPU's compute mode: only set or lift of one GPU, drain only if allowed.
    Case("fence-shell-instead", "fence", put(CMD, SHELL), FN_CMD),
    Case(
        "fence-runs-evidence",
        "fence",
        put(CMD, ["gpu-node-guard", "evidence", "collect", "--node", "x"]),
        FN_CMD,
    ),
    Case("fence-another-mode", "fence", argv(lambda c: [c[0], c[1], "reset", *c[3:]]), FN_CMD),
    Case("fence-compute-mode-word", "fence", argv(lambda c: [*c, "-c", "DEFAULT"]), FN_CMD),
    Case("fence-pci-free-text", "fence", argv(_set_arg("--pci", "0000:99:00.0;id")), FN_CMD),
    Case("fence-uuid-unknown", "fence", argv(_set_arg("--uuid", "unknown")), FN_CMD),
    Case("fence-uuid-template", "fence", argv(_set_arg("--uuid", PAYLOAD)), FN_CMD),
    Case("fence-host-root-elsewhere", "fence", argv(lambda c: [*c, "--host-root", "/tmp"]), FN_CMD),
    Case(
        "fence-termination-log-elsewhere",
        "fence",
        argv(lambda c: [*c, "--termination-log", "/proc/1/root/etc/shadow"]),
        FN_CMD,
    ),
    Case("fence-drain-the-site-did-not-allow", "fence", argv(lambda c: [*c, "--drain"]), FN_DRAIN),
    Case(
        "fence-poststart-hook",
        "fence",
        put((*C0, "lifecycle"), {"postStart": HOOK}),
        IN_C0 + "lifecycle",
    ),
    Case("fence-privileged", "fence", put((*SC, "privileged"), True), EV_SC),
    Case(
        "fence-hostpath-dev",
        "fence",
        both(
            put((*POD, "volumes"), [{"name": "dev", "hostPath": {"path": "/dev"}}]),
            put((*C0, "volumeMounts"), [{"name": "dev", "mountPath": "/dev"}]),
        ),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "loadtest-runs-evidence",
        "loadtest",
        put(CMD, ["gpu-node-guard", "evidence", "collect", "--node", "x"]),
        LT_CMD,
    ),
    Case("loadtest-numpy-backend", "loadtest", argv(_set_arg("--backend", "numpy")), LT_CMD),
    Case(
        "loadtest-duration-endless", "loadtest", argv(_set_arg("--duration-s", "100000000")), LT_CMD
    ),
    Case("loadtest-size-huge", "loadtest", argv(_set_arg("--size", "99999999")), LT_CMD),
    Case(
        "loadtest-gpus-differ-from-request",
        "loadtest",
        argv(_set_arg("--expected-gpus", "4")),
        "[nvidia.com/gpu] must be the --expected-gpus",
    ),
    # ── environment: template path, interpreter and loader hooks, secrets ────────────────────
    Case(
        "evidence-env-request-template",
        "evidence",
        put(
            (*C0, "env"),
            [
                {"name": "GUARD_REQUEST_TEMPLATE", "value": "/proc/self/environ"},
                {"name": "X", "value": PAYLOAD},
            ],
        ),
        IN_C0 + "env",
    ),
    Case(
        "evidence-env-pythonwarnings-browser",
        "evidence",
        put(
            (*C0, "env"),
            [
                {"name": "PYTHONWARNINGS", "value": "all:0:antigravity.x:0:0"},
                {"name": "BROWSER", "value": "/bin/sh -c id #%s"},
            ],
        ),
        IN_C0 + "env",
    ),
    Case(
        "evidence-env-ld-preload-from-ledger",
        "evidence",
        both(
            put((*C0, "env"), [{"name": "LD_PRELOAD", "value": "/ledger/x.so"}]),
            put((*POD, "volumes"), [LEDGER_VOLUME]),
            put((*C0, "volumeMounts"), [{"name": "ledger", "mountPath": "/ledger"}]),
        ),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "evidence-env-pythonpath",
        "evidence",
        put((*C0, "env"), [{"name": "PYTHONPATH", "value": "/ledger"}]),
        IN_C0 + "env",
    ),
    Case(
        "conformance-env-fix",
        "conformance",
        put((*C0, "env"), [{"name": "GUARD_CONFORMANCE_FIX", "value": "1"}]),
        IN_C0 + "env",
    ),
    Case(
        "loadtest-env-path",
        "loadtest",
        put(
            (*C0, "env"),
            [{"name": "HOME", "value": "/tmp"}, {"name": "PATH", "value": "/ledger:/usr/bin"}],
        ),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "loadtest-env-home-elsewhere",
        "loadtest",
        put((*C0, "env"), [{"name": "HOME", "value": "/"}]),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "loadtest-env-from-secret-key",
        "loadtest",
        put(
            (*C0, "env"),
            [{"name": "HOME", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        ),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "evidence-envfrom-secret",
        "evidence",
        put((*C0, "envFrom"), [{"secretRef": {"name": "anything"}}]),
        IN_C0 + "envFrom",
    ),
    Case(
        "conformance-envfrom-configmap",
        "conformance",
        put((*C0, "envFrom"), [{"configMapRef": {"name": "gpu-fault-ledger"}}]),
        IN_C0 + "envFrom",
    ),
    Case(
        "loadtest-envfrom-secret",
        "loadtest",
        put((*C0, "envFrom"), [{"secretRef": {"name": "anything"}}]),
        IN_C0 + "envFrom",
    ),
    # ── volumes: the ledger as code, secrets, tokens, the host ──────────────────────────────
    Case(
        "evidence-ledger-configmap-volume",
        "evidence",
        put((*POD, "volumes"), [LEDGER_VOLUME]),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "evidence-secret-volume",
        "evidence",
        put((*POD, "volumes"), [{"name": "s", "secret": {"secretName": "anything"}}]),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "evidence-projected-token-volume",
        "evidence",
        put(
            (*POD, "volumes"),
            [
                {
                    "name": "t",
                    "projected": {
                        "sources": [{"serviceAccountToken": {"path": "token", "audience": "api"}}]
                    },
                }
            ],
        ),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "evidence-hostpath-root",
        "evidence",
        put((*POD, "volumes"), [{"name": "host", "hostPath": {"path": "/"}}]),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "conformance-pvc-volume",
        "conformance",
        put((*POD, "volumes"), [{"name": "p", "persistentVolumeClaim": {"claimName": "c"}}]),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "evidence-csi-inline-volume",
        "evidence",
        put((*POD, "volumes"), [{"name": "c", "csi": {"driver": "secrets-store.csi.k8s.io"}}]),
        NOT_ALLOWED + "volumes",
    ),
    Case(
        "loadtest-hostpath-volume",
        "loadtest",
        put(
            (*POD, "volumes"),
            [
                {"name": "tmp", "hostPath": {"path": "/"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
        ),
        "{pod}.volumes must be exactly ",
        privileged=True,
    ),
    Case(
        "loadtest-extra-secret-volume",
        "loadtest",
        add((*POD, "volumes"), {"name": "s", "secret": {"secretName": "anything"}}),
        "{pod}.volumes must be exactly ",
    ),
    Case(
        "loadtest-tmp-mounted-over-usr",
        "loadtest",
        put((*C0, "volumeMounts"), [{"name": "tmp", "mountPath": "/usr/lib"}]),
        "{pod}.containers[0].volumeMounts must be exactly ",
    ),
    Case(
        "loadtest-mount-subpath",
        "loadtest",
        put((*C0, "volumeMounts"), [{"name": "tmp", "mountPath": "/tmp", "subPath": "x"}]),
        "{pod}.containers[0].volumeMounts must be exactly ",
    ),
    # ── hardening dropped ───────────────────────────────────────────────────────────────────
    Case("loadtest-runs-as-root", "loadtest", put((*SC, "runAsUser"), 0), LT_SC, privileged=True),
    Case(
        "loadtest-run-as-non-root-false",
        "loadtest",
        put((*SC, "runAsNonRoot"), False),
        LT_SC,
        privileged=True,
    ),
    Case(
        "loadtest-privilege-escalation",
        "loadtest",
        put((*SC, "allowPrivilegeEscalation"), True),
        LT_SC,
        privileged=True,
    ),
    Case(
        "loadtest-no-drop-all", "loadtest", put((*SC, "capabilities"), {}), LT_SC, privileged=True
    ),
    Case(
        "loadtest-adds-net-raw",
        "loadtest",
        put((*SC, "capabilities"), {"drop": ["ALL"], "add": ["NET_RAW"]}),
        LT_SC,
        privileged=True,
    ),
    Case(
        "loadtest-seccomp-unconfined",
        "loadtest",
        put((*SC, "seccompProfile"), {"type": "Unconfined"}),
        LT_SC,
        privileged=True,
    ),
    Case(
        "loadtest-privileged",
        "loadtest",
        both(put((*SC, "privileged"), True), put((*SC, "allowPrivilegeEscalation"), True)),
        LT_SC,
        privileged=True,
    ),
    Case(
        "evidence-writable-root-fs", "evidence", put((*SC, "readOnlyRootFilesystem"), False), EV_SC
    ),
    Case(
        "evidence-seccomp-unconfined",
        "evidence",
        put((*SC, "seccompProfile"), {"type": "Unconfined"}),
        EV_SC,
    ),
    Case(
        "evidence-apparmor-unconfined",
        "evidence",
        put((*SC, "appArmorProfile"), {"type": "Unconfined"}),
        EV_SC,
    ),
    Case(
        "evidence-apparmor-annotation",
        "evidence",
        put(
            ("spec", "template", "metadata", "annotations"),
            {"container.apparmor.security.beta.kubernetes.io/evidence": "unconfined"},
        ),
        "spec.template.metadata may not hold field(s) annotations",
        pod_says="metadata.annotations must be absent when the Pod is created",
    ),
    Case("evidence-privileged", "evidence", put((*SC, "privileged"), True), EV_SC),
    Case(
        "evidence-adds-sys-module",
        "evidence",
        put(
            (*SC, "capabilities", "add"),
            ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "SYSLOG", "SYS_MODULE"],
        ),
        EV_SC,
    ),
    # SYSLOG (dmesg under kernel.dmesg_restrict=1) is the evidence Job's alone.
    Case(
        "conformance-adds-syslog",
        "conformance",
        put((*SC, "capabilities", "add"), ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "SYSLOG"]),
        EV_SC,
    ),
    Case(
        "fence-adds-syslog",
        "fence",
        put((*SC, "capabilities", "add"), ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "SYSLOG"]),
        EV_SC,
    ),
    Case(
        "loadtest-adds-syslog",
        "loadtest",
        put((*SC, "capabilities"), {"drop": ["ALL"], "add": ["SYSLOG"]}),
        LT_SC,
        privileged=True,
    ),
    Case(
        "conformance-adds-net-admin",
        "conformance",
        put((*SC, "capabilities", "add"), ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "NET_ADMIN"]),
        EV_SC,
    ),
    Case("conformance-drops-nothing", "conformance", drop((*SC, "capabilities", "drop")), EV_SC),
    Case(
        "evidence-selinux-spc", "evidence", put((*SC, "seLinuxOptions"), {"type": "spc_t"}), EV_SC
    ),
    Case(
        "loadtest-proc-mount-unmasked",
        "loadtest",
        both(put((*SC, "procMount"), "Unmasked"), put((*POD, "hostUsers"), False)),
        NOT_ALLOWED + "hostUsers",
        privileged=True,
    ),
    Case(
        "evidence-pod-security-context",
        "evidence",
        put(
            (*POD, "securityContext"),
            {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]},
        ),
        "{pod}.securityContext must be exactly {{}}",
    ),
    Case(
        "loadtest-pod-seccomp-unconfined",
        "loadtest",
        put((*POD, "securityContext"), {"seccompProfile": {"type": "Unconfined"}}),
        "{pod}.securityContext must be exactly {{}}",
        privileged=True,
    ),
    # ── host namespaces ─────────────────────────────────────────────────────────────────────
    Case(
        "evidence-host-network",
        "evidence",
        put((*POD, "hostNetwork"), True),
        NOT_ALLOWED + "hostNetwork",
    ),
    Case(
        "conformance-host-ipc", "conformance", put((*POD, "hostIPC"), True), NOT_ALLOWED + "hostIPC"
    ),
    Case(
        "loadtest-host-pid",
        "loadtest",
        put((*POD, "hostPID"), True),
        NOT_ALLOWED + "hostPID",
        privileged=True,
    ),
    Case(
        "loadtest-share-process-namespace",
        "loadtest",
        put((*POD, "shareProcessNamespace"), True),
        NOT_ALLOWED + "shareProcessNamespace",
    ),
    Case(
        "evidence-host-port",
        "evidence",
        put((*C0, "ports"), [{"containerPort": 22, "hostPort": 22}]),
        IN_C0 + "ports",
    ),
    # ── placement ───────────────────────────────────────────────────────────────────────────
    Case(
        "evidence-on-control-plane",
        "evidence",
        put((*POD, "nodeName"), "control-plane-1"),
        "must be the pod's nodeName",
    ),
    Case(
        "loadtest-node-label-differs",
        "loadtest",
        put(("spec", "template", "metadata", "labels", "gpu-node-guard.io/node"), "gpu-other"),
        "[gpu-node-guard.io/node] must be the pod's nodeName",
    ),
    Case(
        "evidence-no-gpu-node-selector",
        "evidence",
        drop((*POD, "nodeSelector")),
        "{pod}.nodeSelector must be exactly",
    ),
    Case(
        "evidence-control-plane-selector",
        "evidence",
        put((*POD, "nodeSelector"), {"node-role.kubernetes.io/control-plane": "true"}),
        "{pod}.nodeSelector must be exactly",
    ),
    Case(
        "evidence-affinity",
        "evidence",
        put((*POD, "affinity"), {"nodeAffinity": {}}),
        NOT_ALLOWED + "affinity",
    ),
    Case(
        "evidence-tolerates-everything",
        "evidence",
        put((*POD, "tolerations"), [{"operator": "Exists"}]),
        "{pod}.tolerations must be",
    ),
    Case(
        "loadtest-tolerates-control-plane",
        "loadtest",
        add(
            (*POD, "tolerations"),
            {
                "key": "node-role.kubernetes.io/control-plane",
                "operator": "Exists",
                "effect": "NoSchedule",
            },
        ),
        "{pod}.tolerations must be",
    ),
    Case(
        "conformance-runtime-class",
        "conformance",
        put((*POD, "runtimeClassName"), "runc-privileged"),
        NOT_ALLOWED + "runtimeClassName",
    ),
    Case(
        "evidence-host-aliases",
        "evidence",
        put((*POD, "hostAliases"), [{"ip": "10.0.0.1", "hostnames": ["registry"]}]),
        NOT_ALLOWED + "hostAliases",
    ),
    Case(
        "evidence-dns-none",
        "evidence",
        both(
            put((*POD, "dnsPolicy"), "None"),
            put((*POD, "dnsConfig"), {"nameservers": ["10.0.0.1"]}),
        ),
        NOT_ALLOWED + "dnsConfig",
    ),
    # ── scale and priority ──────────────────────────────────────────────────────────────────
    Case(
        "evidence-500-completions",
        "evidence",
        both(put(("spec", "completions"), 500), put(("spec", "parallelism"), 500)),
        "spec.parallelism must be exactly 1",
        pod_too=False,
    ),
    Case(
        "loadtest-parallelism",
        "loadtest",
        put(("spec", "parallelism"), 8),
        "spec.parallelism must be exactly 1",
        pod_too=False,
    ),
    Case(
        "evidence-on-failure-retries",
        "evidence",
        both(put((*POD, "restartPolicy"), "OnFailure"), put(("spec", "backoffLimit"), 1000000)),
        '{pod}.restartPolicy must be exactly "Never"',
        pod_too=False,
    ),
    Case(
        "conformance-restart-on-failure",
        "conformance",
        put((*POD, "restartPolicy"), "OnFailure"),
        '{pod}.restartPolicy must be exactly "Never"',
    ),
    Case(
        "loadtest-backoff-6",
        "loadtest",
        put(("spec", "backoffLimit"), 6),
        "spec.backoffLimit must be exactly 0",
        pod_too=False,
    ),
    Case(
        "evidence-system-node-critical",
        "evidence",
        put((*POD, "priorityClassName"), "system-node-critical"),
        NOT_ALLOWED + "priorityClassName",
    ),
    Case(
        "loadtest-no-deadline",
        "loadtest",
        drop(("spec", "activeDeadlineSeconds")),
        "spec.activeDeadlineSeconds must be an integer in [1, 3600]",
        pod_too=False,
    ),
    Case(
        "evidence-deadline-a-day",
        "evidence",
        put(("spec", "activeDeadlineSeconds"), 86400),
        "spec.activeDeadlineSeconds must be an integer in [1, 3600]",
        pod_too=False,
    ),
    Case(
        "evidence-no-ttl",
        "evidence",
        drop(("spec", "ttlSecondsAfterFinished")),
        "spec.ttlSecondsAfterFinished must be an integer in [1, 2592000]",
        pod_too=False,
    ),
    Case(
        "conformance-ttl-a-year",
        "conformance",
        put(("spec", "ttlSecondsAfterFinished"), 31536000),
        "spec.ttlSecondsAfterFinished must be an integer in [1, 2592000]",
        pod_too=False,
    ),
    Case(
        "evidence-suspended",
        "evidence",
        put(("spec", "suspend"), True),
        "spec.suspend must be exactly false",
        pod_too=False,
    ),
    Case(
        "evidence-pod-failure-policy",
        "evidence",
        put(
            ("spec", "podFailurePolicy"),
            {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        ),
        "spec may not hold field(s) podFailurePolicy",
        pod_too=False,
    ),
    Case(
        "evidence-indexed",
        "evidence",
        put(("spec", "completionMode"), "Indexed"),
        'spec.completionMode must be exactly "NonIndexed"',
        pod_too=False,
    ),
    Case(
        "evidence-managed-by-other",
        "evidence",
        put(("spec", "managedBy"), "example.com/job-runner"),
        "spec may not hold field(s) managedBy",
        pod_too=False,
    ),
    # ── images ──────────────────────────────────────────────────────────────────────────────
    Case(
        "evidence-with-loadtest-image",
        "evidence",
        put((*C0, "image"), LOADTEST_IMAGE),
        "{pod}.containers[0].image must be the image in this policy's `image`",
    ),
    Case(
        "loadtest-with-guard-image",
        "loadtest",
        put((*C0, "image"), GUARD_IMAGE),
        "{pod}.containers[0].image must be the image in this policy's `image`",
    ),
    Case(
        "conformance-busybox",
        "conformance",
        put((*C0, "image"), "busybox:1.36"),
        "{pod}.containers[0].image must be the image in this policy's `image`",
    ),
    Case(
        "evidence-latest-tag",
        "evidence",
        put((*C0, "image"), GUARD_IMAGE.replace("0.1.0", "latest")),
        "{pod}.containers[0].image must be the image in this policy's `image`",
    ),
    Case(
        "loadtest-pull-always",
        "loadtest",
        put((*C0, "imagePullPolicy"), "Always"),
        '{pod}.containers[0].imagePullPolicy must be exactly "IfNotPresent"',
    ),
    # ServiceAccount admission copies pull secrets into Pods: names only, at most 8 of them.
    Case(
        "evidence-nine-pull-secrets",
        "evidence",
        put((*POD, "imagePullSecrets"), [{"name": f"regcred-{i}"} for i in range(9)]),
        PULL_SECRETS,
    ),
    Case(
        "conformance-pull-secret-not-a-name",
        "conformance",
        put((*POD, "imagePullSecrets"), [{"name": "Reg_Cred"}]),
        PULL_SECRETS,
    ),
    # ── identity and containers ─────────────────────────────────────────────────────────────
    Case(
        "evidence-runs-as-the-guard",
        "evidence",
        both(
            put((*POD, "serviceAccountName"), "gpu-node-guard"),
            put((*POD, "serviceAccount"), "gpu-node-guard"),
        ),
        '{pod}.serviceAccountName must be exactly "gpu-node-guard-job"',
    ),
    # ServiceAccount admission mounts the token the Pod asks for: its volume is refused first.
    Case(
        "loadtest-mounts-a-token",
        "loadtest",
        put((*POD, "automountServiceAccountToken"), True),
        "{pod}.automountServiceAccountToken must be exactly false",
        pod_says="{pod}.containers[0].volumeMounts must be exactly ",
    ),
    Case(
        "evidence-service-links",
        "evidence",
        put((*POD, "enableServiceLinks"), True),
        "{pod}.enableServiceLinks must be exactly false",
    ),
    Case(
        "evidence-second-container",
        "evidence",
        add((*POD, "containers"), {"name": "x", "image": GUARD_IMAGE, "command": SHELL}),
        "{pod}.containers must hold exactly one item",
    ),
    Case(
        "evidence-init-container",
        "evidence",
        put((*POD, "initContainers"), [{"name": "x", "image": "busybox:1.36", "command": SHELL}]),
        NOT_ALLOWED + "initContainers",
    ),
    Case(
        "loadtest-sidecar-init",
        "loadtest",
        put(
            (*POD, "initContainers"),
            [{"name": "x", "image": LOADTEST_IMAGE, "restartPolicy": "Always", "command": SHELL}],
        ),
        NOT_ALLOWED + "initContainers",
    ),
    Case(
        "evidence-container-renamed",
        "evidence",
        put((*C0, "name"), "debug"),
        '{pod}.containers[0].name must be exactly "evidence"',
    ),
    Case(
        "evidence-working-dir",
        "evidence",
        put((*C0, "workingDir"), "/proc/1/root"),
        IN_C0 + "workingDir",
    ),
    Case("evidence-interactive", "evidence", put((*C0, "stdin"), True), IN_C0 + "stdin"),
    Case(
        "evidence-more-memory",
        "evidence",
        put((*C0, "resources"), {"limits": {"memory": "64Gi", "nvidia.com/gpu": "8"}}),
        "{pod}.containers[0].resources must be exactly",
    ),
    Case(
        "evidence-termination-path-on-host",
        "evidence",
        put((*C0, "terminationMessagePath"), "/proc/1/root/etc/cron.d/x"),
        '{pod}.containers[0].terminationMessagePath must be exactly "/dev/termination-log"',
    ),
    Case(
        "evidence-dra-claim",
        "evidence",
        put((*POD, "resourceClaims"), [{"name": "gpu", "resourceClaimName": "all-gpus"}]),
        NOT_ALLOWED + "resourceClaims",
    ),
    # ── metadata ────────────────────────────────────────────────────────────────────────────
    Case(
        "job-component-unknown",
        "evidence",
        both(
            put(("metadata", "labels", "app.kubernetes.io/component"), "debug"),
            put(("spec", "template", "metadata", "labels", "app.kubernetes.io/component"), "debug"),
        ),
        "the app.kubernetes.io/component label must name a guard kind",
        gate=True,
        pod_too=False,
    ),
    Case(
        "job-component-missing",
        "conformance",
        both(
            drop(("metadata", "labels", "app.kubernetes.io/component")),
            drop(("spec", "template", "metadata", "labels", "app.kubernetes.io/component")),
        ),
        "the app.kubernetes.io/component label must name a guard kind",
        gate=True,
        pod_too=False,
    ),
    Case(
        "pod-template-component-differs",
        "evidence",
        put(("spec", "template", "metadata", "labels", "app.kubernetes.io/component"), "loadtest"),
        '[app.kubernetes.io/component] must be exactly "evidence"',
        pod_too=False,
    ),
    Case(
        "pod-component-unknown",
        "loadtest",
        put(("spec", "template", "metadata", "labels", "app.kubernetes.io/component"), "debug"),
        '[app.kubernetes.io/component] must be exactly "loadtest"',
        pod_gate=True,
        pod_says="the app.kubernetes.io/component label must name a guard kind",
    ),
    Case(
        "job-node-annotation-differs",
        "evidence",
        put(("metadata", "annotations", "gpu-node-guard.io/node"), "control-plane-1"),
        "metadata.annotations[gpu-node-guard.io/node] must be the pod's nodeName",
        pod_too=False,
    ),
    Case(
        "job-name-not-the-guards",
        "evidence",
        put(("metadata", "name"), "debug-shell"),
        "metadata.name must be a guard Job name",
        pod_too=False,
    ),
    Case(
        "job-generate-name",
        "evidence",
        both(drop(("metadata", "name")), put(("metadata", "generateName"), "gng-ev-")),
        "metadata may not hold field(s) generateName",
        pod_too=False,
    ),
    Case(
        "job-owned-by-a-cronjob",
        "loadtest",
        put(
            ("metadata", "ownerReferences"),
            [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "x", "uid": "1"}],
        ),
        "metadata may not hold field(s) ownerReferences",
        pod_too=False,
    ),
    Case(
        "job-finalizer",
        "evidence",
        put(("metadata", "finalizers"), ["example.com/keep"]),
        "metadata.finalizers must be only the API server's deletion finalizers",
        pod_too=False,
    ),
    Case(
        "pod-template-multus-network",
        "evidence",
        put(
            ("spec", "template", "metadata", "annotations"),
            {"k8s.v1.cni.cncf.io/networks": "host-device"},
        ),
        "spec.template.metadata may not hold field(s) annotations",
        pod_says="metadata.annotations must be absent when the Pod is created",
    ),
]


def pod_view(pod: Doc) -> Doc:
    """A Pod dressed as a Job (its metadata and spec as the template's), so the rows' Job paths
    change the Pod itself."""
    return {
        "metadata": {},
        "spec": {"template": {"metadata": pod["metadata"], "spec": pod["spec"]}},
    }


def refusal_for_pod(case: Case) -> str:
    return (case.pod_says or case.says).format(pod="spec")


def refusal_for_job(case: Case) -> str:
    return case.says.format(pod="spec.template.spec")
