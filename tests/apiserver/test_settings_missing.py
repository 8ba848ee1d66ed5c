"""Without the settings ConfigMap the guard's policies refuse nothing that is not the guard's.

The API server resolves a binding's params before its policy's match conditions, so a policy
with a Deny binding that matches every Node refused every Node update in the cluster once
`gpu-node-guard-settings` was gone (deleted by the guard namespace's admin, pruned by GitOps, or
renamed by an overlay): kubelets, the node lifecycle controller's taints, a person's cordon. And
the ledger's policy, matching every ConfigMap of the guard's namespace, refused re-creating the
settings with the documented apply. On a server of this module's own (the settings go away):

- a kubelet, the node lifecycle controller and a cluster admin update Nodes;
- the guard's token is still held to node scope (paramless: no label, no added taint);
- `kubectl apply --server-side -k manifests/base` restores the settings, and with them the
  site's onboarding gate check.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.names import SETTINGS_CONFIGMAP
from tests.apiserver.conftest import aggregate_cluster_roles, wait_for_enforcement
from tests.apiserver.deploy import BASE, REPO, Kubectl
from tests.apiserver.guard_run import make_gpu_node
from tests.apiserver.kube import (
    ACCOUNT_CONTROLLERS,
    GUARD_NS,
    GUARD_USER,
    MERGE_PATCH,
    ControlPlane,
    api_error,
    control_plane,
    required_assets,
)

pytestmark = pytest.mark.apiserver

NODE_CONTROLLER = "system:serviceaccount:kube-system:node-controller"
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
TEAM_TAINT = {"key": "team.example.com/reserved", "value": "ml", "effect": "NoSchedule"}
GATE = {"key": "gpu-node-guard.io/onboarding", "value": "pending", "effect": "NoSchedule"}
RENAMED = "site-guard-settings"
_INFORMER_S = 30.0  # params and policies reach admission by informer: seconds at most


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = required_assets(controller_manager=True)
    workdir = tmp_path_factory.mktemp("settings-missing")
    with control_plane(assets, workdir, True, ACCOUNT_CONTROLLERS) as started:
        yield started


@pytest.fixture(scope="module")
def site(plane: ControlPlane, kubectl_binary: Path) -> Kubectl:
    kubectl = Kubectl(kubectl_binary, plane.kubeconfig)
    with plane.admin_client() as admin:
        aggregate_cluster_roles(admin)
        kubectl.apply(BASE)
        wait_for_enforcement(plane, admin)
    return kubectl


@pytest.fixture
def nodes(plane: ControlPlane, site: Kubectl) -> Iterator[tuple[str, str]]:
    """A CPU node and a GPU node carrying a team's taint and the onboarding gate; afterwards
    the settings as the base has them (and no renamed copy), enforced again."""
    with plane.admin_client() as admin:
        core = client.CoreV1Api(admin)
        core.create_node({"metadata": {"name": "cpu-1"}})
        make_gpu_node(core, "gpu-1")
        core.patch_node("gpu-1", {"spec": {"taints": [TEAM_TAINT, GATE]}})
        yield "cpu-1", "gpu-1"
        site.apply(BASE)
        renamed = f"metadata.name={RENAMED}"
        if core.list_namespaced_config_map(GUARD_NS, field_selector=renamed).items:
            core.delete_namespaced_config_map(RENAMED, GUARD_NS)
        core.patch_node("gpu-1", {"spec": {"taints": [TEAM_TAINT, GATE]}})
        answer = _only_the_team_taint_removed(plane)
        _wait_for("the gate check back", lambda: "gpu-node-guard-onboarding-gate" in answer())
        for name in ("cpu-1", "gpu-1"):
            core.delete_node(name)


def _patch(api: client.ApiClient, node: str, body: dict[str, Any]) -> None:
    client.CoreV1Api(api).patch_node(node, body, _content_type=MERGE_PATCH)


def _dry_patch(api: client.ApiClient, node: str, body: dict[str, Any]) -> None:
    client.CoreV1Api(api).patch_node(node, body, dry_run="All", _content_type=MERGE_PATCH)


def _answer(call: Callable[[], object]) -> str:
    """'' when `call` is admitted; the refusal's message otherwise."""
    try:
        call()
    except ApiException as exc:
        return api_error(exc)[1] or "refused"
    return ""


def _wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + _INFORMER_S
    while not done():
        assert time.monotonic() < deadline, f"not within {_INFORMER_S:.0f} s: {what}"
        time.sleep(0.2)


def _only_the_team_taint_removed(plane: ControlPlane) -> Callable[[], str]:
    """The guard removing a taint that is not the gate (a dry run): what the gate policy refuses
    while the site's settings are there, and nothing refuses once they are gone."""

    def answer() -> str:
        with plane.impersonating(GUARD_USER) as guard:
            return _answer(lambda: _dry_patch(guard, "gpu-1", {"spec": {"taints": [GATE]}}))

    return answer


def _settings_gone(plane: ControlPlane) -> bool:
    """Admission has seen the settings go: the gate policy no longer answers (with the old Deny
    bindings every Node update was refused 'no params found' instead)."""
    answer = _only_the_team_taint_removed(plane)()
    return "gpu-node-guard-onboarding-gate" not in answer


def _remove_settings(plane: ControlPlane, site: Kubectl, how: str, root: Path) -> None:
    with plane.admin_client() as admin:
        core = client.CoreV1Api(admin)
        if how == "renamed":  # an overlay renames it; the old name is pruned
            site.apply(_renaming_overlay(root))
            assert core.read_namespaced_config_map(RENAMED, GUARD_NS).data
        core.delete_namespaced_config_map(SETTINGS_CONFIGMAP, GUARD_NS)
    _wait_for("admission without the settings", lambda: _settings_gone(plane))


def _renaming_overlay(root: Path) -> Path:
    for part in ("manifests", "policies"):
        shutil.copytree(REPO / part, root / part)
    overlay = root / "manifests" / "overlays" / "renamed"
    overlay.mkdir(parents=True)
    rename = [{"op": "replace", "path": "/metadata/name", "value": RENAMED}]
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../../base"],
        "patches": [
            {
                "target": {"kind": "ConfigMap", "name": SETTINGS_CONFIGMAP},
                "patch": yaml.safe_dump(rename),
            }
        ],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return overlay


@pytest.mark.parametrize("how", ["deleted", "renamed"])
def test_without_the_settings_everyone_else_still_updates_nodes(
    plane: ControlPlane, site: Kubectl, nodes: tuple[str, str], how: str, tmp_path: Path
) -> None:
    cpu, gpu = nodes
    _remove_settings(plane, site, how, tmp_path)
    kubelet_note = {"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "0"}}}
    for node in (cpu, gpu):
        with plane.impersonating(f"system:node:{node}", "system:nodes") as kubelet:
            assert _answer(lambda n=node: _patch(kubelet, n, kubelet_note)) == "", node
    with plane.impersonating(NODE_CONTROLLER) as controller:
        taints = {"spec": {"taints": [TEAM_TAINT, GATE, UNREACHABLE]}}
        assert _answer(lambda: _patch(controller, gpu, taints)) == ""
        assert _answer(lambda: _patch(controller, cpu, {"spec": {"taints": [UNREACHABLE]}})) == ""
    with plane.admin_client() as admin:
        for node in (cpu, gpu):
            assert _answer(lambda n=node: _patch(admin, n, {"spec": {"unschedulable": True}})) == ""
            assert client.CoreV1Api(admin).read_node(node).spec.unschedulable
    # The guard's token is still held to node scope, which needs no settings.
    with plane.impersonating(GUARD_USER) as guard:
        label = {"metadata": {"labels": {"team.example.com/owner": "guard"}}}
        refused = _answer(lambda: _dry_patch(guard, gpu, label))
        assert "'gpu-node-guard-node-scope'" in refused and "no node metadata" in refused
        added = {"spec": {"taints": [TEAM_TAINT, GATE, UNREACHABLE, {**TEAM_TAINT, "key": "x"}]}}
        assert "'gpu-node-guard-node-scope'" in _answer(lambda: _dry_patch(guard, gpu, added))


def test_the_documented_apply_restores_the_settings_and_the_gate_check(
    plane: ControlPlane, site: Kubectl, nodes: tuple[str, str], tmp_path: Path
) -> None:
    _remove_settings(plane, site, "deleted", tmp_path)
    site.apply(BASE)  # docs/deploy.md: exit 0 (the ledger's policy refused this before)
    with plane.admin_client() as admin:
        settings = client.CoreV1Api(admin).read_namespaced_config_map(SETTINGS_CONFIGMAP, GUARD_NS)
        assert settings.data
    answer = _only_the_team_taint_removed(plane)
    _wait_for("the gate check back", lambda: "gpu-node-guard-onboarding-gate" in answer())
    assert "removes no taint but the onboarding gate" in answer()
    with plane.impersonating(GUARD_USER) as guard:  # the gate itself, alone: admitted
        assert _answer(lambda: _dry_patch(guard, "gpu-1", {"spec": {"taints": [TEAM_TAINT]}})) == ""
