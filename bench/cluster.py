"""The synthetic cluster's API objects: Nodes, Pods, the ledger ConfigMap; as a List file.

The List is what ``kubectl get nodes,pods,configmaps -A -o json`` prints (no managedFields), which
is what an operator hands to ``--cluster-snapshot``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.objects import DAEMONSETS, STAMP, fake_uid, hex_digest, node_object
from bench.synthetic import CORDONED_ROLES, FAULT_GPU, XID_OF, ClusterSpec, Role, pci_of, uuid_of
from guard.names import RECORDER
from guard.settings import Settings

WORKLOAD_NS = "research"
WORKLOAD_IMAGE = "registry.example.com/research/train-llm:2026.25"


def nodes(spec: ClusterSpec, s: Settings) -> Iterator[dict[str, Any]]:
    roles = spec.roles()
    for index in range(spec.nodes):
        yield node_object(spec, index, roles.get(spec.name(index)), s)


def pods(spec: ClusterSpec) -> Iterator[dict[str, Any]]:
    """Every node's DaemonSet pods; one 8-GPU training pod on each schedulable node."""
    roles = spec.roles()
    for index in range(spec.nodes):
        node = spec.name(index)
        for namespace, daemonset, image in DAEMONSETS:
            name = f"{daemonset}-{index:05d}"  # unique, unlike a random suffix
            yield pod_object(namespace, name, node, image, 0, ("DaemonSet", daemonset))
        if roles.get(node) not in CORDONED_ROLES:
            owner = ("StatefulSet", "train-llm-worker")
            yield pod_object(
                WORKLOAD_NS, f"train-llm-worker-{index}", node, WORKLOAD_IMAGE, spec.gpus, owner
            )


def pod_object(
    namespace: str, name: str, node: str, image: str, gpus: int, owner: tuple[str, str]
) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    if gpus:
        resources = {
            "requests": {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": "1800Gi", "nvidia.com/gpu": str(gpus)},
        }
    container: dict[str, Any] = {
        "name": owner[1].split("-")[-1],
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--config=/etc/app/config.yaml", "--log-level=info"],
        "env": [
            {
                "name": "NODE_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
            },
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void" if not gpus else "all"},
        ],
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"mountPath": "/etc/app", "name": "config", "readOnly": True},
            {
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": "kube-api-access",
                "readOnly": True,
            },
        ],
    }
    uid = fake_uid("pod", namespace, name)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": str(int(uid[:6], 16)),
            "creationTimestamp": STAMP,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {
                "app.kubernetes.io/name": owner[1],
                "controller-revision-hash": hex_digest(owner, n=10),
                "pod-template-generation": "3",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": owner[0],
                    "name": owner[1],
                    "uid": fake_uid(*owner),
                }
            ],
        },
        "spec": {
            "containers": [container],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": owner[1],
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": owner[1], "defaultMode": 420}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
                        ],
                    },
                },
            ],
        },
        "status": pod_status(node, name, container["name"], image, uid),
    }


def pod_status(node: str, name: str, container: str, image: str, uid: str) -> dict[str, Any]:
    conditions = [
        {"lastProbeTime": None, "lastTransitionTime": STAMP, "status": "True", "type": kind}
        for kind in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "10.64.0.1",
        "podIP": f"10.42.{int(uid[:2], 16)}.{int(uid[2:4], 16)}",
        "qosClass": "Burstable",
        "startTime": STAMP,
        "containerStatuses": [
            {
                "containerID": f"containerd://{hex_digest('c', node, name)}",
                "image": image,
                "imageID": f"{image.rsplit(':', 1)[0]}@sha256:{hex_digest(image)}",
                "lastState": {},
                "name": container,
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": STAMP}},
            }
        ],
    }


def ledger_configmap(spec: ClusterSpec, s: Settings) -> dict[str, Any]:
    """Earlier guard cordons, one ledger line each (the guarded nodes)."""
    data = {}
    for node, role in spec.roles().items():
        if role in ("guarded-a", "guarded-b"):
            card = f"{pci_of(FAULT_GPU)[4:]} {uuid_of(node, FAULT_GPU)}"
            data[node] = f"2026-09-21T05:05:00Z xid-{XID_OF[role]} {card} {RECORDER}\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": s.ledger_configmap, "namespace": s.namespace, "resourceVersion": "77"},
        "data": data,
    }


def write_list(spec: ClusterSpec, s: Settings, path: Path) -> tuple[int, int]:
    """Write the List as JSON; returns (objects, bytes)."""
    items = [*nodes(spec, s), *pods(spec), ledger_configmap(spec, s)]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, separators=(",", ":"))
    path.write_text(text, encoding="utf-8")
    return len(items), len(text)


def role_of(spec: ClusterSpec, node: str) -> Role | None:
    return spec.roles().get(node)
