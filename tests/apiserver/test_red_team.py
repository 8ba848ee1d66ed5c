"""The red-team table's apiserver rows (tests/redteam_table.py) on the real v1.34.4 API server,
manifests/base deployed with every policy enforcing: each identity sends each request on the
settings ConfigMap, the cycle's Lease and fence Jobs (dry-run: nothing is stored), and the answer
must be the row's: admitted, or refused with 403 by RBAC, or with 422 by the policy the row
names, in its words."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.doors.ledger_store import archive_name, archive_text
from guard.names import (
    APP_LABEL,
    APP_NAME,
    COMPONENT_LABEL,
    CYCLE_LEASE,
    LEDGER_ARCHIVE_COMPONENT,
    SETTINGS_CONFIGMAP,
    Annotations,
)
from guard.settings import Settings
from tests import redteam_table as table
from tests.apiserver import tally
from tests.apiserver.conftest import Identities, _wait_until_allowed
from tests.apiserver.kube import (
    GUARD_NS,
    JOBS_NS,
    ControlPlane,
    api_error,
    create,
    grant_create_only,
    guard_job,
)

pytestmark = pytest.mark.apiserver

NODE = "gpu-red-team"  # the policies look at names; the kubelet's Node exists
CREATE_ONLY = "carol-creates-jobs"
ROLE = "red-team-create-only"
DRY = "All"
KEYS = Annotations("gpu-node-guard.io/")
EVIL_IMAGE = "registry.example.com/evil:1"
FUTURE = "2100-01-01T00:00:00.000001Z"
PAST = "2026-12-07T00:00:00.000001Z"  # microseconds, or the client drops the fraction


@dataclass(frozen=True, slots=True)
class World:
    apis: dict[str, client.ApiClient]
    admin: client.ApiClient


def _ensure_lease(admin: client.ApiClient) -> bool:
    """The cycle's Lease as a run leaves it (released); True when this module made it."""
    leases = client.CoordinationV1Api(admin)
    try:
        leases.read_namespaced_lease(CYCLE_LEASE, GUARD_NS)
        return False
    except ApiException as exc:
        if exc.status != 404:
            raise
    body = {"metadata": {"name": CYCLE_LEASE}, "spec": {"leaseDurationSeconds": 90}}
    leases.create_namespaced_lease(GUARD_NS, body)
    return True


@pytest.fixture(scope="module")
def world(
    deployed: ControlPlane, admin: client.ApiClient, identities: Identities
) -> Iterator[World]:
    grant_create_only(admin, CREATE_ONLY, ROLE)
    core = client.CoreV1Api(admin)
    core.create_node({"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}})
    made_lease = _ensure_lease(admin)
    with (
        deployed.impersonating(CREATE_ONLY) as carol,
        deployed.impersonating(f"system:node:{NODE}", "system:nodes") as kubelet,
    ):
        probe = guard_job("evidence", NODE, "probe-red-team")
        _wait_until_allowed(lambda: create(carol, probe, dry_run=True))
        yield World(
            {
                "guard-token": identities.guard_token,
                "guard-ns-admin": identities.guard_ns_admin,
                "jobs-ns-admin": identities.jobs_ns_admin,
                "create-only": carol,
                "kubelet": kubelet,
                "cluster-admin": admin,
            },
            admin,
        )
    if made_lease:
        client.CoordinationV1Api(admin).delete_namespaced_lease(CYCLE_LEASE, GUARD_NS)
    core.delete_node(NODE)
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.delete_namespaced_role_binding(ROLE, JOBS_NS)
    rbac.delete_namespaced_role(ROLE, JOBS_NS)


# ── the requests, by (surface, action); each is sent as the row's identity ─────────────────────

Action = Callable[[client.ApiClient, World], object]


def _settings_update(api: client.ApiClient, w: World) -> object:
    stored = client.CoreV1Api(w.admin).read_namespaced_config_map(SETTINGS_CONFIGMAP, GUARD_NS)
    body = w.admin.sanitize_for_serialization(stored)
    body["data"] = {**(body.get("data") or {}), "GUARD_IMAGE": EVIL_IMAGE}
    return client.CoreV1Api(api).replace_namespaced_config_map(
        SETTINGS_CONFIGMAP, GUARD_NS, body, dry_run=DRY
    )


def _settings_delete(api: client.ApiClient, w: World) -> object:
    return client.CoreV1Api(api).delete_namespaced_config_map(
        SETTINGS_CONFIGMAP, GUARD_NS, dry_run=DRY
    )


def _settings_create(api: client.ApiClient, w: World) -> object:
    """A create of the settings' name (dry-run: the admission answer comes before the 409)."""
    body = {"metadata": {"name": SETTINGS_CONFIGMAP}, "data": {"GUARD_IMAGE": EVIL_IMAGE}}
    return client.CoreV1Api(api).create_namespaced_config_map(GUARD_NS, body, dry_run=DRY)


def _lease_update(**spec: Any) -> Action:
    def send(api: client.ApiClient, w: World) -> object:
        stored = client.CoordinationV1Api(w.admin).read_namespaced_lease(CYCLE_LEASE, GUARD_NS)
        body = w.admin.sanitize_for_serialization(stored)
        body["spec"] = {
            "holderIdentity": "gpu-node-guard-29000000-abcde-7",  # a run's form
            "leaseDurationSeconds": 90,
            "acquireTime": PAST,
            "renewTime": PAST,
            **spec,
        }
        return client.CoordinationV1Api(api).replace_namespaced_lease(
            CYCLE_LEASE, GUARD_NS, body, dry_run=DRY
        )

    return send


def _another_lease(api: client.ApiClient, w: World) -> object:
    body = {"metadata": {"name": "gpu-node-guard-other"}, "spec": {"leaseDurationSeconds": 90}}
    return client.CoordinationV1Api(api).create_namespaced_lease(GUARD_NS, body, dry_run=DRY)


def _lease_delete(api: client.ApiClient, w: World) -> object:
    return client.CoordinationV1Api(api).delete_namespaced_lease(CYCLE_LEASE, GUARD_NS, dry_run=DRY)


def _fence(mode: str, component: str | None = "fence", *more: str) -> Action:
    """An in-shape fence Job of `mode`; `component`: its kind label, or None for none; `more`:
    words added to its argv."""

    def send(api: client.ApiClient, w: World) -> object:
        job = guard_job("fence", NODE, uuid.uuid4().hex)
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]  # type: ignore[index]
        command[command.index("set")] = mode
        command.extend(more)
        for meta in (job["metadata"], job["spec"]["template"]["metadata"]):  # type: ignore[index]
            labels = meta["labels"]
            if component is None:
                del labels["app.kubernetes.io/component"]
            else:
                labels["app.kubernetes.io/component"] = component
        if component == "evidence":  # passed off as one whole: its name and container too
            job["metadata"]["name"] = job["metadata"]["name"].replace("gng-fn-", "gng-ev-", 1)  # type: ignore[index]
            job["spec"]["template"]["spec"]["containers"][0]["name"] = "evidence"  # type: ignore[index]
        return create(api, job, dry_run=True)

    return send


def _record(key: str, value: str) -> Action:
    """A merge patch of one guard record on the node (dry-run)."""

    def send(api: client.ApiClient, w: World) -> object:
        body = {"metadata": {"annotations": {key: value}}}
        return client.CoreV1Api(api).patch_node(
            NODE, body, dry_run=DRY, _content_type="application/merge-patch+json"
        )

    return send


def _archive(line: str) -> Action:
    """A create of an archive, named and labelled as the guard makes one, holding `line`
    (dry-run)."""

    def send(api: client.ApiClient, w: World) -> object:
        labels = {APP_LABEL: APP_NAME, COMPONENT_LABEL: LEDGER_ARCHIVE_COMPONENT}
        name = archive_name(Settings().ledger_configmap, 999)
        body = {"metadata": {"name": name, "labels": labels}, "data": {NODE: line}}
        return client.CoreV1Api(api).create_namespaced_config_map(GUARD_NS, body, dry_run=DRY)

    return send


ESC_LINE = "2026-03-02T04:10:00Z gpu-red-team xid-79 \x1b]8;;https://evil.example\x07click\n"
GIB = "update (another GUARD_IMAGE)"
HOLDER = "update: holder `attacker` (not `<pod>-<pid>`)"
ACTIONS: dict[tuple[str, str], Action] = {
    (table.SETTINGS, GIB): _settings_update,
    (table.SETTINGS, "delete"): _settings_delete,
    (table.SETTINGS, "create it anew (once gone)"): _settings_create,
    (table.LEASE, HOLDER): _lease_update(holderIdentity="attacker"),
    (table.LEASE, "update: leaseDurationSeconds 2147483647"): _lease_update(
        leaseDurationSeconds=2_147_483_647
    ),
    (table.LEASE, "update: renewTime in 2100"): _lease_update(renewTime=FUTURE),
    (table.LEASE, "create another Lease"): _another_lease,
    (table.LEASE, "delete"): _lease_delete,
    (table.FENCE, "create `fence set`, in shape"): _fence("set"),
    (table.FENCE, "create `fence lift`, in shape"): _fence("lift"),
    (table.FENCE, "create `fence set --drain` (the settings say no drain)"): _fence(
        "set", "fence", "--drain"
    ),
    (table.FENCE, "create `fence set` labelled as an evidence Job"): _fence("set", "evidence"),
    (table.FENCE, "create `fence set` with no component label"): _fence("set", None),
    (table.RECORDS, "write `loadtest-result: passed, trust me`"): _record(
        KEYS.loadtest_result, "passed, trust me"
    ),
    (table.RECORDS, "write `onboarding-failed: <time> job/<name> none; all fine`"): _record(
        KEYS.onboarding_failed, "2026-03-02T04:10:00Z job/gng-cf-x none; all fine"
    ),
    (table.RECORDS, "write `loadtest-result: failed job/<name> at <time>`"): _record(
        KEYS.loadtest_result, "failed job/gng-lt-x-1a2b3c4d at 2026-03-02T04:10:00Z"
    ),
    (table.ARCHIVE, "create one whose line carries an ESC byte"): _archive(ESC_LINE),
    (table.ARCHIVE, "create one as the guard writes it (the ESC as `\\x1b`)"): _archive(
        archive_text(ESC_LINE)
    ),
}

ROWS = table.rows_of("apiserver")


def test_every_row_of_the_tier_has_its_request() -> None:
    assert {(r.surface, r.action) for r in ROWS} == set(ACTIONS)
    assert len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_red_team_row(world: World, row: table.Row) -> None:
    send = ACTIONS[(row.surface, row.action)]
    status, message = 0, ""
    try:
        send(world.apis[row.who], world)
    except ApiException as exc:
        status, message = api_error(exc)
    if not row.allowed:
        tally.record(row.who, "red-team requests", status in (403, 422))
    assert table.mismatch(row, status, message) == "", row
