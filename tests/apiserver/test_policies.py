"""The generated policies on a real kube-apiserver: the guard's ConfigMap scope, the ledger's
text-only rule, and the images written in the policies agreeing with the CronJob and Settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.names import SETTINGS_CONFIGMAP
from guard.settings import Settings
from tests.apiserver import tally
from tests.apiserver.conftest import Identities
from tests.apiserver.deploy import BASE, Kubectl
from tests.apiserver.kube import GUARD_NS, api_error, kustomize_documents, refusal

pytestmark = pytest.mark.apiserver

REPO = Path(__file__).resolve().parents[2]
LEDGER = "gpu-fault-ledger"
SCOPE = "ValidatingAdmissionPolicy 'gpu-node-guard-guard-scope'"
LEDGER_POLICY = "ValidatingAdmissionPolicy 'gpu-node-guard-ledger'"
LINE = "2026-03-02T04:10:00Z xid-79 0000:99:00.0 GPU-5f1c gpu-node-guard\n"
APP = {"app.kubernetes.io/name": "gpu-node-guard"}
ARCHIVE = {**APP, "app.kubernetes.io/component": "ledger-archive"}  # what ledger_store writes


def labels_of(name: str) -> dict[str, str]:
    """The labels the guard gives the ledger (`name` == LEDGER) or an archive."""
    return APP if name == LEDGER else ARCHIVE


@pytest.fixture
def no_ledger(admin: client.ApiClient) -> Iterator[None]:
    """The ledger and archives are shared state of the session's guard namespace."""
    yield
    core = client.CoreV1Api(admin)
    for cm in core.list_namespaced_config_map(GUARD_NS).items:
        if cm.metadata.name.startswith(LEDGER):
            core.delete_namespaced_config_map(cm.metadata.name, GUARD_NS)


@pytest.mark.parametrize(
    "name", ["gpu-node-guard-policy-params", "anything", f"{LEDGER}-archive-x", f"{LEDGER}-2"]
)
def test_guard_writes_no_configmap_but_its_ledger_and_archives(
    guard: client.ApiClient, name: str
) -> None:
    body = {"metadata": {"name": name}, "data": {"gpu-a": LINE}}
    status, message = refusal(
        lambda: client.CoreV1Api(guard).create_namespaced_config_map(GUARD_NS, body)
    )
    assert (status, SCOPE in message) == (422, True), message
    assert (
        "refused: the guard writes only its ledger ConfigMap gpu-fault-ledger and its archives "
        "gpu-fault-ledger-archive-<n>, in namespace gpu-node-guard"
    ) in message


@pytest.mark.parametrize("name", [LEDGER, f"{LEDGER}-archive-1", f"{LEDGER}-archive-12"])
def test_guard_keeps_its_ledger_and_archives(
    guard: client.ApiClient, admin: client.ApiClient, name: str, no_ledger: None
) -> None:
    core = client.CoreV1Api(guard)
    meta = {"name": name, "labels": labels_of(name)}
    core.create_namespaced_config_map(GUARD_NS, {"metadata": meta, "data": {}})
    stored = core.read_namespaced_config_map(name, GUARD_NS)
    stored.data = {"gpu-a.rack-1": LINE}
    core.replace_namespaced_config_map(name, GUARD_NS, stored)
    found = client.CoreV1Api(admin).read_namespaced_config_map(name, GUARD_NS)
    assert found.data == {"gpu-a.rack-1": LINE}


@pytest.mark.parametrize("who", ["guard", "admin"])
@pytest.mark.parametrize(
    ("body", "says"),
    [
        pytest.param(
            {"binaryData": {"gpu-node-guard": "f0VMRgIBAQ=="}},
            "the ledger holds text only: no binaryData",
            id="binary-data",
        ),
        pytest.param(
            {"data": {"__init__.py": "import os\n"}},
            "every ledger key is a node name; not: __init__.py",
            id="python-file",
        ),
        pytest.param(
            {"data": {"Gpu_A": LINE}},
            "every ledger key is a node name; not: Gpu_A",
            id="not-dns-1123",
        ),
        pytest.param(
            {"data": {"gpu-a": LINE}, "immutable": True},
            "the ledger must stay writable",
            id="immutable",
        ),
    ],
)
@pytest.mark.parametrize("name", [LEDGER, f"{LEDGER}-archive-3"])
def test_the_ledger_holds_only_text_keyed_by_node(
    request: pytest.FixtureRequest,
    who: str,
    body: dict[str, object],
    says: str,
    name: str,
    no_ledger: None,
) -> None:
    api: client.ApiClient = request.getfixturevalue(who)
    doc = {"metadata": {"name": name, "labels": labels_of(name)}, **body}
    status, message = refusal(
        lambda: client.CoreV1Api(api).create_namespaced_config_map(GUARD_NS, doc)
    )
    assert (status, LEDGER_POLICY in message) == (422, True), message
    assert f"ConfigMap {GUARD_NS}/{name}: refused: {says}" in message


NAMED = "refused: the guard writes only its ledger ConfigMap"
LABELLED = (
    "refused: the guard's archives are named gpu-fault-ledger-archive-<n> and labelled "
    "app.kubernetes.io/name=gpu-node-guard and app.kubernetes.io/component=ledger-archive; "
    "no other ConfigMap carries that component label"
)
OTHER = {**APP, "app.kubernetes.io/component": "ledger"}


@pytest.mark.parametrize(
    ("name", "labels", "says"),
    [
        pytest.param(f"{LEDGER}-archive-1", {}, LABELLED, id="archive-without-labels"),
        pytest.param(f"{LEDGER}-archive-2", APP, LABELLED, id="archive-without-the-component"),
        pytest.param(
            f"{LEDGER}-archive-3",
            {"app.kubernetes.io/component": "ledger-archive"},
            LABELLED,
            id="archive-without-the-app-label",
        ),
        pytest.param(f"{LEDGER}-archive-4", OTHER, LABELLED, id="archive-of-another-component"),
        pytest.param(LEDGER, ARCHIVE, LABELLED, id="the-ledger-labelled-as-an-archive"),
        pytest.param(f"{LEDGER}-archive-0", ARCHIVE, NAMED, id="labelled-under-an-archive-n-0"),
        pytest.param(f"{LEDGER}-archive-x", ARCHIVE, NAMED, id="labelled-under-another-name"),
        pytest.param("gpu-node-guard-notes", ARCHIVE, NAMED, id="labelled-any-configmap"),
    ],
)
def test_an_archive_needs_its_name_and_its_labels_together(
    guard: client.ApiClient, name: str, labels: dict[str, str], says: str, no_ledger: None
) -> None:
    """A stolen guard token cannot write a ConfigMap the readers would take for an archive, or
    an archive they would never find."""
    doc = {"metadata": {"name": name, "labels": labels}, "data": {"gpu-a": LINE}}
    status, message = refusal(
        lambda: client.CoreV1Api(guard).create_namespaced_config_map(GUARD_NS, doc)
    )
    tally.record("guard", "ledger ConfigMaps", status == 422 and SCOPE in message)
    assert (status, SCOPE in message) == (422, True), message
    assert f"ConfigMap {GUARD_NS}/{name}: {says}" in message


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        pytest.param(f"{LEDGER}-archive-5", APP, id="an-archive-loses-its-component"),
        pytest.param(LEDGER, ARCHIVE, id="the-ledger-takes-the-archive-label"),
    ],
)
def test_an_update_keeps_name_and_labels_together(
    guard: client.ApiClient, name: str, labels: dict[str, str], no_ledger: None
) -> None:
    core = client.CoreV1Api(guard)
    meta = {"name": name, "labels": labels_of(name)}
    core.create_namespaced_config_map(GUARD_NS, {"metadata": meta, "data": {}})
    stored = core.read_namespaced_config_map(name, GUARD_NS)
    stored.metadata.labels = labels
    try:
        core.replace_namespaced_config_map(name, GUARD_NS, stored)
        status, message = 200, ""
    except ApiException as exc:
        status, message = api_error(exc)
    tally.record("guard", "ledger ConfigMaps", status == 422 and SCOPE in message)
    assert (status, LABELLED in message) == (422, True), message


def test_the_ledger_cannot_become_binary_on_update(
    guard: client.ApiClient, no_ledger: None
) -> None:
    core = client.CoreV1Api(guard)
    core.create_namespaced_config_map(GUARD_NS, {"metadata": {"name": LEDGER}, "data": {}})
    stored = core.read_namespaced_config_map(LEDGER, GUARD_NS)
    stored.binary_data = {"x": "AA=="}
    status, message = refusal(lambda: core.replace_namespaced_config_map(LEDGER, GUARD_NS, stored))
    assert (status, LEDGER_POLICY in message) == (422, True), message


def test_other_configmaps_of_people_are_not_the_ledgers_business(
    admin: client.ApiClient, deployed: object
) -> None:
    name = f"notes-{uuid.uuid4().hex[:6]}"
    doc = {"metadata": {"name": name}, "binaryData": {"x": "AA=="}}
    core = client.CoreV1Api(admin)
    core.create_namespaced_config_map(GUARD_NS, doc)
    assert core.read_namespaced_config_map(name, GUARD_NS).binary_data == {"x": "AA=="}
    core.delete_namespaced_config_map(name, GUARD_NS)


def test_the_policies_read_the_images_from_the_settings_configmap(kubectl_binary: Path) -> None:
    """policies/ names no image: each kind's `image` variable reads GUARD_IMAGE or
    GUARD_LOADTEST_IMAGE of its params, which image-wiring writes into the settings ConfigMap
    as it writes the CronJob's env (so applying policies/ alone cannot re-pin an image)."""
    docs = kustomize_documents(REPO / "policies")
    images = {
        d["metadata"]["name"]: v["expression"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
        for v in d["spec"].get("variables", [])
        if v["name"] == "image"
    }
    s = Settings()
    guard = f"params.?data[?'GUARD_IMAGE'].orValue('{s.image}')"
    loadtest = f"params.?data[?'GUARD_LOADTEST_IMAGE'].orValue('{s.loadtest_image}')"
    assert images == {
        "gpu-node-guard-evidence-job": guard,
        "gpu-node-guard-evidence-pod": guard,
        "gpu-node-guard-conformance-job": guard,
        "gpu-node-guard-conformance-pod": guard,
        "gpu-node-guard-fence-job": guard,
        "gpu-node-guard-fence-pod": guard,
        "gpu-node-guard-loadtest-job": loadtest,
        "gpu-node-guard-loadtest-pod": loadtest,
        "gpu-node-guard-agent-daemonset": guard,
        "gpu-node-guard-agent-pod": guard,
    }
    built = Kubectl(kubectl_binary).build(BASE)
    cronjob = next(d for d in built if d["kind"] == "CronJob")
    env = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    values = {e["name"]: e.get("value") for e in env}
    (settings,) = [d for d in built if d["kind"] == "ConfigMap"]
    for name in ("GUARD_IMAGE", "GUARD_LOADTEST_IMAGE"):
        assert values[name] == settings["data"][name]
    assert (values["GUARD_IMAGE"], values["GUARD_LOADTEST_IMAGE"]) == (s.image, s.loadtest_image)


def test_the_only_parameter_object_is_the_settings_configmap_no_jobs_admin_can_edit(
    identities: Identities,
) -> None:
    """Every policy that reads params reads the CronJob's own settings ConfigMap in the guard's
    namespace (Deny when it is missing, or Allow where the policy's match reaches objects that
    are not the guard's: docs/security.md, "Without the settings"): not editable by a
    jobs-namespace admin (RBAC), nor by the guard's token (guard-scope: its ledger only). The
    guard namespace's admin, who may edit the CronJob itself, may."""
    refs = set()
    for doc in kustomize_documents(REPO / "policies"):
        if doc["kind"] == "ValidatingAdmissionPolicyBinding" and "paramRef" in doc["spec"]:
            refs.add(tuple(sorted(doc["spec"]["paramRef"].items())))
        if doc["kind"] == "ValidatingAdmissionPolicy" and "paramKind" in doc["spec"]:
            assert doc["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert refs == {
        (("name", SETTINGS_CONFIGMAP), ("namespace", GUARD_NS), ("parameterNotFoundAction", when))
        for when in ("Deny", "Allow")
    }
    patch = {"data": {"GUARD_LOADTEST_MIN_RATIO": "0.000001"}}
    for who in (identities.jobs_ns_admin, identities.guard_token):
        status, _ = refusal(
            lambda api=who: client.CoreV1Api(api).patch_namespaced_config_map(
                SETTINGS_CONFIGMAP, GUARD_NS, patch
            )
        )
        assert status in (403, 422)
    body = client.CoreV1Api(identities.guard_token).read_namespaced_config_map(
        SETTINGS_CONFIGMAP, GUARD_NS
    )
    body.data = {**body.data, "GUARD_LOADTEST_MIN_RATIO": "0.000001"}
    guard = client.CoreV1Api(identities.guard_token)
    status, message = refusal(
        lambda: guard.replace_namespaced_config_map(SETTINGS_CONFIGMAP, GUARD_NS, body)
    )
    assert status == 422 and "gpu-node-guard-guard-scope" in message, message


def test_server_side_reapply_of_the_policies_changes_nothing(
    admin: client.ApiClient, deployed: object
) -> None:
    """What a GitOps sync does every few minutes: the stored objects do not move."""
    custom = client.CustomObjectsApi(admin)
    for doc in kustomize_documents(REPO / "policies"):
        plural = (
            "validatingadmissionpolicies"
            if doc["kind"] == "ValidatingAdmissionPolicy"
            else "validatingadmissionpolicybindings"
        )
        name = doc["metadata"]["name"]
        group, version = "admissionregistration.k8s.io", "v1"
        before = custom.get_cluster_custom_object(group, version, plural, name)
        try:
            after = custom.patch_cluster_custom_object(
                group,
                version,
                plural,
                name,
                yaml.safe_load(yaml.safe_dump(doc)),
                field_manager="gitops",
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except ApiException as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"apply of {name}: {exc.body}")
        assert after["metadata"]["generation"] == before["metadata"]["generation"], name
