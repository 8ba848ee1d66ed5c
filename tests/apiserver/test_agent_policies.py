"""The node agent in the jobs namespace (policies/agent.yaml): the shipped DaemonSet, as
manifests/base builds it, and the Pod the DaemonSet controller makes of it are admitted; every
out-of-shape variant is refused by the policy meant to refuse it, with that policy's words.

DaemonSets are tried as the jobs namespace's admin (who may create them: the aggregated `admin`
role); Pods as the DaemonSet controller, the only sender the namespace gate lets create an agent
Pod, and as the admin, whom the gate refuses first. Real POSTs on a real kube-apiserver.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.generate.policies import agent
from tests.apiserver import tally
from tests.apiserver.conftest import Identities
from tests.apiserver.deploy import BASE, Kubectl
from tests.apiserver.kube import (
    DAEMONSET_CONTROLLER,
    JOBS_NS,
    MERGE_PATCH,
    ControlPlane,
    as_dict,
    create,
    daemonset_pod,
    refusal,
)
from tests.apiserver.shapes import C0, CMD, POD, SC, SHELL, add, both, drop, pod_view, put

pytestmark = pytest.mark.apiserver

DS_POLICY = "ValidatingAdmissionPolicy 'gpu-node-guard-agent-daemonset'"
POD_POLICY = "ValidatingAdmissionPolicy 'gpu-node-guard-agent-pod'"
GATE = "ValidatingAdmissionPolicy 'gpu-node-guard-jobs-namespace'"
NODE = "gpu-agent-a"
IN_POD = "{pod} may not hold field(s) "
IN_C0 = "{pod}.containers[0] may not hold field(s) "
MOUNTS = "{pod}.containers[0].volumeMounts must be exactly "
VOLUMES = "{pod}.volumes must be exactly "
CMD_SAYS = "{pod}.containers[0].command must be gpu-node-guard agent --root=/host"
CONTAINER_SC = "{pod}.containers[0].securityContext must be exactly "
POD_SC = "{pod}.securityContext must be exactly "
PROBE = "{pod}.containers[0].livenessProbe"


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    change: Callable[[dict[str, Any]], None]
    says: str
    pod_too: bool = True  # a PodSpec change: also tried as the DaemonSet controller's Pod
    pod_says: str | None = None
    on_pod: bool = False  # the change is written for a Pod (metadata, spec), not a DaemonSet


def _mount(index: int, **changes: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc_mounts = doc["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        doc_mounts[index].update(copy.deepcopy(changes))

    return change


def _volume(index: int, **host_path: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["spec"]["volumes"][index]["hostPath"].update(host_path)

    return change


def _host(name: str, path: str, mount: str, kind: str = "Directory") -> Callable[..., None]:
    return both(
        add((*POD, "volumes"), {"name": name, "hostPath": {"path": path, "type": kind}}),
        add((*C0, "volumeMounts"), {"name": name, "mountPath": mount}),
    )


def _driver(**changes: object) -> Callable[..., None]:
    """The driver component's extra volume and mount, with one of them changed."""
    volume = copy.deepcopy(agent.DRIVER_VOLUME)
    mount = copy.deepcopy(agent.DRIVER_MOUNT)
    for key, value in changes.items():
        (volume["hostPath"] if key in ("path", "type") else mount)[key] = value
    return both(add((*POD, "volumes"), volume), add((*C0, "volumeMounts"), mount))


def _argv(edit: Callable[[list[str]], list[str]]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        container = doc["spec"]["template"]["spec"]["containers"][0]
        container["command"] = edit(list(container["command"]))

    return change


def _set_word(prefix: str, word: str) -> Callable[[list[str]], list[str]]:
    return lambda c: [word if w.startswith(prefix) else w for w in c]


EXEC = {"exec": {"command": SHELL}, "periodSeconds": 10}
HTTP = {"path": "/healthz", "port": "metrics", "scheme": "HTTP"}
CAPS = (*SC, "capabilities")

CASES = [
    # ── host paths: writable, more of the host, created on the host, propagated ──────────────
    Case("hostpath-writable", _mount(0, readOnly=False), MOUNTS),
    Case("hostpath-writable-resolv-conf", _mount(2, readOnly=False), MOUNTS),
    Case("hostpath-slash", _host("root", "/", "/host-root"), MOUNTS),
    Case(
        "hostpath-docker-sock",
        _host("docker", "/var/run/docker.sock", "/docker.sock", "Socket"),
        MOUNTS,
    ),
    Case(
        "hostpath-containerd-sock",
        _host("cri", "/run/containerd/containerd.sock", "/cri.sock", "Socket"),
        MOUNTS,
    ),
    Case("hostpath-etc-rancher", _host("rke2", "/etc/rancher", "/host/etc/rancher"), MOUNTS),
    Case("hostpath-proc", _host("proc", "/proc", "/host/proc"), MOUNTS),
    Case("hostpath-swapped-for-slash", _volume(1, path="/"), VOLUMES),
    Case("hostpath-created-on-the-host", _volume(0, type="DirectoryOrCreate"), VOLUMES),
    Case("hostpath-any-type", _volume(2, type=""), VOLUMES),
    # /run/systemd/resolve is untyped so that hosts without systemd-resolved run the agent; the
    # kubelet never creates it, and no other path loses its type check.
    Case("hostpath-resolved-created-by-kubelet", _volume(3, type="DirectoryOrCreate"), VOLUMES),
    Case("hostpath-usr-untyped", _volume(1, type=""), VOLUMES),
    Case("mount-propagation-from-the-host", _mount(0, mountPropagation="HostToContainer"), MOUNTS),
    # The GPU Operator's driver root (components/agent-gpu-operator-driver): that one entry, as
    # the component writes it, and nothing near it.
    Case("driver-root-writable", _driver(readOnly=False), MOUNTS),
    Case("driver-root-mounted-elsewhere", _driver(mountPath="/host/run/nvidia"), MOUNTS),
    Case("driver-root-untyped", _driver(type=""), VOLUMES),
    Case("driver-root-created-on-the-host", _driver(type="DirectoryOrCreate"), VOLUMES),
    Case("driver-root-all-of-run-nvidia", _driver(path="/run/nvidia"), VOLUMES),
    Case("mount-subpath", _mount(3, subPath="resolv.conf"), MOUNTS),
    Case("mount-elsewhere", _mount(1, mountPath="/usr/lib/x86_64-linux-gnu"), MOUNTS),
    Case(
        "volume-service-account-token",
        both(
            add(
                (*POD, "volumes"),
                {
                    "name": "token",
                    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                },
            ),
            add((*C0, "volumeMounts"), {"name": "token", "mountPath": "/var/run/token"}),
        ),
        MOUNTS,
    ),
    # ── privilege and identity ───────────────────────────────────────────────────────────────
    Case(
        "privileged",
        both(put((*SC, "privileged"), True), put((*SC, "allowPrivilegeEscalation"), True)),
        CONTAINER_SC,
    ),
    Case("privilege-escalation", put((*SC, "allowPrivilegeEscalation"), True), CONTAINER_SC),
    Case("capability-sys-admin", put((*CAPS, "add"), ["SYS_ADMIN"]), CONTAINER_SC),
    Case("capability-net-raw", put((*CAPS, "add"), ["NET_RAW"]), CONTAINER_SC),
    Case("capability-syslog", put((*CAPS, "add"), ["SYSLOG"]), CONTAINER_SC),
    Case("capabilities-not-dropped", drop((*CAPS, "drop")), CONTAINER_SC),
    Case("root-filesystem-writable", put((*SC, "readOnlyRootFilesystem"), False), CONTAINER_SC),
    Case(
        "container-runs-as-root",
        both(put((*SC, "runAsUser"), 0), put((*SC, "runAsNonRoot"), False)),
        CONTAINER_SC,
    ),
    Case(
        "pod-runs-as-root",
        both(
            put((*POD, "securityContext", "runAsUser"), 0),
            put((*POD, "securityContext", "runAsNonRoot"), False),
        ),
        POD_SC,
    ),
    Case(
        "seccomp-unconfined",
        put((*POD, "securityContext", "seccompProfile"), {"type": "Unconfined"}),
        POD_SC,
    ),
    Case(
        "apparmor-unconfined", put((*SC, "appArmorProfile"), {"type": "Unconfined"}), CONTAINER_SC
    ),
    Case(
        "apparmor-annotation",
        put(
            ("spec", "template", "metadata", "annotations"),
            {"container.apparmor.security.beta.kubernetes.io/agent": "unconfined"},
        ),
        "spec.template.metadata.annotations may not hold field(s) container.apparmor",
        pod_says="metadata.annotations must be only kubectl.kubernetes.io/restartedAt",
    ),
    Case(
        "supplemental-group-of-the-host",
        put((*POD, "securityContext", "supplementalGroups"), [0]),
        POD_SC,
    ),
    # ServiceAccount admission mounts the token the Pod asks for: its volume is refused first.
    Case(
        "token-mounted",
        put((*POD, "automountServiceAccountToken"), True),
        "{pod}.automountServiceAccountToken must be exactly false",
        pod_says="spec.containers[0].volumeMounts must be exactly ",
    ),
    Case(
        "another-service-account",
        put((*POD, "serviceAccountName"), "default"),
        '{pod}.serviceAccountName must be exactly "gpu-node-guard-agent"',
    ),
    # The API server then defaults hostPort to the containerPort, refused first.
    Case(
        "host-network",
        put((*POD, "hostNetwork"), True),
        "{pod}.hostNetwork must be exactly false",
        pod_says="spec.containers[0].ports must be exactly ",
    ),
    Case("host-pid", put((*POD, "hostPID"), True), "{pod}.hostPID must be exactly false"),
    Case("host-ipc", put((*POD, "hostIPC"), True), "{pod}.hostIPC must be exactly false"),
    Case(
        "share-process-namespace",
        put((*POD, "shareProcessNamespace"), True),
        IN_POD + "shareProcessNamespace",
    ),
    Case("host-users-off", put((*POD, "hostUsers"), False), IN_POD + "hostUsers"),
    # ── code: image, argv, environment, hooks, probes ────────────────────────────────────────
    Case(
        "another-image",
        put((*C0, "image"), "busybox:1.36"),
        "{pod}.containers[0].image must be the image in this policy's `image`",
    ),
    Case("shell-instead", put(CMD, SHELL), CMD_SAYS),
    Case("args-added", put((*C0, "args"), ["--once"]), IN_C0 + "args"),
    Case("root-is-slash", _argv(_set_word("--root=", "--root=/")), CMD_SAYS),
    Case("listen-elsewhere", _argv(_set_word("--listen=", "--listen=0.0.0.0:22")), CMD_SAYS),
    Case("once-and-exit", _argv(lambda c: [*c, "--once"]), CMD_SAYS),
    Case("resolv-conf-elsewhere", _argv(lambda c: [*c, "--resolv-conf=/etc/shadow"]), CMD_SAYS),
    Case(
        "interval-not-a-number", _argv(_set_word("--interval-s=", "--interval-s=$(id)")), CMD_SAYS
    ),
    Case(
        "conformance-instead",
        put(CMD, ["gpu-node-guard", "conformance", "--root", "/host", "--fix"]),
        CMD_SAYS,
    ),
    Case(
        "env-ld-preload",
        add((*C0, "env"), {"name": "LD_PRELOAD", "value": "/host/x.so"}),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "env-pythonpath",
        add((*C0, "env"), {"name": "PYTHONPATH", "value": "/host/usr/lib"}),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "env-agent-root",
        add((*C0, "env"), {"name": "GUARD_AGENT_ROOT", "value": "/"}),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "env-node-hardcoded",
        put((*C0, "env"), [{"name": "GUARD_AGENT_NODE", "value": "x"}]),
        "{pod}.containers[0].env must be exactly ",
    ),
    Case(
        "env-from-secret", put((*C0, "envFrom"), [{"secretRef": {"name": "s"}}]), IN_C0 + "envFrom"
    ),
    Case(
        "poststart-hook",
        put((*C0, "lifecycle"), {"postStart": {"exec": {"command": SHELL}}}),
        IN_C0 + "lifecycle",
    ),
    Case("liveness-exec", put((*C0, "livenessProbe"), EXEC), PROBE + " may not hold field(s) exec"),
    Case(
        "readiness-exec",
        put((*C0, "readinessProbe"), EXEC),
        "{pod}.containers[0].readinessProbe may not hold field(s) exec",
    ),
    Case("startup-probe", put((*C0, "startupProbe"), {"httpGet": HTTP}), IN_C0 + "startupProbe"),
    Case(
        "probe-tcp",
        put((*C0, "livenessProbe"), {"tcpSocket": {"port": 22}}),
        PROBE + " may not hold field(s) tcpSocket",
    ),
    Case(
        "probe-other-host",
        put((*C0, "livenessProbe", "httpGet", "host"), "169.254.169.254"),
        PROBE + ".httpGet may not hold field(s) host",
    ),
    Case(
        "probe-other-path",
        put((*C0, "livenessProbe", "httpGet", "path"), "/metrics?x"),
        PROBE + '.httpGet.path must be exactly "/healthz"',
    ),
    Case(
        "probe-other-port",
        put((*C0, "readinessProbe", "httpGet", "port"), 22),
        '{pod}.containers[0].readinessProbe.httpGet.port must be exactly "metrics"',
    ),
    Case(
        "probe-headers",
        put(
            (*C0, "livenessProbe", "httpGet", "httpHeaders"),
            [{"name": "Authorization", "value": "Bearer x"}],
        ),
        PROBE + ".httpGet may not hold field(s) httpHeaders",
    ),
    # ── more than one container, ports, resources ────────────────────────────────────────────
    Case(
        "sidecar",
        add((*POD, "containers"), {"name": "debug", "image": "busybox:1.36", "command": SHELL}),
        "{pod}.containers must hold exactly one item",
    ),
    Case(
        "init-container",
        put(
            (*POD, "initContainers"), [{"name": "init", "image": "busybox:1.36", "command": SHELL}]
        ),
        IN_POD + "initContainers",
    ),
    Case(
        "host-port",
        put((*C0, "ports", 0, "hostPort"), 9842),
        "{pod}.containers[0].ports must be exactly ",
    ),
    Case(
        "second-port",
        add((*C0, "ports"), {"name": "ssh", "containerPort": 22}),
        "{pod}.containers[0].ports must be exactly ",
    ),
    Case(
        "a-gpu-for-the-agent",
        both(
            put((*C0, "resources", "limits", "nvidia.com/gpu"), 1),
            put((*C0, "resources", "requests", "nvidia.com/gpu"), 1),
        ),
        "{pod}.containers[0].resources must be exactly ",
    ),
    # ── placement and scheduling ─────────────────────────────────────────────────────────────
    Case(
        "not-only-gpu-nodes",
        put((*POD, "nodeSelector"), {"kubernetes.io/os": "linux"}),
        "{pod}.nodeSelector must be a map holding nvidia.com/gpu.present=true",
    ),
    Case(
        "pinned-to-a-control-plane-node",
        put((*POD, "nodeName"), "control-plane-1"),
        IN_POD + "nodeName",
        pod_says="spec.nodeName must be the node of its affinity",
    ),
    Case(
        "affinity-added",
        put(
            (*POD, "affinity"),
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node-role.kubernetes.io/control-plane",
                                        "operator": "Exists",
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        IN_POD + "affinity",
        pod_says="spec.affinity must be the DaemonSet controller's",
    ),
    Case(
        "tolerations-changed",
        put((*POD, "tolerations"), [{"key": "dedicated", "operator": "Exists"}]),
        "{pod}.tolerations must be exactly ",
        pod_says="spec.tolerations must be the template's",
    ),
    Case(
        "priority-class",
        put((*POD, "priorityClassName"), "system-node-critical"),
        IN_POD + "priorityClassName",
    ),
    Case(
        "runtime-class",
        put((*POD, "runtimeClassName"), "runc-privileged"),
        IN_POD + "runtimeClassName",
    ),
    Case(
        "dns-elsewhere",
        put((*POD, "dnsConfig"), {"nameservers": ["203.0.113.53"]}),
        IN_POD + "dnsConfig",
    ),
    Case(
        "host-aliases",
        put((*POD, "hostAliases"), [{"ip": "203.0.113.1", "hostnames": ["prometheus"]}]),
        IN_POD + "hostAliases",
    ),
    Case(
        "nine-image-pull-secrets",
        put((*POD, "imagePullSecrets"), [{"name": f"regcred-{i}"} for i in range(9)]),
        "{pod}.imagePullSecrets must be at most 8 entries, each only a Secret name",
    ),
    # ── the DaemonSet itself ─────────────────────────────────────────────────────────────────
    Case(
        "template-labelled-otherwise",
        both(
            put(("spec", "template", "metadata", "labels", "tier"), "debug"),
            put(("spec", "selector", "matchLabels", "tier"), "debug"),
        ),
        "spec.selector must be exactly ",
        pod_too=False,
    ),
    Case(
        "owned-by-something",
        put(
            ("metadata", "ownerReferences"),
            [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}],
        ),
        "metadata may not hold field(s) ownerReferences",
        pod_too=False,
    ),
]

POD_ONLY = [
    Case(
        "owned-by-a-replicaset",
        put(("metadata", "ownerReferences", 0, "kind"), "ReplicaSet"),
        "metadata.ownerReferences must be the DaemonSet that owns it",
        on_pod=True,
    ),
    Case(
        "owned-by-another-daemonset",
        put(("metadata", "ownerReferences", 0, "name"), "debug"),
        "metadata.ownerReferences must be the DaemonSet that owns it",
        on_pod=True,
    ),
    Case(
        "owner-not-controller",
        put(("metadata", "ownerReferences", 0, "controller"), False),
        "metadata.ownerReferences must be the DaemonSet that owns it",
        on_pod=True,
    ),
    Case(
        "no-owner",
        drop(("metadata", "ownerReferences")),
        "metadata.ownerReferences must be the DaemonSet that owns it",
        on_pod=True,
    ),
    Case(
        "other-generate-name",
        put(("metadata", "generateName"), "debug-"),
        "metadata.name must be the DaemonSet's name and a generated suffix",
        on_pod=True,
    ),
    Case(
        "extra-label",
        put(("metadata", "labels", "tier"), "debug"),
        "metadata.labels may not hold field(s) tier",
        on_pod=True,
    ),
    Case(
        "annotation-at-create",
        put(("metadata", "annotations"), {"k8s.v1.cni.cncf.io/networks": "host-device"}),
        "metadata.annotations must be only kubectl.kubernetes.io/restartedAt",
        on_pod=True,
    ),
    Case(
        "no-node-affinity",
        drop(("spec", "affinity")),
        "spec.affinity must be the DaemonSet controller's",
        on_pod=True,
    ),
    Case(
        "affinity-or-a-control-plane-node",
        add(
            (
                "spec",
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms",
            ),
            {
                "matchExpressions": [
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                ]
            },
        ),
        "spec.affinity must be the DaemonSet controller's",
        on_pod=True,
    ),
    Case(
        "toleration-seconds-forever",
        add(
            ("spec", "tolerations"),
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 999999,
            },
        ),
        "spec.tolerations must be the template's",
        on_pod=True,
    ),
]


@pytest.fixture(scope="module")
def shipped(kubectl_binary: Path) -> dict[str, Any]:
    """The agent's DaemonSet exactly as `kubectl kustomize manifests/base` emits it."""
    built = Kubectl(kubectl_binary).build(BASE)
    return next(d for d in built if d["kind"] == "DaemonSet")


@pytest.fixture(scope="module")
def stored(admin: client.ApiClient, deployed: ControlPlane) -> dict[str, Any]:
    """The DaemonSet as the session's `kubectl apply` stored it (uid, defaults)."""
    found = client.AppsV1Api(admin).read_namespaced_daemon_set(agent.NAME, JOBS_NS)
    return dict(admin.sanitize_for_serialization(found))


@pytest.fixture(scope="module")
def ds_controller(deployed: ControlPlane) -> client.ApiClient:
    with deployed.impersonating(DAEMONSET_CONTROLLER) as api:
        yield api


def out_of_shape(shipped: dict[str, Any], case: Case) -> dict[str, Any]:
    doc = copy.deepcopy(shipped)
    case.change(doc)
    return doc


def pod_of(stored: dict[str, Any], case: Case) -> dict[str, Any]:
    pod = daemonset_pod(stored, NODE)
    case.change(pod if case.on_pod else pod_view(pod))
    return pod


def pod_refusal(case: Case) -> str:
    return (case.pod_says or case.says).replace("spec.template.", "").format(pod="spec")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_out_of_shape_agent_daemonset_is_refused_by_its_policy(
    identities: Identities, shipped: dict[str, Any], case: Case, runtime_class: str
) -> None:
    status, message = refusal(lambda: create(identities.jobs_ns_admin, out_of_shape(shipped, case)))
    tally.record("jobs-ns-admin", "agent DaemonSets", status == 422 and DS_POLICY in message)
    assert (status, DS_POLICY in message) == (422, True), message
    assert case.says.format(pod="spec.template.spec") in message, message


@pytest.mark.parametrize("case", [c for c in CASES if c.pod_too] + POD_ONLY, ids=lambda c: c.id)
def test_out_of_shape_agent_pod_from_the_daemonset_controller_is_refused(
    ds_controller: client.ApiClient, stored: dict[str, Any], case: Case, runtime_class: str
) -> None:
    """Had an out-of-shape DaemonSet got in (made before the policies, say), its Pods still
    would not: the Pod policy holds what the controller sends."""
    status, message = refusal(lambda: create(ds_controller, pod_of(stored, case)))
    tally.record("daemon-set-controller", "agent Pods", status == 422 and POD_POLICY in message)
    assert (status, POD_POLICY in message) == (422, True), message
    assert pod_refusal(case) in message, message


@pytest.mark.parametrize("case", [c for c in CASES if c.pod_too] + POD_ONLY, ids=lambda c: c.id)
def test_a_jobs_namespace_admin_creates_no_agent_pod(
    identities: Identities, stored: dict[str, Any], case: Case
) -> None:
    status, message = refusal(lambda: create(identities.jobs_ns_admin, pod_of(stored, case)))
    refused = status == 422 and (GATE in message or POD_POLICY in message)
    tally.record("jobs-ns-admin", "agent Pods", refused)
    assert refused, message


def test_not_even_the_shipped_agent_pod_from_the_namespace_admin(
    identities: Identities, stored: dict[str, Any]
) -> None:
    status, message = refusal(
        lambda: create(identities.jobs_ns_admin, daemonset_pod(stored, NODE), dry_run=True)
    )
    tally.record("jobs-ns-admin", "agent Pods", status == 422 and GATE in message)
    assert (status, GATE in message) == (422, True), message
    assert "the DaemonSet controller for the agent), never directly; sent by bob" in message


@pytest.mark.parametrize(
    "labels",
    [{}, {"app.kubernetes.io/component": "evidence"}, {"app.kubernetes.io/component": "debug"}],
    ids=["unlabelled", "labelled-as-a-job-kind", "labelled-as-nothing"],
)
def test_no_other_daemonset_lives_in_the_jobs_namespace(
    identities: Identities,
    admin: client.ApiClient,
    shipped: dict[str, Any],
    labels: dict[str, str],
) -> None:
    """A DaemonSet that does not say it is the agent never meets the agent's shape: the gate."""
    doc = copy.deepcopy(shipped)
    doc["metadata"]["name"], doc["metadata"]["labels"] = "node-shell", labels
    doc["spec"]["template"]["spec"]["containers"][0]["command"] = SHELL
    for who, api in (("jobs-ns-admin", identities.jobs_ns_admin), ("cluster-admin", admin)):
        status, message = refusal(lambda: create(api, doc))  # noqa: B023
        tally.record(who, "other DaemonSets", status == 422 and GATE in message)
        assert (status, GATE in message) == (422, True), message
        kinds = "evidence, conformance, fence, loadtest, agent"
        assert f"label must name a guard kind ({kinds})" in message


def test_the_shipped_agent_daemonset_and_its_pod_are_admitted(
    admin: client.ApiClient,
    identities: Identities,
    ds_controller: client.ApiClient,
    stored: dict[str, Any],
    shipped: dict[str, Any],
) -> None:
    """The DaemonSet the session applied is the one kustomize builds; its Pod, as the DaemonSet
    controller makes it, is admitted and stored; the namespace admin may re-send the DaemonSet."""
    container = stored["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == shipped["spec"]["template"]["spec"]["containers"][0]["image"]
    made = as_dict(create(ds_controller, daemonset_pod(stored, NODE)))
    try:
        assert made["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
        assert made["spec"]["affinity"]["nodeAffinity"]  # the controller's, kept
    finally:
        client.CoreV1Api(admin).delete_namespaced_pod(made["metadata"]["name"], JOBS_NS)
    client.AppsV1Api(identities.jobs_ns_admin).replace_namespaced_daemon_set(
        agent.NAME,
        JOBS_NS,
        {
            **shipped,
            "metadata": {
                **shipped["metadata"],
                "resourceVersion": stored["metadata"]["resourceVersion"],
            },
        },
        dry_run="All",
    )


SITE_FLAGS = [
    "--interval-s=60",
    "--platform=other",
    "--kube-proxy-mode=iptables",
    "--allowed-dns=10.20.0.0/16",
    "--resolv-conf=/run/systemd/resolve/resolv.conf",
]


def test_the_site_flags_of_docs_agent_md_are_admitted(
    identities: Identities, shipped: dict[str, Any], stored: dict[str, Any]
) -> None:
    """The kustomize patch docs/agent.md shows (kubeadm, iptables, allowed resolvers)."""
    doc = copy.deepcopy(shipped)
    doc["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    command = ["gpu-node-guard", "agent", "--root=/host", "--listen=0.0.0.0:9842", *SITE_FLAGS]
    doc["spec"]["template"]["spec"]["containers"][0]["command"] = command
    apps = client.AppsV1Api(identities.jobs_ns_admin)
    apps.replace_namespaced_daemon_set(agent.NAME, JOBS_NS, doc, dry_run="All")


def test_kubectl_rollout_restart_is_admitted_and_its_pod_too(
    admin: client.ApiClient,
    identities: Identities,
    ds_controller: client.ApiClient,
    stored: dict[str, Any],
) -> None:
    """`kubectl rollout restart` stamps the template; the controller copies it onto the Pod."""
    stamp = {"kubectl.kubernetes.io/restartedAt": "2026-09-21T06:00:00+09:00"}
    patch = {"spec": {"template": {"metadata": {"annotations": stamp}}}}
    apps = client.AppsV1Api(identities.jobs_ns_admin)
    apps.patch_namespaced_daemon_set(
        agent.NAME, JOBS_NS, patch, dry_run="All", _content_type=MERGE_PATCH
    )
    restarted = copy.deepcopy(stored)
    restarted["spec"]["template"]["metadata"]["annotations"] = stamp
    made = as_dict(create(ds_controller, daemonset_pod(restarted, NODE), dry_run=True))
    assert made["metadata"]["annotations"] == stamp


def test_a_cni_annotation_after_creation_is_admitted(
    admin: client.ApiClient, ds_controller: client.ApiClient, stored: dict[str, Any]
) -> None:
    made = as_dict(create(ds_controller, daemonset_pod(stored, NODE)))
    name, core = made["metadata"]["name"], client.CoreV1Api(admin)
    try:
        note = {"metadata": {"annotations": {"cni.projectcalico.org/podIP": "10.42.0.9/32"}}}
        core.patch_namespaced_pod(name, JOBS_NS, note, _content_type=MERGE_PATCH)
        swap = {"spec": {"containers": [{"name": "agent", "image": "busybox:1.36"}]}}
        with pytest.raises(ApiException) as refused:
            core.patch_namespaced_pod(
                name, JOBS_NS, swap, _content_type="application/strategic-merge-patch+json"
            )
        assert refused.value.status == 422 and POD_POLICY in str(refused.value.body)
    finally:
        core.delete_namespaced_pod(name, JOBS_NS)


def test_the_gpu_operator_driver_component_is_admitted_and_its_pod_too(
    admin: client.ApiClient,
    identities: Identities,
    ds_controller: client.ApiClient,
    kubectl_binary: Path,
    stored: dict[str, Any],
    tmp_path: Path,
) -> None:
    """An overlay with components/agent-gpu-operator-driver (docs/agent.md): the DaemonSet
    kustomize builds is admitted, and so is the Pod the controller makes of it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    up = os.path.relpath(BASE.parent, overlay)  # kustomize takes no absolute paths
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{up}/base]\ncomponents: [{up}/components/agent-gpu-operator-driver]\n"
    )
    built = Kubectl(kubectl_binary).build(overlay)
    doc = next(d for d in built if d["kind"] == "DaemonSet")
    spec = doc["spec"]["template"]["spec"]
    assert spec["volumes"][-1] == agent.DRIVER_VOLUME
    assert spec["containers"][0]["volumeMounts"][-1] == agent.DRIVER_MOUNT
    doc["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    apps = client.AppsV1Api(identities.jobs_ns_admin)
    apps.replace_namespaced_daemon_set(agent.NAME, JOBS_NS, doc, dry_run="All")
    with_driver = copy.deepcopy(stored)  # the stored DaemonSet, with the API server's defaults
    stored_spec = with_driver["spec"]["template"]["spec"]
    stored_spec["volumes"].append(spec["volumes"][-1])
    stored_spec["containers"][0]["volumeMounts"].append(spec["containers"][0]["volumeMounts"][-1])
    made = as_dict(create(ds_controller, daemonset_pod(with_driver, NODE), dry_run=True))
    assert made["spec"]["volumes"][-1]["hostPath"] == agent.DRIVER_VOLUME["hostPath"]
