"""The kustomize layout as a site and ArgoCD use it: real kubectl v1.34.4 builds, the real
kustomize CLI for `kustomize edit set image`, and server-side applies on a kube-apiserver of
this module's own (the session's server keeps the base's images and settings for the others).

- One image reference per image: a mirror set with `images:` reaches the CronJob, GUARD_IMAGE,
  GUARD_LOADTEST_IMAGE, the agent and the settings ConfigMap the policies read as their params,
  and nothing else changes; policies/ itself names no image.
- manifests/base and manifests/overlays/example (with both components, on the real
  prometheus-operator CRDs) apply cleanly, and a second apply changes nothing.
- The guard, run with the overlay's ConfigMap and env, renders Jobs its policies admit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.names import SETTINGS_CONFIGMAP
from guard.settings import SITE_SETTINGS, Settings, site_options
from tests.apiserver.deploy import (
    BASE,
    EXAMPLE,
    REPO,
    Kubectl,
    install_crds,
    key,
    kustomize_or_skip,
    stored_versions,
)
from tests.apiserver.kube import (
    GUARD_USER,
    JOBS_NS,
    ControlPlane,
    control_plane,
    create,
    required_assets,
)

pytestmark = pytest.mark.apiserver

GUARD = "ghcr.io/gpu-node-guard/gpu-node-guard"
LOADTEST = "ghcr.io/gpu-node-guard/gpu-node-guard-loadtest"
MIRROR = "mirror.test:5000/platform/gpu-node-guard:0.1.0-site.2"
MIRROR_LOADTEST = "mirror.test:5000/platform/gpu-node-guard-loadtest@sha256:" + "ab" * 32
CONTAINER = ("spec", "jobTemplate", "spec", "template", "spec", "containers", 0)
GUARD_POLICIES = (
    "evidence-job",
    "evidence-pod",
    "conformance-job",
    "conformance-pod",
    "agent-daemonset",
    "agent-pod",
)
LOADTEST_POLICIES = ("loadtest-job", "loadtest-pod")


@pytest.fixture(scope="module")
def kubectl(kubectl_binary: Path) -> Kubectl:
    return Kubectl(kubectl_binary)


def image_places(docs: list[dict[str, Any]]) -> dict[str, str]:
    """Every place an image reference must be, and what it holds."""
    by_key = {key(d): d for d in docs}
    cron = by_key[("CronJob", "gpu-node-guard", "gpu-node-guard")]
    container = _at(cron, CONTAINER)
    env = {e["name"]: e.get("value") for e in container["env"]}
    agent = by_key[("DaemonSet", JOBS_NS, "gpu-node-guard-agent")]
    places = {
        "CronJob container": container["image"],
        "GUARD_IMAGE": env["GUARD_IMAGE"],
        "GUARD_LOADTEST_IMAGE": env["GUARD_LOADTEST_IMAGE"],
        "agent container": agent["spec"]["template"]["spec"]["containers"][0]["image"],
    }
    settings = by_key[("ConfigMap", "gpu-node-guard", SETTINGS_CONFIGMAP)]["data"]
    places["settings GUARD_IMAGE"] = settings["GUARD_IMAGE"]
    places["settings GUARD_LOADTEST_IMAGE"] = settings["GUARD_LOADTEST_IMAGE"]
    for name in (*GUARD_POLICIES, *LOADTEST_POLICIES):  # they read it from the ConfigMap
        policy = by_key[("ValidatingAdmissionPolicy", "", f"gpu-node-guard-{name}")]
        (image,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "image"]
        wanted = "GUARD_LOADTEST_IMAGE" if name in LOADTEST_POLICIES else "GUARD_IMAGE"
        assert image.startswith(f"params.?data[?'{wanted}']"), (name, image)
    return places


def expected_places(guard: str, loadtest: str) -> dict[str, str]:
    return {
        "CronJob container": guard,
        "GUARD_IMAGE": guard,
        "GUARD_LOADTEST_IMAGE": loadtest,
        "agent container": guard,
        "settings GUARD_IMAGE": guard,
        "settings GUARD_LOADTEST_IMAGE": loadtest,
    }


def _at(doc: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def leaves(doc: Any, path: str = "") -> dict[str, Any]:
    """Every scalar of a document by its path (lists by index)."""
    if isinstance(doc, dict):
        return {
            k: v for name, item in doc.items() for k, v in leaves(item, f"{path}.{name}").items()
        }
    if isinstance(doc, list):
        return {k: v for i, item in enumerate(doc) for k, v in leaves(item, f"{path}[{i}]").items()}
    return {path: doc}


def differences(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> set[str]:
    old, new = {key(d): leaves(d) for d in before}, {key(d): leaves(d) for d in after}
    assert set(old) == set(new), set(old) ^ set(new)
    return {
        f"{k[0]}/{k[2]}{path}"
        for k in old
        for path in set(old[k]) | set(new[k])
        if old[k].get(path) != new[k].get(path)
    }


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The layout copied (manifests/ and policies/, which manifests/base includes)."""
    for part in ("manifests", "policies"):
        shutil.copytree(REPO / part, tmp_path / part)
    return tmp_path


def write_overlay(root: Path, name: str, body: dict[str, Any]) -> Path:
    overlay = root / "manifests" / "overlays" / name
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return overlay


# ── Builds (kubectl kustomize, kustomize edit set image) ─────────────────────────────────────


def test_the_base_builds_and_carries_every_image_once(kubectl: Kubectl) -> None:
    docs = kubectl.build(BASE)
    assert image_places(docs) == expected_places(Settings().image, Settings().loadtest_image)
    kinds = sorted({d["kind"] for d in docs})
    assert "PodTemplate" not in kinds  # images.yaml is local configuration
    assert not {"PrometheusRule", "PodMonitor"} & set(kinds)  # components: need the CRDs
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    # 5 kinds x (workload, Pod), the jobs namespace, guard scope, the ledger and its archive
    # size, hold, node scope and the onboarding gate, device taints, the guard's claims and
    # everyone else's
    assert len(policies) == 20
    (settings,) = [d for d in docs if d["kind"] == "ConfigMap"]
    container = _at(next(d for d in docs if d["kind"] == "CronJob"), CONTAINER)
    assert container["envFrom"] == [{"configMapRef": {"name": settings["metadata"]["name"]}}]
    assert settings["metadata"]["name"] == SETTINGS_CONFIGMAP  # the policies' paramRef names it
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    refs = {d["spec"]["paramRef"]["name"] for d in bindings if "paramRef" in d["spec"]}
    assert refs == {SETTINGS_CONFIGMAP}


def test_a_mirror_for_both_images_changes_every_place_and_nothing_else(
    kubectl: Kubectl, checkout: Path
) -> None:
    name, tag = MIRROR.rsplit(":", 1)
    lt_name, digest = MIRROR_LOADTEST.split("@")
    overlay = write_overlay(
        checkout,
        "mirror",
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["../../base"],
            "images": [
                {"name": GUARD, "newName": name, "newTag": tag},
                {"name": LOADTEST, "newName": lt_name, "digest": digest},
            ],
            "transformers": ["../../base/image-wiring"],
        },
    )
    base, mirrored = kubectl.build(checkout / "manifests" / "base"), kubectl.build(overlay)
    assert image_places(mirrored) == expected_places(MIRROR, MIRROR_LOADTEST)
    container = "CronJob/gpu-node-guard.spec.jobTemplate.spec.template.spec.containers[0]"
    expected = {
        f"{container}.image",
        f"{container}.env[2].value",
        f"{container}.env[3].value",
        "DaemonSet/gpu-node-guard-agent.spec.template.spec.containers[0].image",
        f"ConfigMap/{SETTINGS_CONFIGMAP}.data.GUARD_IMAGE",
        f"ConfigMap/{SETTINGS_CONFIGMAP}.data.GUARD_LOADTEST_IMAGE",
    }
    assert differences(base, mirrored) == expected


@pytest.mark.parametrize("where", ["manifests/base", "manifests/overlays/example"])
def test_kustomize_edit_set_image_alone_changes_every_place(checkout: Path, where: str) -> None:
    """What a person, or ArgoCD's `kustomize.images`, does: `kustomize edit set image` in the
    directory that is built, then `kustomize build`. Nothing else is edited."""
    kustomize = kustomize_or_skip()
    directory = checkout / where
    for old, new in ((GUARD, MIRROR), (LOADTEST, MIRROR_LOADTEST)):
        edit = [str(kustomize), "edit", "set", "image", f"{old}={new}"]
        done = subprocess.run(edit, cwd=directory, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    built = subprocess.run(
        [str(kustomize), "build", str(directory)], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert image_places(docs) == expected_places(MIRROR, MIRROR_LOADTEST)


def test_the_example_overlay_shows_a_site(kubectl: Kubectl) -> None:
    docs = {key(d): d for d in kubectl.build(EXAMPLE)}
    assert set(image_places(list(docs.values())).values()) == {
        "registry.example.internal/mirror/gpu-node-guard:0.1.0",
        "registry.example.internal/mirror/gpu-node-guard-loadtest:0.1.0",
    }
    for kind, namespace in (("PrometheusRule", "gpu-node-guard"), ("PodMonitor", JOBS_NS)):
        found = [d for k, d in docs.items() if k[0] == kind and k[1] == namespace]
        assert [d["metadata"]["labels"]["release"] for d in found] == ["kube-prometheus-stack"]
    pod = _at(docs[("CronJob", "gpu-node-guard", "gpu-node-guard")], CONTAINER[:-2])
    assert pod["priorityClassName"] in {k[2] for k in docs if k[0] == "PriorityClass"}
    assert {t["key"] for t in pod["tolerations"]} == {
        "node-role.kubernetes.io/control-plane",
        "dedicated",
    }
    (secret,) = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] != "tmp")
    settings = site_settings(list(docs.values()))
    assert secret == "gpu-node-guard-prometheus" and mount["readOnly"] is True
    for value in (
        settings["GUARD_PROMETHEUS_TLS"].removeprefix("ca="),
        settings["GUARD_PROMETHEUS_BEARER_TOKEN_FILE"],
    ):
        assert value.startswith(mount["mountPath"] + "/"), value
    assert settings["GUARD_PROMETHEUS_URL"].endswith("/prometheus")  # a path prefix
    assert settings["GUARD_BREAKER_MAX_NODES"] == "3"  # the site's value wins the merge


def runbook_urls(docs: list[dict[str, Any]]) -> list[str]:
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return [
        r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    ]


def test_the_sites_runbook_base_reaches_every_alert_from_settings_env(
    kubectl: Kubectl, checkout: Path
) -> None:
    """GUARD_RUNBOOK_BASE_URL in the overlay's settings.env, nothing else: every rule's
    runbook_url moves to the site's copy and keeps its anchor (the example keeps the default)."""
    shipped = runbook_urls(kubectl.build(EXAMPLE))
    assert {u.partition("#")[0] for u in shipped} == {Settings().runbook_base_url}
    site = "https://git.example.internal/ops/gpu-node-guard/-/blob/main/docs/runbook.md"
    example = checkout / "manifests" / "overlays" / "example"
    with (example / "settings.env").open("a") as env:
        env.write(f"GUARD_RUNBOOK_BASE_URL={site}\n")
    moved = runbook_urls(kubectl.build(example))
    assert moved == [f"{site}#{u.partition('#')[2]}" for u in shipped]
    assert site_settings(kubectl.build(example))["GUARD_RUNBOOK_BASE_URL"] == site


def site_settings(docs: list[dict[str, Any]]) -> dict[str, str]:
    (settings,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == SETTINGS_CONFIGMAP
    ]
    return dict(settings["data"])


@pytest.mark.parametrize("where", [BASE, EXAMPLE], ids=["base", "example"])
def test_every_key_of_the_settings_configmap_is_a_setting_of_the_guard(
    kubectl: Kubectl, where: Path
) -> None:
    """The guard reads GUARD_<NAME> and ignores any other variable: a typo in settings.env would
    be dropped without a word. The names the policies carry are not the site's to set there."""
    # not the CronJob's, nor fixed; a compound setting by its own name (GUARD_PROMETHEUS_TLS)
    names = {"GUARD_" + name.upper() for name in site_options(SITE_SETTINGS)}
    # The images reach the ConfigMap from `images:` (image-wiring), never from settings.env.
    keys = set(site_settings(kubectl.build(where))) - {"GUARD_IMAGE", "GUARD_LOADTEST_IMAGE"}
    assert keys <= names, keys - names


def test_the_argocd_application_deploys_the_example_overlay(kubectl: Kubectl) -> None:
    app = yaml.safe_load((REPO / "manifests" / "argocd" / "application.yaml").read_text())
    (source,) = app["spec"]["sources"] if "sources" in app["spec"] else [app["spec"]["source"]]
    assert (REPO / source["path"]) == EXAMPLE
    docs = {key(d) for d in kubectl.build(REPO / source["path"])}
    for ignored in app["spec"]["ignoreDifferences"]:
        if ignored["kind"] != "ConfigMap":  # the ledger: runtime state, never in git
            assert (ignored["kind"], ignored["namespace"], ignored["name"]) in docs, ignored
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]


# ── Server-side apply on a server of this module's own ───────────────────────────────────────


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = required_assets()
    with control_plane(assets, tmp_path_factory.mktemp("deploy")) as started:
        yield started


@pytest.fixture(scope="module")
def site(plane: ControlPlane, kubectl_binary: Path) -> Kubectl:
    return Kubectl(kubectl_binary, plane.kubeconfig)


def assert_reapply_changes_nothing(site: Kubectl, path: Path) -> int:
    before = stored_versions(site, path)
    site.apply(path)
    assert stored_versions(site, path) == before
    assert site.diff(path) == ""
    return len(before)


def test_the_base_applies_and_a_second_apply_changes_nothing(site: Kubectl) -> None:
    out = site.upgrade(BASE)  # a fresh server: the same as one apply, policies first
    assert "error" not in out.lower(), out
    assert assert_reapply_changes_nothing(site, BASE) == len(site.build(BASE))


@pytest.fixture(scope="module")
def example_applied(site: Kubectl) -> Kubectl:
    """The overlay, as docs/deploy.md upgrades to it (policies first): over the base when the
    base test ran first (new images, new settings), else fresh."""
    install_crds(site)
    site.upgrade(EXAMPLE)
    return site


def test_the_example_overlay_with_its_components_applies_and_reapplies_unchanged(
    example_applied: Kubectl,
) -> None:
    """After the upgrade, with the PrometheusRule and the PodMonitor validated by the CRDs
    kube-prometheus-stack installs."""
    count = assert_reapply_changes_nothing(example_applied, EXAMPLE)
    assert count == len(example_applied.build(EXAMPLE))
    rules = example_applied.run("get", "prometheusrule", "-n", "gpu-node-guard", "-o", "name")
    assert rules.stdout.strip() == "prometheusrule.monitoring.coreos.com/gpu-node-guard"


def guard_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The CronJob container's environment as the kubelet builds it: the ConfigMap (envFrom),
    then its env entries, which win."""
    env = site_settings(docs)
    container = _at(next(d for d in docs if d["kind"] == "CronJob"), CONTAINER)
    for entry in container["env"]:
        env[entry["name"]] = entry.get("value", "gpu-node-guard")  # fieldRef: its namespace
    return env


def render(kind: str, env: dict[str, str]) -> dict[str, Any]:
    """`gpu-node-guard render <kind>`, run with the CronJob's environment."""
    base_env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run(
        [sys.executable, "-m", "guard", "render", kind, "--node", "gpu-site-a"],
        capture_output=True,
        text=True,
        check=False,
        env={**base_env, **env},
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    job: dict[str, Any] = yaml.safe_load(done.stdout)
    return job


def refused_by_its_policy(api: client.ApiClient, job: dict[str, Any]) -> str:
    try:
        create(api, job, dry_run=True)
    except ApiException as exc:
        return str(exc.body)
    return ""


@pytest.mark.parametrize("kind", ["evidence", "loadtest", "conformance", "fence"])
def test_the_guard_run_with_the_overlays_settings_makes_jobs_its_policies_admit(
    example_applied: Kubectl, plane: ControlPlane, kind: str
) -> None:
    """ConfigMap and env → the guard's Settings → a Job → the overlay's policies, end to end;
    the same Job with the upstream image is refused (every Job, had the images differed)."""
    env = guard_env(example_applied.build(EXAMPLE))
    job = render(kind, env)
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("registry.example.internal/mirror/")
    upstream = render(
        kind,
        {**env, "GUARD_IMAGE": Settings().image, "GUARD_LOADTEST_IMAGE": Settings().loadtest_image},
    )
    policy = f"ValidatingAdmissionPolicy 'gpu-node-guard-{kind}-job'"
    with plane.impersonating(GUARD_USER) as guard:
        deadline = time.monotonic() + 60
        while policy not in (refused := refused_by_its_policy(guard, upstream)):
            assert time.monotonic() < deadline, f"the overlay's policies do not refuse: {refused}"
            time.sleep(0.2)  # a new policy reaches admission by informer
        assert "containers[0].image must be the image in this policy's `image`" in refused
        assert refused_by_its_policy(guard, job) == ""


def test_uninstall_removes_the_policies_last(site: Kubectl) -> None:
    """docs/operations.md, "Uninstall", step 4 (last in this module: it takes the deploy away).
    `--wait=false`: without a namespace controller the namespaces stay Terminating here."""
    site.upgrade(BASE)  # back from the example's images: the policies first
    site.run(
        "delete",
        "-k",
        str(BASE),
        "-l",
        "app.kubernetes.io/component!=admission-policy",
        "--ignore-not-found",
        "--wait=false",
    )
    left = site.run("get", "-k", str(BASE), "-o", "name", "--ignore-not-found", ok=(0, 1))
    kinds = {line.split("/")[0] for line in left.stdout.split()}
    assert kinds <= {
        "namespace",
        "validatingadmissionpolicy.admissionregistration.k8s.io",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io",
    }, kinds
    site.run(
        "delete",
        "-k",
        str(BASE),
        "-l",
        "app.kubernetes.io/component=admission-policy",
        "--wait=false",
    )
    policies = site.run("get", "validatingadmissionpolicies", "-o", "name").stdout
    assert "gpu-node-guard" not in policies
