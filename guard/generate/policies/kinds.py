"""The exact shape of each guard Job kind and of its Pods: the Job as jobs/ renders it plus what
the API server fills in on create, the Pod as the Job controller creates it (and admission adds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from guard.generate.policies import argv, params
from guard.generate.policies.cel import Validation, lit, quote, regex
from guard.generate.policies.shape import (
    IMAGE_PULL_SECRETS,
    SYSTEM,
    Expr,
    Field,
    Obj,
    One,
    Shape,
    exact,
    int_in,
    matching,
    opt,
)
from guard.jobs import (
    JOB_NAME_BUDGET,
    NODE_LABEL_DIGEST,
    NODE_LABEL_KEEP,
    JobKind,
    JobSpec,
    JobTemplates,
)
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    GPU_RESOURCE,
    JOB_NAME_LABELS,
    Annotations,
)
from guard.settings import (
    JOB_DEADLINE_MAX_S,
    JOB_DEADLINE_MIN_S,
    JOB_TTL_MAX_S,
    JOB_TTL_MIN_S,
    Settings,
)

JOB_CONTROLLERS = (
    # kube-controller-manager --use-service-account-credentials (kubeadm, RKE2, most installs)
    "system:serviceaccount:kube-system:job-controller",
    # kube-controller-manager running on its own credentials
    "system:kube-controller-manager",
)
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
REASON = r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$"
UNSCHEDULABLE = {
    "key": "node.kubernetes.io/unschedulable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
# DefaultTolerationSeconds admission adds these to every Pod (300 s unless the API server's
# --default-{not-ready,unreachable}-toleration-seconds say otherwise).
ADMISSION_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# The node label of a guard Job and its Pods: guard.jobs.node_label of the pod's nodeName (the
# name itself up to 63 characters, else its first 54, '-' and 8 hex digits). CEL has no SHA-256:
# the digest is checked for its form; the Job's node annotation carries the full name.
_KEEP, _DIGEST = NODE_LABEL_KEEP, NODE_LABEL_DIGEST
NODE_LABEL = Expr(
    f"size(variables.node) <= {_KEEP + _DIGEST + 1} ? {{v}} == variables.node : "
    f"({{v}}.startsWith(variables.node.substring(0, {_KEEP}) + '-') && "
    f"size({{v}}) == {_KEEP + _DIGEST + 1} && "
    f"{{v}}.substring({_KEEP + 1}).matches('^[0-9a-f]{{{_DIGEST}}}$'))",
    f"the pod's nodeName, or (longer than 63) its first {_KEEP} characters, '-' and "
    f"{_DIGEST} hex digits of its SHA-256",
)


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of guard workload, named by its app.kubernetes.io/component label."""

    name: JobKind
    job_prefix: str  # guard.jobs.job_name: gng-<short>-<node>-<digest>
    image: Literal["image", "loadtest_image"]
    layouts: Callable[[], tuple[argv.Layout, ...]]
    gpus: bool = False
    # Created by the guard's ServiceAccount only: a Job of the kind changes the host, and the
    # guard keeps the record of what it changed (docs/security.md, the fence).
    guard_only: bool = False
    guard_only_word: str = ""  # an argv word only the guard's Jobs of the kind hold (evidence)

    @property
    def template(self) -> dict[str, Any]:
        """The PodSpec of the kind's Job template (jobs/): what the policy pins exactly of it."""
        job = JobSpec(self.name, "n", "ns", "node", "r", "p/", "i", (), 1, 1, "sa")
        spec: dict[str, Any] = _templates().render(job)["spec"]["template"]["spec"]
        return spec


@cache
def _templates() -> JobTemplates:
    return JobTemplates.load()


KINDS = (
    # A node trigger's evidence Job (--trigger) is the guard's cordon's only.
    Kind("evidence", "gng-ev-", "image", argv.evidence, guard_only_word="--trigger"),
    Kind("conformance", "gng-cf-", "image", argv.conformance),
    # The fence writes one GPU's compute mode with the host's nvidia-smi: the host readers'
    # access (not the kernel log's SYSLOG), nothing more (docs/isolation.md).
    Kind("fence", "gng-fn-", "image", argv.fence, guard_only=True),
    Kind("loadtest", "gng-lt-", "loadtest_image", argv.loadtest, gpus=True),
)


# ── Shapes ───────────────────────────────────────────────────────────────────────────────────


def _container(kind: Kind, s: Settings) -> Obj:
    (made,) = kind.template["containers"]
    fields: dict[str, Field | Shape] = {
        "name": exact(kind.name),
        "image": Expr("{v} == variables.image", "the image in this policy's `image`"),
        "imagePullPolicy": exact("IfNotPresent"),
        "command": Expr(
            # The policy's `container` variable: a short name, repeated in every layout.
            argv.cel(kind.layouts(), "variables.container.command", "variables.node", "argv"),
            argv.describe(kind.layouts()),
        ),
        "securityContext": exact(made["securityContext"]),
        "resources": _resources(kind, made["resources"]),
        "terminationMessagePath": exact("/dev/termination-log"),
        "terminationMessagePolicy": exact("File"),
    }
    fields |= {name: exact(made[name]) for name in ("env", "volumeMounts") if name in made}
    return Obj(fields)


def _resources(kind: Kind, made: dict[str, Any]) -> Expr | Obj:
    if not kind.gpus:
        return exact(made)
    # Every GPU of the node, as many as the argv's --expected-gpus (argv word 6); none in the
    # claim shape, whose one GPU is its ResourceClaim's (claim_checks: present in the other).
    gpus = opt(
        Expr(
            "!variables.claimed && size(variables.container.command) > 6 && "
            "{v} == variables.container.command[6]",
            "the --expected-gpus count (none with a resourceClaims entry)",
        )
    )
    return Obj(
        {
            "requests": Obj({"cpu": exact("2"), "memory": exact("8Gi"), GPU_RESOURCE: gpus}),
            "limits": Obj({"memory": exact("32Gi"), GPU_RESOURCE: gpus}),
            "claims": opt(
                Expr(
                    f"variables.claimed && {{v}} == {lit([{'name': CLAIM}])}",
                    f"{lit([{'name': CLAIM}])}, with the Pod's one resourceClaims entry",
                )
            ),
        },
    )


# The device load test's (guard.plan.device_taint, jobs/_macros.j2): the Pod's one claim, named
# for the Job; the scheduler allocates it, so no nodeName, and the hostname label is the node.
CLAIM = "gpu"
HOSTNAME = "kubernetes.io/hostname"


def claim_variables() -> list[tuple[str, str]]:
    """`claimed`: the Pod uses the claim shape (one GPU by a ResourceClaim, jobs/_macros.j2);
    `node`: its nodeName, else (claim shape, not yet bound) its hostname label."""
    return [
        ("claimed", "'resourceClaims' in variables.pod"),
        (
            "node",
            f"variables.pod.?nodeName.orValue(variables.claimed ? "
            f"variables.pod.?nodeSelector[?{quote(HOSTNAME)}].orValue('') : '')",
        ),
    ]


def claim_checks(kind: Kind, *, pod: bool) -> list[Validation]:
    """What each shape must hold that `pod_spec` leaves optional: the device-plugin shape its
    nodeName and nvidia.com/gpu, the claim shape its container claim, one GPU and no nodeName
    until the scheduler binds the Pod (a Pod's update after that carries it)."""
    if not kind.gpus:
        return []
    res = "variables.container.?resources"
    limit, request = (
        f"{res}.?{part}[?{quote(GPU_RESOURCE)}].hasValue()" for part in ("limits", "requests")
    )
    bound = f"!({CREATE_OP}) || " if pod else ""
    return [
        Validation(
            f"variables.claimed || ('nodeName' in variables.pod && {limit} && {request})",
            f"without a resourceClaims entry, spec.nodeName and the {GPU_RESOURCE} request "
            "and limit are required",
        ),
        Validation(
            f"!variables.claimed || ({bound}!('nodeName' in variables.pod)) && "
            f"{res}.?claims.hasValue() && size(variables.container.command) > 6 && "
            "variables.container.command[6] == '1'",
            "with a resourceClaims entry: no spec.nodeName (the scheduler places the claim), "
            f"the container's claim {CLAIM!r} and --expected-gpus 1",
        ),
    ]


_NODE_NAME = matching(argv.NODE, "a node name (DNS-1123, at most 253 characters)")


def pod_spec(kind: Kind, s: Settings, *, pod: bool) -> Obj:
    """The PodSpec of a kind: in the Job's template (`pod=False`) or of a created Pod."""
    key, value = s.gpu_node_selector
    fields: dict[str, Field | Shape] = {
        "containers": One(_container(kind, s)),
        "nodeName": _NODE_NAME,
        "nodeSelector": exact({key: value}),
    }
    if kind.gpus:  # the device-plugin shape, or the claim shape (claim_checks)
        claim_name = "variables.jobName" if pod else "object.metadata.name"
        fields["nodeName"] = opt(_NODE_NAME)
        fields["nodeSelector"] = Expr(
            f"{{v}} == (variables.claimed ? {{{quote(key)}: dyn({quote(value)}), "
            f"{quote(HOSTNAME)}: dyn(variables.node)}} : {lit({key: value})})",
            f"{lit({key: value})}, and {HOSTNAME} the node's name with a resourceClaims entry",
        )
        fields["resourceClaims"] = opt(
            Expr(
                f"{{v}} == [{{'name': dyn({quote(CLAIM)}), "
                f"'resourceClaimName': dyn({claim_name})}}]",
                f"one entry, {CLAIM!r}, naming the ResourceClaim the guard made for this Job "
                "(its name)",
            )
        )
    fields |= {
        "restartPolicy": exact("Never"),
        "serviceAccountName": exact(s.job_service_account),
        "serviceAccount": opt(exact(s.job_service_account)),  # the deprecated twin, set by the API
        "automountServiceAccountToken": exact(False),
        "enableServiceLinks": exact(False),
        "tolerations": _pod_tolerations()
        if pod
        else Expr("{v} == variables.tolerations", _TOLERATIONS),
        "terminationGracePeriodSeconds": exact(30),
        "dnsPolicy": exact("ClusterFirst"),
        "schedulerName": exact("default-scheduler"),
        "securityContext": exact({}),
        "imagePullSecrets": opt(IMAGE_PULL_SECRETS),
    }
    made = kind.template
    fields |= {name: exact(made[name]) for name in ("hostPID", "volumes") if name in made}
    if pod:  # filled in by the Priority admission plugin
        fields["priority"] = opt(exact(0))
        fields["preemptionPolicy"] = opt(exact("PreemptLowerPriority"))
    return Obj(fields)


_TOLERATIONS = (
    f"the cordon's {lit(UNSCHEDULABLE)} and, with an onboarding gate, its taint's "
    "(the site's onboarding_taint)"
)


def tolerations(s: Settings) -> list[tuple[str, str]]:
    """The policy variable `tolerations`: the template's (jobs/_macros.j2), the cordon's and the
    onboarding gate's taint when there is a gate, read from the params (params.py)."""
    own = (
        "variables.gateValue == '' ? {'key': variables.gateKey, 'operator': 'Exists', "
        "'effect': variables.gateEffect} : {'key': variables.gateKey, 'operator': 'Equal', "
        "'value': variables.gateValue, 'effect': variables.gateEffect}"
    )
    cordon = lit(UNSCHEDULABLE)
    return [
        *params.gate(s),
        ("tolerations", f"variables.gate == '' ? [{cordon}] : [{cordon}, {own}]"),
    ]


def _pod_tolerations() -> Expr:
    extra = lit(list(ADMISSION_TOLERATIONS))
    added = (
        f"t.all(k, k in ['key', 'operator', 'effect', 'tolerationSeconds']) && "
        f"t.?key.orValue('') in {extra} && t.?operator.orValue('') == 'Exists' && "
        f"t.?effect.orValue('') == 'NoExecute' && "
        f"t.?tolerationSeconds.orValue(-1) >= 0 && t.?tolerationSeconds.orValue(-1) <= 3600"
    )
    return Expr(
        f"variables.tolerations.all(t, t in {{v}}) && "
        f"{{v}}.all(t, t in variables.tolerations || ({added}))",
        f"the template's ({_TOLERATIONS}) plus the admission defaults for {extra}",
    )


def _labels(kind: Kind, s: Settings, *, job_name: str, job_uid: str) -> Obj:
    node = Annotations(s.annotation_prefix).node_label
    fields = {
        APP_LABEL: exact(APP_NAME),
        COMPONENT_LABEL: exact(kind.name),
        node: NODE_LABEL,
    }
    for name in JOB_NAME_LABELS:
        fields[name] = Expr(f"{{v}} == {job_name}", "the Job's name")
    for name in JOB_UID_LABELS:
        fields[name] = Expr(f"{{v}} == {job_uid}", "the Job's uid")
    return Obj(fields)


DELETION_FINALIZERS = Expr(
    "{v}.all(f, f in ['foregroundDeletion', 'orphan'])", "only the API server's deletion finalizers"
)


def job_shape(kind: Kind, s: Settings) -> Obj:
    """The whole Job as the API server hands it to admission on create."""
    node = Annotations(s.annotation_prefix).node_label
    reason = f"{s.annotation_prefix}reason"  # the templates' annotation (jobs/)
    labels = _labels(kind, s, job_name="object.metadata.name", job_uid="object.metadata.uid")
    template = Obj(
        {
            "metadata": Obj({"labels": labels}),
            "spec": pod_spec(kind, s, pod=False),
        },
    )
    metadata = Obj(
        {
            "name": _job_name(kind),
            "namespace": exact(s.jobs_namespace),
            "labels": Obj(
                {
                    APP_LABEL: exact(APP_NAME),
                    "app.kubernetes.io/managed-by": exact(APP_NAME),
                    COMPONENT_LABEL: exact(kind.name),
                    node: NODE_LABEL,
                }
            ),
            "annotations": Field(
                Obj(
                    {
                        node: Expr("{v} == variables.node", "the pod's nodeName"),
                        reason: matching(REASON, "a reason word such as xid-79"),
                    }
                ),
                create_only=True,
            ),
            "finalizers": opt(DELETION_FINALIZERS),
            **system_meta(),
        }
    )
    spec = Obj(
        {
            "template": template,
            "backoffLimit": exact(0),
            "activeDeadlineSeconds": int_in(JOB_DEADLINE_MIN_S, JOB_DEADLINE_MAX_S),
            "ttlSecondsAfterFinished": int_in(JOB_TTL_MIN_S, JOB_TTL_MAX_S),
            "parallelism": exact(1),
            "completions": exact(1),
            "completionMode": exact("NonIndexed"),
            "suspend": exact(False),
            "manualSelector": opt(exact(False)),
            "podReplacementPolicy": opt(exact("TerminatingOrFailed")),
            "selector": Expr(
                "{v} == {'matchLabels': {'batch.kubernetes.io/controller-uid': "
                "object.metadata.uid}}",
                "the selector the API server generates",
            ),
        }
    )
    return root(metadata, spec)


def pod_shape(kind: Kind, s: Settings) -> Obj:
    """A Pod of the kind as its controller creates it (defaults and admission additions in)."""
    owner = (
        "{'apiVersion': dyn('batch/v1'), 'kind': dyn('Job'), "
        "'name': dyn(variables.jobName), 'uid': dyn(variables.jobUid), "
        "'controller': dyn(true), 'blockOwnerDeletion': dyn(true)}"
    )
    metadata = Obj(
        {
            "name": Expr(
                "{v}.startsWith(variables.jobName + '-')",
                "the Job's name and a generated suffix",
            ),
            "generateName": Expr("{v} == variables.jobName + '-'", "the Job's name and '-'"),
            "namespace": exact(s.jobs_namespace),
            "labels": _labels(kind, s, job_name="variables.jobName", job_uid="variables.jobUid"),
            "ownerReferences": Field(
                Expr(f"{{v}} == [{owner}]", "the one Job that owns it"), create_only=True
            ),
            "annotations": opt(Expr(f"!({_CREATE})", "absent when the Pod is created")),
            "finalizers": opt(
                Expr(
                    "{v}.all(f, f == 'batch.kubernetes.io/job-tracking')",
                    "only the Job controller's job-tracking finalizer",
                )
            ),
            **system_meta(),
        }
    )
    return root(metadata, pod_spec(kind, s, pod=True))


_CREATE = CREATE_OP = "request.operation == 'CREATE'"


def _room(kind: Kind) -> int:
    """The characters of the node guard.jobs.job_name keeps in a name of `kind` (41)."""
    return JOB_NAME_BUDGET - len(kind.job_prefix) - 9


def job_name_pattern(kind: Kind) -> str:
    """guard.jobs.job_name: the prefix, up to 41 characters of the node, '-', 8 hex digits."""
    return f"^{kind.job_prefix}([a-z0-9-]{{0,{_room(kind)}}}-)?[0-9a-f]{{8}}$"


def name_binds_node(kind: Kind, name: str, node: str) -> Validation:
    """The node part of a guard Job's name (`name`, CEL) is the one guard.jobs.job_name makes of
    `node` (CEL): dots as dashes, at most 41 characters, no trailing dash. A name made for
    another node is refused, so a Job's name, node label and nodeName always agree."""
    head, room = len(kind.job_prefix), _room(kind)
    stem = f"{node}.replace('.', '-')"
    mid = f"{name}.substring({head}, size({name}) - 9)"
    return Validation(
        f"!{name}.matches({regex(job_name_pattern(kind))}) || size({name}) > {head + 9} && "
        f"(size({stem}) <= {room} ? "
        f"{mid} == {stem} : ({stem}.startsWith({mid}) && !{mid}.endsWith('-') && "
        f"{stem}.substring(size({mid}), {room}).matches(r'^-*$')))",
        f"the Job's name must be made for its node ({kind.job_prefix}<node>-<digest>, "
        "the node as guard.jobs.job_name writes it); got ",
        f"{name} + ' for node ' + {node}",
    )


def _job_name(kind: Kind) -> Expr:
    return matching(job_name_pattern(kind), f"a guard Job name ({kind.job_prefix}<node>-<digest>)")


def system_meta() -> dict[str, Field]:
    names = "uid resourceVersion generation creationTimestamp managedFields deletionTimestamp"
    return {name: opt(SYSTEM) for name in (*names.split(), "deletionGracePeriodSeconds")}


def root(metadata: Obj, spec: Obj) -> Obj:
    return Obj(
        {
            "apiVersion": opt(SYSTEM),
            "kind": opt(SYSTEM),
            "metadata": metadata,
            "spec": spec,
            "status": opt(SYSTEM),
        }
    )
