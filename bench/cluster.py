"""The synthetic cluster's API objects: Nodes, Pods, the ledger ConfigMap; as a List file.

The List is what ``kubectl get nodes,pods,configmaps -A -o json`` prints (no managedFields), which
is what an operator hands to ``--cluster-snapshot``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.objects import DAEMONSETS, node_object
from bench.pods import pod_object
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
    """Write the List as JSON, one item at a time (50,000 nodes are gigabytes); returns
    (objects, bytes). Keys in kubectl's order: `items` before `kind`."""
    count, size = 0, 0
    with path.open("w", encoding="utf-8") as out:
        size += out.write('{"apiVersion":"v1","items":[')
        for item in itertools.chain(nodes(spec, s), pods(spec), [ledger_configmap(spec, s)]):
            size += out.write(("," if count else "") + json.dumps(item, separators=(",", ":")))
            count += 1
        size += out.write('],"kind":"List","metadata":{"resourceVersion":""}}')
    return count, size


def role_of(spec: ClusterSpec, node: str) -> Role | None:
    return spec.roles().get(node)
