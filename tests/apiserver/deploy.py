"""Deploying the manifests as a site does: the real kubectl v1.34.4 (kustomize built in) and, where
ArgoCD's own step is the point, the real kustomize CLI (`kustomize edit set image`).

kubectl comes from ``hack/envtest/build.sh --kubectl`` (tests/apiserver/kubectl.py); kustomize and
the prometheus-operator CRDs from ``hack/deploytest/build.sh``. Missing: the tier is skipped with
one line, or fails under CI=true (tests/tiers.py).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.apiserver.kubectl import HOW_TO_BUILD, find_kubectl
from tests.tiers import unavailable

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "manifests" / "base"
EXAMPLE = REPO / "manifests" / "overlays" / "example"
DEPLOYTEST = REPO / "hack" / "deploytest" / "build.sh"
HOW_TO_BUILD_TOOLS = "run `make deploytest` (hack/deploytest/build.sh)"
POLICIES = "app.kubernetes.io/component=admission-policy"  # guard/generate/policies/common.py


def kubectl_or_skip() -> Path:
    found = find_kubectl(os.environ)
    if found is None:
        unavailable("apiserver", "kubectl v1.34.4 not built", HOW_TO_BUILD)
        raise AssertionError("unreachable: unavailable() skips or fails")
    return found


def _deploytest(flag: str, what: str) -> Path:
    done = subprocess.run([str(DEPLOYTEST), flag], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        unavailable("apiserver", f"{what} not there", HOW_TO_BUILD_TOOLS)
    return Path(done.stdout.strip())


def kustomize_or_skip() -> Path:
    return _deploytest("--print-kustomize", "kustomize")


def crds_or_skip() -> Path:
    return _deploytest("--print-crds", "the prometheus-operator CRDs")


@dataclass(frozen=True, slots=True)
class Kubectl:
    """The real kubectl, against one API server (or none, for `kustomize`)."""

    binary: Path
    kubeconfig: Path | None = None

    def run(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), *args]
        if self.kubeconfig is not None:
            argv[1:1] = ["--kubeconfig", str(self.kubeconfig)]
        home = str((self.kubeconfig or self.binary).parent)
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={"PATH": os.environ.get("PATH", ""), "HOME": home},
        )
        assert done.returncode in ok, f"kubectl {' '.join(args)}: {done.stderr or done.stdout}"
        return done

    def build(self, path: Path) -> list[dict[str, Any]]:
        """`kubectl kustomize path`: the documents, in kustomize's order."""
        text = self.run("kustomize", str(path)).stdout
        return [doc for doc in yaml.safe_load_all(text) if doc]

    def apply(self, path: Path) -> str:
        """`kubectl apply --server-side -k path`, as a site or ArgoCD (ServerSideApply) does."""
        return self.run("apply", "--server-side", "-k", str(path)).stdout

    def upgrade(self, path: Path, timeout_s: float = 60.0) -> str:
        """docs/operations.md, "Upgrade": the policies first (a new image is refused until the
        policy naming it has reached admission), then all of it, again until it passes."""
        self.run("apply", "--server-side", "-k", str(path), "-l", POLICIES)
        deadline = time.monotonic() + timeout_s
        while (done := self.run("apply", "--server-side", "-k", str(path), ok=(0, 1))).returncode:
            assert time.monotonic() < deadline, (
                f"the new policies do not take effect: {done.stderr}"
            )
            time.sleep(1)  # a policy reaches admission by informer, within a second or so
        return done.stdout

    def diff(self, path: Path) -> str:
        """`kubectl diff --server-side -k path`: what an apply would change ('' when nothing)."""
        return self.run("diff", "--server-side", "-k", str(path), ok=(0, 1)).stdout


def key(doc: dict[str, Any]) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def stored_versions(kubectl: Kubectl, path: Path) -> dict[tuple[str, str, str], str]:
    """resourceVersion of every object of the kustomization at `path`, as stored now."""
    listed = yaml.safe_load(kubectl.run("get", "-k", str(path), "-o", "json").stdout)
    return {key(item): item["metadata"]["resourceVersion"] for item in listed["items"]}


def install_crds(site: Kubectl) -> None:
    """The prometheus-operator CRDs kube-prometheus-stack installs (PrometheusRule, PodMonitor)."""
    for crd in sorted(crds_or_skip().glob("*.yaml")):
        site.run("apply", "--server-side", "-f", str(crd))
    site.run(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/prometheusrules.monitoring.coreos.com",
        "crd/podmonitors.monitoring.coreos.com",
    )
