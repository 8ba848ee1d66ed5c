"""The node agent's exact shape: its DaemonSet and the Pods the DaemonSet controller makes of it.
Pod Security in the jobs namespace is `privileged` (the agent mounts host paths), so these two
policies are its real control (docs/security.md, "The node agent's shape")."""

from __future__ import annotations

from typing import Any

from guard.agent.cli import DEFAULT_PORT
from guard.generate.policies import argv, params
from guard.generate.policies.cel import lit, quote, regex, shown
from guard.generate.policies.common import COMPONENT_OF, PREFIX, policy, rule, scoped
from guard.generate.policies.kinds import DELETION_FINALIZERS, JOB_CONTROLLERS, root, system_meta
from guard.generate.policies.shape import (
    IMAGE_PULL_SECRETS,
    SYSTEM,
    Expr,
    Field,
    Obj,
    One,
    Shape,
    exact,
    fixed_once_admitted,
    int_in,
    matching,
    opt,
    owners_fixed_once_admitted,
    validations,
)
from guard.names import APP_LABEL, APP_NAME, COMPONENT_LABEL
from guard.settings import Settings

COMPONENT = "agent"
NAME = "gpu-node-guard-agent"  # the DaemonSet and its ServiceAccount
# kube-controller-manager with --use-service-account-credentials, or on its own credentials.
CONTROLLERS = ("system:serviceaccount:kube-system:daemon-set-controller", JOB_CONTROLLERS[1])
LABELS = {APP_LABEL: APP_NAME, COMPONENT_LABEL: COMPONENT}
ROOT = "/host"
# (volume, host path, type), each read-only; why each and its type: docs/agent.md, "Host paths".
HOST_PATHS = (
    ("host-sys-module", "/sys/module", "Directory"),
    ("host-usr", "/usr", "Directory"),
    ("host-resolv-conf", "/etc/resolv.conf", "File"),
    ("host-systemd-resolve", "/run/systemd/resolve", ""),
)
VOLUMES = [{"name": n, "hostPath": {"path": p, "type": t}} for n, p, t in HOST_PATHS]
MOUNTS = [{"name": n, "readOnly": True, "mountPath": ROOT + p} for n, p, _ in HOST_PATHS]
# The GPU Operator driver's root, added only by manifests/components/agent-gpu-operator-driver
# (docs/agent.md).
DRIVER_VOLUME = {
    "name": "host-nvidia-driver",
    "hostPath": {"path": "/run/nvidia/driver", "type": "Directory"},
}
DRIVER_MOUNT = {
    "name": "host-nvidia-driver",
    "readOnly": True,
    "mountPath": ROOT + "/run/nvidia/driver",
    "mountPropagation": "HostToContainer",
}


def _base_or_driver(base: list[dict[str, Any]], driver: dict[str, Any]) -> Expr:
    """The base list exactly, or the base list plus the driver container's entry last."""
    with_driver = [*base, driver]
    return Expr(
        f"{{v}} == {lit(base)} || {{v}} == {lit(with_driver)}",
        f"exactly {shown(base)}, or that plus {shown(driver)} "
        "(components/agent-gpu-operator-driver)",
    )


ENV = [
    {
        "name": "GUARD_AGENT_NODE",
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
    }
]
PORTS = [{"name": "metrics", "containerPort": DEFAULT_PORT, "protocol": "TCP"}]
RESOURCES = {
    "limits": {"cpu": "100m", "memory": "96Mi"},
    "requests": {"cpu": "5m", "memory": "48Mi"},
}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}
TOLERATE_ALL = {"operator": "Exists"}  # cordoned, tainted and onboarding nodes are watched too
# pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations (network-unavailable only with
# hostNetwork, which is refused).
CONTROLLER_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # `kubectl rollout restart`, ArgoCD's restart
RFC3339 = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
)


LAYOUTS = argv.agent(DEFAULT_PORT)


# ── Shapes ───────────────────────────────────────────────────────────────────────────────────


def _probe() -> Obj:
    """GET /healthz on the metrics port, with any sane timing: nothing the kubelet would run or
    send elsewhere (exec, tcpSocket, grpc, another host, headers)."""
    http = Obj(
        {
            "path": exact("/healthz"),
            "port": exact("metrics"),
            "scheme": exact("HTTP"),
        }
    )
    return Obj(
        {
            "httpGet": http,
            "initialDelaySeconds": opt(int_in(0, 3600)),
            "timeoutSeconds": opt(int_in(1, 60)),
            "periodSeconds": opt(int_in(1, 3600)),
            "successThreshold": opt(int_in(1, 10)),
            "failureThreshold": opt(int_in(1, 100)),
        }
    )


def _container() -> Obj:
    fields: dict[str, Field | Shape] = {
        "name": exact(COMPONENT),
        "image": Expr("{v} == variables.image", "the image in this policy's `image`"),
        # A digest or tag pulls the same image either way; `latest` defaults to Always.
        "imagePullPolicy": matching("^(IfNotPresent|Always)$", "IfNotPresent or Always"),
        "command": Expr(argv.cel(LAYOUTS, "{v}", "''", "argv"), argv.describe(LAYOUTS)),
        "env": exact(ENV),
        "ports": exact(PORTS),
        "readinessProbe": opt(_probe()),
        "livenessProbe": opt(_probe()),
        "resources": exact(RESOURCES),
        "securityContext": exact(CONTAINER_SECURITY),
        "volumeMounts": _base_or_driver(MOUNTS, DRIVER_MOUNT),
        "terminationMessagePath": exact("/dev/termination-log"),
        "terminationMessagePolicy": exact("File"),
    }
    return Obj(fields)


def _node_selector(s: Settings) -> Expr:
    key, value = s.gpu_node_selector
    return Expr(
        f"{{v}}[?{quote(key)}].orValue('') == {quote(value)}",
        f"a map holding {key}={value} (more entries only narrow the placement)",
    )


def pod_spec(s: Settings, *, pod: bool) -> Obj:
    """The agent's PodSpec: in the DaemonSet's template (`pod=False`) or of a created Pod."""
    fields: dict[str, Field | Shape] = {
        "containers": One(_container()),
        "nodeSelector": _node_selector(s),
        "tolerations": _pod_tolerations() if pod else exact([TOLERATE_ALL]),
        "serviceAccountName": exact(NAME),
        "serviceAccount": opt(exact(NAME)),  # the deprecated twin, set by the API server
        "automountServiceAccountToken": exact(False),
        "enableServiceLinks": exact(False),
        "hostNetwork": opt(exact(False)),
        "hostPID": opt(exact(False)),
        "hostIPC": opt(exact(False)),
        "securityContext": exact(POD_SECURITY),
        "volumes": _base_or_driver(VOLUMES, DRIVER_VOLUME),
        "restartPolicy": exact("Always"),
        "terminationGracePeriodSeconds": exact(10),
        "dnsPolicy": exact("ClusterFirst"),
        "schedulerName": exact("default-scheduler"),
        "imagePullSecrets": opt(IMAGE_PULL_SECRETS),
    }
    if pod:
        fields["affinity"] = _one_node_affinity()
        fields["nodeName"] = opt(Expr("{v} == variables.node", "the node of its affinity"))
        fields["priority"] = opt(exact(0))  # filled in by the Priority admission plugin
        fields["preemptionPolicy"] = opt(exact("PreemptLowerPriority"))
    return Obj(fields)


def _pod_tolerations() -> Expr:
    keys = lit([key for key, _ in CONTROLLER_TOLERATIONS])
    effect = lit(dict(CONTROLLER_TOLERATIONS))
    added = (
        "t.all(k, k in ['key', 'operator', 'effect']) && t.?key.orValue('') in "
        + keys
        + f" && t.?operator.orValue('') == 'Exists' && {effect}[t.key] == t.?effect.orValue('')"
    )
    every = lit(TOLERATE_ALL)
    return Expr(
        f"{every} in {{v}} && {{v}}.all(t, t == {every} || ({added}))",
        f"the template's [{lit(TOLERATE_ALL)}] plus the DaemonSet controller's {keys}",
    )


def _one_node_affinity() -> Expr:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["@node"]}]}
    shape = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    literal = lit(shape).replace("'@node'", "variables.node")
    return Expr(
        f"variables.node.matches({regex(argv.NODE)}) && {{v}} == {literal}",
        "the DaemonSet controller's one-node affinity (matchFields metadata.name In [<node>])",
    )


def _template_meta() -> Obj:
    restarted = matching(RFC3339, "an RFC 3339 time (kubectl rollout restart)")
    return Obj(
        {
            "labels": exact(LABELS),
            "annotations": opt(Obj({RESTARTED_AT: restarted})),
        }
    )


def daemonset_shape(s: Settings) -> Obj:
    """The whole DaemonSet as the API server hands it to admission."""
    labels = " && ".join(f"{{v}}[?{quote(k)}].orValue('') == {quote(v)}" for k, v in LABELS.items())
    metadata = Obj(
        {
            "name": exact(NAME),
            "namespace": exact(s.jobs_namespace),
            "labels": Expr(labels, f"a map holding {lit(LABELS)}"),
            "annotations": opt(SYSTEM),  # never reaches a Pod (see the module's case list)
            "finalizers": opt(DELETION_FINALIZERS),
            **system_meta(),
        }
    )
    amount = Expr(
        "type({v}) == int ? {v} >= 0 : string({v}).matches('^[0-9]{1,3}%$')",
        "a count or a percentage",
    )
    strategy = Obj(
        {
            "type": matching("^(RollingUpdate|OnDelete)$", "RollingUpdate or OnDelete"),
            "rollingUpdate": opt(Obj({"maxUnavailable": opt(amount), "maxSurge": opt(amount)})),
        }
    )
    spec = Obj(
        {
            "selector": exact({"matchLabels": LABELS}),
            "template": Obj({"metadata": _template_meta(), "spec": pod_spec(s, pod=False)}),
            "updateStrategy": strategy,
            "revisionHistoryLimit": opt(int_in(0, 1000)),
            "minReadySeconds": opt(int_in(0, 3600)),
        }
    )
    return root(metadata, spec)


def pod_shape(s: Settings) -> Obj:
    """An agent Pod as pkg/controller/daemon creates it: the template's labels plus its revision
    and generation, the DaemonSet as owner, the one-node affinity and its tolerations."""
    owner = (
        "size({v}) == 1 && {v} == [{'apiVersion': dyn('apps/v1'), 'kind': dyn('DaemonSet'), "
        f"'name': dyn({quote(NAME)}), 'uid': dyn({{v}}[0].?uid.orValue('')), "
        "'controller': dyn(true), 'blockOwnerDeletion': dyn(true)}]"
    )
    labels = {k: exact(v) for k, v in LABELS.items()}
    labels["controller-revision-hash"] = matching("^[a-z0-9]{1,63}$", "a revision hash")
    labels["pod-template-generation"] = matching("^[1-9][0-9]{0,18}$", "a generation")
    metadata = Obj(
        {
            "name": Expr(
                f"{{v}}.startsWith({quote(NAME + '-')})",
                "the DaemonSet's name and a generated suffix",
            ),
            "generateName": exact(NAME + "-"),
            "namespace": exact(s.jobs_namespace),
            "labels": Obj(labels),
            "ownerReferences": Field(Expr(owner, "the DaemonSet that owns it"), create_only=True),
            "annotations": opt(
                Expr(
                    f"request.operation != 'CREATE' || {{v}}.all(k, k == {quote(RESTARTED_AT)})",
                    f"only {RESTARTED_AT} when the Pod is created",
                )
            ),
            "finalizers": opt(DELETION_FINALIZERS),
            **system_meta(),
        }
    )
    return root(metadata, pod_spec(s, pod=True))


def variables(s: Settings, *, pod: bool) -> list[tuple[str, str]]:
    """The policy variables the shapes read (`image` from the site's settings ConfigMap)."""
    kind = "Pod" if pod else "DaemonSet"
    out = [
        ("who", f"'{kind} ' + request.namespace + '/' + object.metadata.?name.orValue('')"),
        # the site's GUARD_IMAGE (guard/generate/policies/params.py)
        ("image", params.text(s, "image")),
        ("pod", "object.spec" if pod else "object.spec.template.spec"),
        *argv.variables(LAYOUTS, "argv"),
    ]
    if pod:
        affinity = (
            "variables.pod.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
        )
        first = ".?nodeSelectorTerms[?0].?matchFields[?0].?values[?0].orValue('')"
        out.append(("node", affinity + first))
    return out


def policies(s: Settings) -> list[dict[str, Any]]:
    """The DaemonSet policy and the Pod policy of the agent."""
    is_agent = [("is-agent", f"{COMPONENT_OF} == {quote(COMPONENT)}")]
    scope = scoped(s.jobs_namespace)
    daemonsets = {"resourceRules": [rule("apps", ["daemonsets"], ["CREATE", "UPDATE"])], **scope}
    pods = {"resourceRules": [rule("", ["pods"], ["CREATE", "UPDATE"])], **scope}
    return [
        *policy(
            f"{PREFIX}-agent-daemonset",
            daemonsets,
            variables(s, pod=False),
            validations(daemonset_shape(s), "object", ""),
            is_agent,
            params.param_ref(s),
        ),
        *policy(
            f"{PREFIX}-agent-pod",
            pods,
            variables(s, pod=True),
            [
                *validations(pod_shape(s), "object", ""),
                *fixed_once_admitted("Pod", ("annotations", "finalizers", "ownerReferences")),
                owners_fixed_once_admitted("Pod"),
            ],
            is_agent,
            params.param_ref(s),
        ),
    ]
