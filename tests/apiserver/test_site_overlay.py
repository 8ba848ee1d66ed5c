"""A site that changes every setting it may (tests/overlays/every-setting), deployed on a real
kube-apiserver of this module's own with the real kubectl: the guard, run with that overlay's
CronJob environment, renders evidence, load-test, conformance and fence Jobs its policies admit (the
site's values reach admission through the params, no Python run); the same Jobs with any one
of the site's settings that reach a Job at its default are refused, each by the rule naming that
setting. The Jobs' deadlines, TTLs and load-test parameters are fixed values, not the site's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.generate.config import Rendered, check
from guard.generate.policies.params import default_text
from guard.names import SETTINGS_CONFIGMAP
from guard.settings import Settings
from tests.apiserver.deploy import REPO, Kubectl
from tests.apiserver.kube import GUARD_NS, GUARD_USER, ControlPlane, control_plane, required_assets
from tests.apiserver.test_deploy import guard_env, install_crds, refused_by_its_policy, render

pytestmark = pytest.mark.apiserver

EVERY = REPO / "tests" / "overlays" / "every-setting"
# (kind, the setting put back to its default, the words of the rule that refuses it)
ONE_AT_DEFAULT = [
    ("evidence", "onboarding_taint", "tolerations must be the cordon's"),
    ("loadtest", "loadtest_allreduce", "--allreduce or --no-allreduce must be the site's"),
    ("loadtest", "memory_class_xids", "--memory-class-xids must be the site's"),
    ("conformance", "conformance_control_plane_version", "--control-plane-version must be given"),
]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = required_assets()
    with control_plane(assets, tmp_path_factory.mktemp("site")) as started:
        yield started


@pytest.fixture(scope="module")
def site(plane: ControlPlane, kubectl_binary: Path) -> dict[str, str]:
    """The overlay applied as docs/deploy.md says; the CronJob's environment it renders."""
    kubectl = Kubectl(kubectl_binary, plane.kubeconfig)
    install_crds(kubectl)
    kubectl.upgrade(EVERY)
    docs = kubectl.build(EVERY)
    s, problems = check(Rendered.of(docs))
    assert problems == [] and s is not None  # what `make config-check` proves
    return guard_env(docs)


def _admitted_or_refusal(plane: ControlPlane, job: dict[str, Any], refused: bool) -> str:
    """The refusal text ('' when admitted), once the policies have reached admission."""
    with plane.impersonating(GUARD_USER) as guard:
        deadline = time.monotonic() + 60
        while True:
            said = refused_by_its_policy(guard, job)
            settled = "ValidatingAdmissionPolicy" in said if refused else not said
            if settled:
                return said
            assert time.monotonic() < deadline, f"admission never settled: {said}"
            time.sleep(0.2)  # a new policy reaches admission by informer


@pytest.mark.parametrize("kind", ["evidence", "loadtest", "conformance", "fence"])
def test_the_guards_jobs_with_the_sites_settings_are_admitted(
    plane: ControlPlane, site: dict[str, str], kind: str
) -> None:
    job = render(kind, site)
    # The Jobs' deadlines are the guard's fixed values (docs/deploy.md, "Settings by lifetime").
    fixed = Settings()
    deadline = fixed.loadtest_deadline_s if kind == "loadtest" else fixed.evidence_deadline_s
    assert job["spec"]["activeDeadlineSeconds"] == deadline
    assert _admitted_or_refusal(plane, job, refused=False) == ""


@pytest.mark.parametrize(
    ("kind", "setting", "rule"), ONE_AT_DEFAULT, ids=[f"{k}-{s}" for k, s, _ in ONE_AT_DEFAULT]
)
def test_a_job_with_one_default_value_is_refused_by_its_rule(
    plane: ControlPlane, site: dict[str, str], kind: str, setting: str, rule: str
) -> None:
    key = "GUARD_" + setting.upper()
    assert site[key] != default_text(Settings(), setting)
    job = render(kind, {**site, key: default_text(Settings(), setting)})
    said = _admitted_or_refusal(plane, job, refused=True)
    assert rule in said, said


def test_the_jobs_with_every_default_are_refused(plane: ControlPlane, site: dict[str, str]) -> None:
    """The upstream defaults (the images kept: the values alone are refused)."""
    images = {k: site[k] for k in ("GUARD_IMAGE", "GUARD_LOADTEST_IMAGE")}
    for kind in ("evidence", "loadtest", "conformance"):
        said = _admitted_or_refusal(plane, render(kind, images), refused=True)
        assert "the site's" in said, said  # the first rule the apiserver names


def test_a_changed_setting_reaches_admission_with_no_regeneration(
    plane: ControlPlane, site: dict[str, str]
) -> None:
    """The site sets GUARD_CONFORMANCE_ALLOWED_DNS in its ConfigMap (as a re-applied overlay
    would): the conformance Job with that list is admitted, one without it or with another list
    refused. The policies' text never changed."""
    core = client.CoreV1Api(plane.admin_client())
    dns = "10.43.0.0/16,192.168.0.0/16"
    core.patch_namespaced_config_map(
        SETTINGS_CONFIGMAP, GUARD_NS, {"data": {"GUARD_CONFORMANCE_ALLOWED_DNS": dns}}
    )
    try:
        with_dns = {**site, "GUARD_CONFORMANCE_ALLOWED_DNS": dns}
        assert _admitted_or_refusal(plane, render("conformance", with_dns), refused=False) == ""
        for other in (site, {**site, "GUARD_CONFORMANCE_ALLOWED_DNS": "10.43.0.0/16"}):
            said = _admitted_or_refusal(plane, render("conformance", other), refused=True)
            assert "--allowed-dns must be given exactly when the site sets" in said, said
    finally:
        unset = {"data": {"GUARD_CONFORMANCE_ALLOWED_DNS": None}}
        core.patch_namespaced_config_map(SETTINGS_CONFIGMAP, GUARD_NS, unset)
