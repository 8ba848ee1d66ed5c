"""Pod objects of the synthetic cluster, shaped like ``kubectl get pods -o json`` returns them."""

from __future__ import annotations

from typing import Any

from bench.objects import STAMP, fake_uid, hex_digest

Owner = tuple[str, str]  # (kind, name) of the controller


def pod_object(
    namespace: str, name: str, node: str, image: str, gpus: int, owner: Owner
) -> dict[str, Any]:
    uid = fake_uid("pod", namespace, name)
    container = _container(owner, image, gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(namespace, name, owner, uid),
        "spec": _spec(node, owner, container),
        "status": pod_status(node, name, container["name"], image, uid),
    }


def _metadata(namespace: str, name: str, owner: Owner, uid: str) -> dict[str, Any]:
    return {
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
    }


def _resources(gpus: int) -> dict[str, Any]:
    if not gpus:
        return {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    return {
        "requests": {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": str(gpus)},
        "limits": {"memory": "1800Gi", "nvidia.com/gpu": str(gpus)},
    }


def _container(owner: Owner, image: str, gpus: int) -> dict[str, Any]:
    node_name = {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    return {
        "name": owner[1].split("-")[-1],
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--config=/etc/app/config.yaml", "--log-level=info"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": node_name},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all" if gpus else "void"},
        ],
        "resources": _resources(gpus),
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"mountPath": "/etc/app", "name": "config", "readOnly": True},
            {"mountPath": token_dir, "name": "kube-api-access", "readOnly": True},
        ],
    }


def _spec(node: str, owner: Owner, container: dict[str, Any]) -> dict[str, Any]:
    token = {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    not_ready = {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "tolerationSeconds": 300,
    }
    return {
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
            not_ready,
        ],
        "volumes": [
            {"name": "config", "configMap": {"name": owner[1], "defaultMode": 420}},
            {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [token]}},
        ],
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
