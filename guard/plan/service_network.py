"""The node's service network before its return: its kube-proxy and CNI pods Ready, from
kube-state-metrics (the guard reads no pods from the API). docs/node-signals.md, "Service
network before return".
"""

from __future__ import annotations

from guard.actions import Action, Skip
from guard.codec.queries import service_network_selectors
from guard.model import NodeInfo, Snapshot
from guard.settings import Settings
from guard.states import Decision


def gate(snap: Snapshot, s: Settings, node: NodeInfo) -> tuple[Action, ...]:
    seen = dict(snap.prom.service_seen)
    problems: list[str] = []
    fixes: list[str] = []
    for selector, _ in service_network_selectors(s):
        if selector not in seen:
            continue  # no such pod in the cluster: `not_applicable` says so once
        count = seen[selector]
        pods = [p for p in snap.prom.service_pods if p.node == node.name and p.selector == selector]
        if not pods:
            problems.append(f"no {selector} pod on the node ({count} in the cluster)")
            fixes.append(f"kubectl get pods -A -o wide --field-selector spec.nodeName={node.name}")
        for p in (p for p in pods if not p.ready):
            problems.append(f"{selector} pod {p.namespace}/{p.name} not Ready")
            fixes.append(f"kubectl -n {p.namespace} describe pod {p.name}")
    if not problems:
        return ()
    fix = f"{fixes[0]}; the load test waits until the node's service network is Ready"
    return (Skip(node.name, Decision.SERVICE_NETWORK_NOT_READY, "; ".join(problems), fix),)


def not_applicable(snap: Snapshot, s: Settings) -> tuple[Action, ...]:
    """One line for the cycle: the selectors that match no pod in the cluster at all."""
    seen = dict(snap.prom.service_seen)
    missing = [(name, m) for name, m in service_network_selectors(s) if name not in seen]
    if not missing:
        return ()
    what = "; ".join(f"{name} {{{m}}}" for name, m in missing)
    detail = (
        f"no pod in the cluster matches {what} (kube_pod_info): the return check goes on without it"
    )
    fix = (
        "nothing if the cluster runs none (Cilium without kube-proxy); otherwise set the "
        "--service-network-* selectors"
    )

    return (Skip("", Decision.SERVICE_NETWORK_NOT_APPLICABLE, detail, fix),)
