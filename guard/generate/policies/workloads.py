"""Policies of the jobs namespace: per kind one for its Jobs and one for its Pods, a gate in front
of them, and the guard's own scope (docs/security.md, the policy table)."""

from __future__ import annotations

from typing import Any

from guard.generate.policies import agent, argv, ledger, params, site
from guard.generate.policies.cel import Validation, lit, quote, regex
from guard.generate.policies.common import (
    COMPONENT_OF,
    PREFIX,
    guard_user,
    match,
    policy,
    rule,
    scoped,
    sent_by_guard,
)
from guard.generate.policies.kinds import (
    JOB_CONTROLLERS,
    KINDS,
    Kind,
    claim_checks,
    claim_variables,
    job_name_pattern,
    job_shape,
    name_binds_node,
    pod_shape,
)
from guard.generate.policies.shape import (
    fixed_once_admitted,
    owners_fixed_once_admitted,
    validations,
)
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    CYCLE_LEASE,
    LEASE_HOLDER_PATTERN,
    LEDGER_ARCHIVE_COMPONENT,
    NODE_EVENT_NAMESPACE,
    POD_EVENT_REASONS,
    REPORTING_CONTROLLER,
)
from guard.settings import LEASE_MAX_S, Settings

# Workload resources that would make Pods or Jobs by another controller, in group order.
OTHER_WORKLOADS = (
    ("batch", ("cronjobs",)),
    ("apps", ("deployments", "replicasets", "statefulsets", "daemonsets")),
    ("", ("replicationcontrollers", "podtemplates")),
)
# Ways into a running pod: a shell, its terminal, its ports, its HTTP (pods/proxy).
INTERACTIVE = ("exec", "attach", "portforward", "proxy")


def _creator_checks(kind: Kind, s: Settings) -> list[Validation]:
    """A kind only the guard creates (the fence: anyone else's in-shape Job would change a host
    without the guard's record of it), or its Jobs holding `guard_only_word` (a node trigger's
    evidence). Last, so an out-of-shape Job is told its shape."""
    word = kind.guard_only_word
    if not (kind.guard_only or word):
        return []
    mine = f"request.operation != 'CREATE' || request.userInfo.username == {quote(guard_user(s))}"
    other = f" || !variables.cmd.exists(a, a == {quote(word)})" if word else ""
    why = "(it keeps the record of what they change)"
    what = f"with {word} (its cordon's node-wide evidence)" if word else why
    said = f"only the guard's ServiceAccount creates {kind.name} Jobs {what}; not "
    return [Validation(mine + other, said, "request.userInfo.username")]


def kind_policies(kind: Kind, s: Settings) -> list[dict[str, Any]]:
    """The Job policy and the Pod policy of one kind."""
    # The one image this kind runs: the site's GUARD_IMAGE or GUARD_LOADTEST_IMAGE, which
    # manifests/base/image-wiring writes into the settings ConfigMap from `images:`.
    image = params.text(s, kind.image)
    is_kind = [("is-" + kind.name, f"{COMPONENT_OF} == {quote(kind.name)}")]
    # The load test's Pod is placed by nodeName, or (a DRA device's) by its ResourceClaim.
    node = claim_variables() if kind.gpus else [("node", "variables.pod.?nodeName.orValue('')")]

    def variables(who: str, pod: str, *own: tuple[str, str]) -> list[tuple[str, str]]:
        head = [("who", who), ("image", image), ("pod", pod)]
        container = ("container", "variables.pod.containers[0]")
        return [*head, container, *node, *own, *argv.variables(kind.layouts(), "argv"), *site_vars]

    site_vars = site.variables(kind.name, s)
    job_vars = variables(
        "'Job ' + request.namespace + '/' + object.metadata.name", "object.spec.template.spec"
    )
    labels = "object.metadata.?labels.orValue({})"
    pod_vars = variables(
        "'Pod ' + request.namespace + '/' + object.metadata.?name.orValue('')",
        "object.spec",
        ("jobName", f"{labels}[?'batch.kubernetes.io/job-name'].orValue('')"),
        ("jobUid", f"{labels}[?'batch.kubernetes.io/controller-uid'].orValue('')"),
    )
    owner_name = Validation(
        "variables.jobName.matches(" + regex(job_name_pattern(kind)) + ")",
        f"the owning Job must be a guard {kind.name} Job ({kind.job_prefix}…), got ",
        "variables.jobName",
    )
    scope = scoped(s.jobs_namespace)
    jobs = {"resourceRules": [rule("batch", ["jobs"], ["CREATE", "UPDATE"])], **scope}
    pods = {"resourceRules": [rule("", ["pods"], ["CREATE", "UPDATE"])], **scope}
    ref = params.param_ref(s)
    job_checks = [
        *validations(job_shape(kind, s), "object", ""),
        name_binds_node(kind, "object.metadata.name", "variables.node"),
        *claim_checks(kind, pod=False),
        *site.argv_checks(kind.name),
        *site.job_checks(kind.name),
        # The Job controller writes status (a subresource) only; the API server's deletion
        # finalizers come and go.
        *fixed_once_admitted("Job", ("finalizers",)),
        *_creator_checks(kind, s),
    ]
    pod_checks = [
        owner_name,
        *validations(pod_shape(kind, s), "object", ""),
        name_binds_node(kind, "variables.jobName", "variables.node"),
        *claim_checks(kind, pod=True),
        *site.argv_checks(kind.name),
        # The Job controller removes its finalizer; CNIs annotate (docs/security.md).
        *fixed_once_admitted("Pod", ("annotations", "finalizers", "ownerReferences")),
        owners_fixed_once_admitted("Pod"),
    ]
    return [
        *policy(f"{PREFIX}-{kind.name}-job", jobs, job_vars, job_checks, is_kind, ref),
        *policy(f"{PREFIX}-{kind.name}-pod", pods, pod_vars, pod_checks, is_kind, ref),
    ]


def gate_policy(s: Settings) -> list[dict[str, Any]]:
    """Everything in the jobs namespace that is not a Job or Pod of a kind is refused."""
    ns = s.jobs_namespace
    kinds_of: dict[str, list[str]] = {
        "jobs": [k.name for k in KINDS],
        "daemonsets": [agent.COMPONENT],
        "pods": [*(k.name for k in KINDS), agent.COMPONENT],
    }
    controllers: dict[str, list[str]] = {k.name: list(JOB_CONTROLLERS) for k in KINDS}
    controllers[agent.COMPONENT] = list(agent.CONTROLLERS)
    # DaemonSets are the agent's (its own shape applies); every other workload is refused.
    refused = [r for _, names in OTHER_WORKLOADS for r in names if r not in kinds_of]
    constraints = {
        **scoped(ns),
        "resourceRules": [
            rule("batch", ["jobs", "cronjobs"], ["CREATE", "UPDATE"]),
            rule(
                "apps",
                [r for g, rs in OTHER_WORKLOADS if g == "apps" for r in rs],
                ["CREATE", "UPDATE"],
            ),
            rule("", ["pods", "replicationcontrollers", "podtemplates"], ["CREATE", "UPDATE"]),
            rule("", [f"pods/{sub}" for sub in INTERACTIVE], ["CONNECT"]),
            rule("", ["pods/ephemeralcontainers"], ["UPDATE"]),
        ],
    }
    variables = [
        ("who", "request.kind.kind + ' ' + request.namespace + '/' + request.name"),
        ("resource", "request.resource.resource"),
        ("sub", "request.?subResource.orValue('')"),
        ("mainResource", "variables.sub == ''"),
        ("component", f"variables.mainResource ? {COMPONENT_OF} : ''"),
    ]
    checks = [
        Validation(
            f"!(variables.resource in {lit(refused)})",
            f"namespace {ns} runs only the guard's Jobs and their Pods; no ",
            "request.kind.kind + ' objects here'",
        ),
        Validation(
            f"!(variables.sub in {lit(list(INTERACTIVE))})",
            "no exec, attach, port-forward or proxy into the guard's privileged pods (",
            "variables.sub + ')'",
        ),
        Validation(
            "variables.sub != 'ephemeralcontainers'",
            "no ephemeral (debug) containers in the guard's privileged pods",
        ),
        Validation(
            f"!variables.mainResource || !(variables.resource in {lit(list(kinds_of))}) || "
            f"variables.component in {lit(kinds_of)}[variables.resource]",
            f"the {COMPONENT_LABEL} label must name a guard kind "
            f"({', '.join(kinds_of['pods'])}); got ",
            "'\"' + variables.component + '\"'",
        ),
        Validation(
            "variables.resource != 'pods' || !variables.mainResource || "
            "request.operation != 'CREATE' || "
            f"request.userInfo.username in {lit(controllers)}[?variables.component].orValue([])",
            "Pods here are created only by the controller of their kind (the Job controller; "
            "the DaemonSet controller for the agent), never directly; sent by ",
            "request.userInfo.username",
        ),
    ]
    return policy(f"{PREFIX}-jobs-namespace", constraints, variables, checks)


def guard_scope_policy(s: Settings) -> list[dict[str, Any]]:
    """Where the guard's ServiceAccount may create Jobs, ConfigMaps, Events and its one Lease."""
    written = {"batch": "jobs", "": "configmaps", "events.k8s.io": "events"}
    written["coordination.k8s.io"] = "leases"
    constraints = match([rule(g, [r], ["CREATE", "UPDATE"]) for g, r in written.items()])
    variables = [
        ("who", "request.kind.kind + ' ' + request.namespace + '/' + request.name"),
        ("name", "object.metadata.?name.orValue('')"),
        ("labels", "object.metadata.?labels.orValue({})"),
    ]
    name = s.ledger_configmap
    checks = [
        Validation(
            "request.resource.resource != 'jobs' || "
            f"request.namespace == {quote(s.jobs_namespace)}",
            f"the guard creates Jobs only in namespace {s.jobs_namespace}",
        ),
        Validation(
            "request.resource.resource != 'configmaps' || "
            f"(request.namespace == {quote(s.namespace)} && (variables.name == {quote(name)} || "
            f"variables.name.matches({regex(ledger.archive_pattern(s))})))",
            f"the guard writes only its ledger ConfigMap {name} and its archives "
            f"{name}-archive-<n>, in namespace {s.namespace}",
        ),
        Validation(
            "request.resource.resource != 'configmaps' || "
            + ledger.archive_labelled_as_named(s, "variables.name", "variables.labels"),
            f"the guard's archives are named {name}-archive-<n> and labelled "
            f"{APP_LABEL}={APP_NAME} and {COMPONENT_LABEL}={LEDGER_ARCHIVE_COMPONENT}; "
            "no other ConfigMap carries that component label",
        ),
        Validation(
            "request.resource.resource != 'leases' || "
            f"(request.namespace == {quote(s.namespace)} && "
            f"variables.name == {quote(CYCLE_LEASE)})",
            f"the guard's only Lease is {CYCLE_LEASE}, in namespace {s.namespace}",
        ),
        # guard/doors/lease.py: a run writes its own holder (or "" to release it) and a duration of
        # at most lease_duration_s; a hijacked Lease would stop every run (each exits 0).
        Validation(
            "request.resource.resource != 'leases' || "
            "(object.?spec.?holderIdentity.orValue('') == '' || "
            f"object.spec.holderIdentity.matches({regex(LEASE_HOLDER_PATTERN)}))",
            "the Lease's holderIdentity is a run's, <pod>-<pid>, or empty",
        ),
        Validation(
            "request.resource.resource != 'leases' || "
            "(object.?spec.?leaseDurationSeconds.orValue(0) >= 1 && "
            f"object.?spec.?leaseDurationSeconds.orValue(0) <= {LEASE_MAX_S})",
            f"the Lease's leaseDurationSeconds is 1..{LEASE_MAX_S}, as a run writes it",
        ),
        # guard/apply/events.py: Events about Nodes, in one namespace; and (RBAC: create only,
        # in any namespace) about the pods on a GPU it isolates (guard/plan/workload.py), each
        # in the pod's own namespace, a Warning of its fixed reasons. As the guard's controller.
        Validation(
            "request.resource.resource != 'events' || "
            "((object.?regarding.?kind.orValue('') == 'Node' && "
            "object.?regarding.?namespace.orValue('') == '' || "
            "object.?regarding.?kind.orValue('') == 'Pod' && "
            "object.?regarding.?namespace.orValue('') == request.namespace) && "
            "object.?regarding.?apiVersion.orValue('') == 'v1' && !('related' in object))",
            "the guard's Events are regarding a Node (v1), or a Pod (v1) of the Event's own "
            "namespace, with no related object",
        ),
        Validation(
            "request.resource.resource != 'events' || "
            f"object.?reportingController.orValue('') == {quote(REPORTING_CONTROLLER)}",
            f"the guard's Events are reported by {REPORTING_CONTROLLER}",
        ),
        Validation(
            "request.resource.resource != 'events' || "
            "object.?regarding.?kind.orValue('') == 'Pod' || "
            f"request.namespace == {quote(NODE_EVENT_NAMESPACE)}",
            f"the guard writes Events about Nodes only in namespace {NODE_EVENT_NAMESPACE}",
        ),
        Validation(
            "request.resource.resource != 'events' || "
            "object.?regarding.?kind.orValue('') != 'Pod' || "
            "(object.?type.orValue('') == 'Warning' && "
            f"object.?reason.orValue('') in {lit(list(POD_EVENT_REASONS))} && "
            "request.operation == 'CREATE')",
            "the guard's Events about a Pod are created once, type Warning, reason one of "
            + ", ".join(POD_EVENT_REASONS),
        ),
    ]
    return policy(f"{PREFIX}-guard-scope", constraints, variables, checks, [sent_by_guard(s)])
