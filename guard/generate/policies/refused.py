"""Fields a guard Job or Pod may not carry, each with its reason (the shapes in kinds.py allow a
field or list it here; tests/apiserver/test_policy_schema.py proves each field was decided on)."""

from __future__ import annotations

CONTAINER_REFUSED = {
    "args": "the whole argv is in command, matched word by word",
    "envFrom": "would import a Secret or ConfigMap a namespace admin controls",
    "lifecycle": "postStart/preStop hooks run arbitrary commands in the privileged container",
    **dict.fromkeys(
        ("livenessProbe", "readinessProbe", "startupProbe"), "exec probes run arbitrary commands"
    ),
    "ports": "the guard's programs serve nothing (hostPort would bind the node)",
    "resizePolicy": "resources are pinned",
    "restartPolicy": "no sidecars",
    "restartPolicyRules": "no restarts",
    **dict.fromkeys(("stdin", "stdinOnce", "tty"), "no interactive session"),
    "volumeDevices": "no block devices",
    "workingDir": "the image's own",
}
POD_REFUSED = {
    "activeDeadlineSeconds": "the Job's deadline bounds the pod",
    "affinity": "placement is nodeName plus the GPU nodeSelector",
    "dnsConfig": "cluster DNS only",
    "ephemeralContainers": "no debug containers in a privileged pod",
    "hostAliases": "no /etc/hosts edits",
    **dict.fromkeys(("hostIPC", "hostNetwork"), "never"),
    "hostUsers": "the host-reading kinds need the host user namespace; the rest inherit it",
    **dict.fromkeys(("hostname", "hostnameOverride", "setHostnameAsFQDN"), "the pod's own"),
    "initContainers": "one container only",
    "os": "Linux, implied",
    "overhead": "set by RuntimeClass admission, which is refused",
    "priorityClassName": "no priority above other pods (system-node-critical…)",
    "readinessGates": "not a Service backend",
    "resourceClaims": "no devices beyond the GPU resource",
    "resources": "container resources only",
    "runtimeClassName": "the node's default runtime",
    "schedulingGates": "not scheduled (nodeName)",
    "shareProcessNamespace": "one container",
    "subdomain": "no headless Service",
    "topologySpreadConstraints": "placement is nodeName",
}
JOB_SPEC_REFUSED = {
    "backoffLimitPerIndex": "NonIndexed, no retries",
    "managedBy": "only the built-in Job controller runs the guard's Jobs",
    "maxFailedIndexes": "NonIndexed",
    "podFailurePolicy": "no retries to steer",
    "successPolicy": "NonIndexed",
}
META_REFUSED = {
    "generateName": "the guard names its Jobs",
    "ownerReferences": "top-level objects (no CronJob or other owner)",
    "selfLink": "deprecated, never set",
}
_NOT_IN_A_TEMPLATE = (
    "creationTimestamp deletionGracePeriodSeconds deletionTimestamp finalizers generation"
    " managedFields resourceVersion uid"
)
TEMPLATE_META_REFUSED = {
    "annotations": "none (AppArmor, CNI and runtime annotations change the pod)",
    **dict.fromkeys(_NOT_IN_A_TEMPLATE.split(), "not part of a template"),
    **dict.fromkeys(("generateName", "name", "ownerReferences"), "set by the Job controller"),
    "namespace": "the Job's",
    "selfLink": "deprecated, never set",
}
