"""Every applier a site uses, in turn, on one fresh kube-apiserver v1.34.4 with the real kubectl
v1.34.4: client-side `kubectl apply -k`, the docs' server-side `kubectl apply --server-side -k`
(docs/operations.md, "Upgrade"), and an ArgoCD sync (a server-side apply of the built manifests
with ArgoCD's field manager, `argocd-controller`), each after the others and again.

- No server-side apply meets a conflict, whoever applied before.
- A client-side re-apply says "unchanged" for every object.
- No apply after the first changes what is stored (the generation and every field but the
  bookkeeping: resourceVersion, managedFields, kubectl's last-applied annotation), and a
  server-side apply by the same manager does not even write (the resourceVersion stays).

A value the API does not store as written (`false` where false is the default, a `fieldRef`
without the `apiVersion` the API fills in) is what breaks these: the manifests write what is
stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver.deploy import EXAMPLE, REPO, Kubectl, install_crds, key
from tests.apiserver.kube import control_plane, required_assets

pytestmark = pytest.mark.apiserver

ARGOCD = "argocd-controller"  # the field manager of ArgoCD's application controller
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CSA_AFTER_SSA = "client-side after server-side"
Stored = dict[tuple[str, str, str], dict[str, Any]]


@pytest.fixture
def site(tmp_path: Path, kubectl_binary: Path) -> Iterator[Kubectl]:
    """A server of this test's own: the sequence starts from nothing."""
    assets = required_assets()
    (workdir := tmp_path / "plane").mkdir()
    with control_plane(assets, workdir) as plane:
        yield Kubectl(kubectl_binary, plane.kubeconfig)


def stored(site: Kubectl, path: Path) -> Stored:
    listed = yaml.safe_load(site.run("get", "-k", str(path), "-o", "json").stdout)
    return {key(item): item for item in listed["items"]}


def content(item: dict[str, Any]) -> dict[str, Any]:
    """What an apply may not change: all but the bookkeeping."""
    meta = {
        k: v for k, v in item["metadata"].items() if k not in {"resourceVersion", "managedFields"}
    }
    annotations = {k: v for k, v in meta.pop("annotations", {}).items() if k != LAST_APPLIED}
    return {**item, "metadata": {**meta, "annotations": annotations}}


@dataclass
class Sequence:
    site: Kubectl
    path: Path
    built: Path
    steps: list[str] = field(default_factory=list)
    conflicts: int = 0
    configured: int = 0
    changed: list[str] = field(default_factory=list)

    def apply(self, name: str, *args: str, same_manager_again: bool = False) -> None:
        """One applier's apply; counts conflicts, "configured" lines and changed objects."""
        before = stored(self.site, self.path)
        done = self.site.run("apply", *args, ok=(0, 1))
        out = done.stdout + done.stderr
        conflicts = out.count("Apply failed with")
        configured = [line for line in out.splitlines() if line.endswith(" configured")]
        after = stored(self.site, self.path)
        changed = [f"{k[0]}/{k[2]}" for k in after if content(after[k]) != content(before[k])]
        if same_manager_again:  # nothing to write at all
            changed += [
                f"{k[0]}/{k[2]} (written)"
                for k in after
                if after[k]["metadata"]["resourceVersion"]
                != before[k]["metadata"]["resourceVersion"]
            ]
        assert done.returncode == 0 or conflicts, f"{name}: {out}"
        self.conflicts += conflicts
        if conflicts:  # which object and field: the line to fix
            self.steps.extend(x for x in out.splitlines() if "conflict" in x.lower())
        self.configured += len(configured)
        self.changed += [f"{name}: {c}" for c in changed]
        self.steps.append(
            f"{name}: {conflicts} conflicts, {len(configured)} configured {configured}, "
            f"{len(changed)} changed {changed}"
        )

    def client_side(self, name: str) -> None:
        self.apply(name, "-k", str(self.path))

    def server_side(self, name: str, again: bool = False) -> None:
        self.apply(name, "--server-side", "-k", str(self.path), same_manager_again=again)

    def argocd(self, name: str, again: bool = False) -> None:
        self.apply(
            name,
            "--server-side",
            f"--field-manager={ARGOCD}",
            "-f",
            str(self.built),
            same_manager_again=again,
        )


def first_apply(site: Kubectl, path: Path) -> None:
    """Client-side, as a first install by hand; again until the policies, created in the same
    apply, have reached admission (the agent DaemonSet is refused until they have)."""
    for _ in range(60):
        if site.run("apply", "-k", str(path), ok=(0, 1)).returncode == 0:
            return
    raise AssertionError(f"the first apply of {path} never passes")


@pytest.mark.parametrize("where", [EXAMPLE, REPO / "policies"], ids=["example", "policies"])
def test_every_applier_after_every_other_conflicts_on_nothing_and_changes_nothing(
    site: Kubectl, tmp_path: Path, where: Path
) -> None:
    if where == EXAMPLE:
        install_crds(site)  # the PrometheusRule and the PodMonitor
    built = tmp_path / "built.yaml"  # what ArgoCD's repo server renders (kustomize build)
    built.write_text(site.run("kustomize", str(where)).stdout)
    first_apply(site, where)
    run = Sequence(site, where, built)
    run.client_side("client-side re-apply")
    run.server_side("server-side after client-side")
    run.argocd("ArgoCD sync after server-side")
    run.server_side("server-side (the Upgrade step) after ArgoCD")
    run.server_side("server-side again", again=True)
    run.argocd("ArgoCD sync again")
    run.argocd("ArgoCD sync again, no change", again=True)
    run.client_side(CSA_AFTER_SSA)
    run.client_side("client-side re-apply after that")
    run.server_side("server-side after all of them")
    table = "\n".join(run.steps)
    assert (run.conflicts, run.changed) == (0, []), table
    # kubectl's own bookkeeping: a server-side apply rewrites the last-applied annotation without
    # `"annotations":{}`, the next client-side apply adds it back ("configured", nothing else).
    assert all(" 0 configured" in s for s in run.steps if not s.startswith(CSA_AFTER_SSA)), table
    assert diff(site, where) == ""


def diff(site: Kubectl, path: Path) -> str:
    return site.run("diff", "--server-side", "-k", str(path), ok=(0, 1)).stdout
