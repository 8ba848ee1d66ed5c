"""The fault ledger on a real kube-apiserver: concurrent writers, the 1 MiB limit, refusals, and
`ledger count --from-cluster` counting what the guard counts.

Writers run as the guard's ServiceAccount, so RBAC and the ConfigMap policy apply.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.actions import AppendLedgerLine
from guard.apply import KubeExecutor
from guard.doors import ledger_store
from guard.doors.kube import Kube
from guard.doors.retry import Backoff
from guard.evidence.cli import ledger as ledger_cli
from guard.ledger import count
from guard.log import Log
from guard.model import PromView
from guard.plan.common import archive_event, with_archive_events
from guard.read import build_snapshot, read_cluster
from guard.settings import Settings
from tests.apiserver.conftest import REPO, wait_for_enforcement
from tests.apiserver.guard_run import LEDGER, NS, forget_guard_state, node_events
from tests.apiserver.kube import ControlPlane, create, yaml_documents

pytestmark = pytest.mark.apiserver

WRITERS, APPENDS = 8, 50
START = datetime(2026, 1, 1, tzinfo=UTC)


def line(writer: int, n: int) -> str:
    """A 97-byte guard line, unique per (writer, n), in time order."""
    at = (START + timedelta(minutes=writer * 1000 + n)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{at} xid-79 0000:99:00.0 GPU-{writer:08x}-0000-0000-0000-{n:012x} gpu-node-guard"


@pytest.fixture
def core(admin: client.ApiClient) -> Iterator[client.CoreV1Api]:
    core = client.CoreV1Api(admin)
    forget_guard_state(core, admin)
    yield core
    forget_guard_state(core, admin)


def stored(core: client.CoreV1Api) -> dict[str, Any]:
    """The ledger and every archive as the guard reads them (its lines), and the raw lines."""
    cms = [
        c for c in core.list_namespaced_config_map(NS).items if c.metadata.name.startswith(LEDGER)
    ]
    raw = [(n, r) for c in cms for n, t in (c.data or {}).items() for r in t.splitlines()]
    ledger = next((c.data or {} for c in cms if c.metadata.name == LEDGER), {})
    archives = [
        {"metadata": {"name": c.metadata.name}, "data": c.data or {}}
        for c in cms
        if c.metadata.name != LEDGER
    ]
    return {"lines": ledger_store.ledger_lines(ledger, archives), "raw": raw, "objects": cms}


def writers(kubeconfig: Path, archive_at: int) -> tuple[int, int, list[str]]:
    """8 writers × 50 appends at once; (retries, tries, errors)."""
    errors: list[str] = []
    backoffs: list[Backoff] = []
    tries: list[int] = []
    target = ledger_store.LedgerTarget(NS, LEDGER, archive_at)
    go = threading.Barrier(WRITERS)

    def write(w: int) -> None:
        kube = Kube.connect(str(kubeconfig), in_cluster=False, backoff=Backoff.for_seconds(200))
        backoffs.append(kube.backoff)
        go.wait()
        for n in range(APPENDS):
            try:
                tries.append(ledger_store.append(kube, target, f"gpu-{w % 4}", line(w, n)).tries)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(b.waits for b in backoffs), sum(tries), errors


@pytest.mark.parametrize(
    "archive_at",
    [
        pytest.param(768 * 1024, id="default-threshold"),
        pytest.param(8 * 1024, id="archiving-while-contended"),
    ],
)
def test_eight_concurrent_writers_lose_and_duplicate_nothing(
    guard_kubeconfig, core, archive_at, record_property
):
    retries, tries, errors = writers(guard_kubeconfig, archive_at)
    found = stored(core)
    counted = [ln.raw for ln in found["lines"]]
    expected = {line(w, n) for w in range(WRITERS) for n in range(APPENDS)}
    lost = expected - set(counted)
    duplicated = sum(n - 1 for n in Counter(counted).values() if n > 1)
    figures = {
        "writers": WRITERS,
        "appends": APPENDS,
        "given_up": len(errors),
        "lost": len(lost),
        "duplicated": duplicated,
        "retries": retries,
        "tries": tries,
        "archives": len(found["objects"]) - 1,
        "raw_copies": len(found["raw"]) - len(expected),
    }
    record_property("ledger_figures", figures)
    print(f"\nledger under contention ({archive_at} B threshold): {figures}")
    assert (figures["given_up"], figures["lost"], figures["duplicated"]) == (0, 0, 0), errors[:3]
    for cm in found["objects"]:  # every object stays under the threshold the guard keeps
        assert ledger_store.size_of(cm.data or {}) <= max(archive_at, 8 * 1024)


def full_ledger(core: client.CoreV1Api, lines: int, **extra: Any) -> dict[str, str]:
    """A ledger of `lines` 97-byte lines spread over 100 nodes (10,800 lines is 1,047,600 B)."""
    data: dict[str, str] = {}
    for i in range(lines):
        node = f"gpu-{i % 100:03d}"
        data[node] = data.get(node, "") + line(i % 100, i // 100) + "\n"
    core.create_namespaced_config_map(NS, {"metadata": {"name": LEDGER}, "data": data, **extra})
    return data


def executor(kubeconfig: Path, node: str) -> tuple[KubeExecutor, Settings]:
    s = Settings(prometheus_url="http://127.0.0.1:9")
    kube = Kube.connect(str(kubeconfig), in_cluster=False, backoff=Backoff.for_seconds(30))
    snap = build_snapshot(START, read_cluster(kube, s), PromView(), s)
    return KubeExecutor(kube, Log("text"), s, snap, "test"), s


def test_a_ledger_near_one_mib_moves_its_oldest_lines_to_an_archive_the_counts_still_read(
    guard_kubeconfig, core, admin, make_node
):
    node = make_node()
    before = full_ledger(core, 10_700)
    assert ledger_store.size_of(before) > 1_036_000
    ex, s = executor(guard_kubeconfig, node)
    new = line(999, 0)
    planned = with_archive_events(ex.snap, s, (AppendLedgerLine(node, "xid-79", new, LEDGER),))
    assert [type(a).__name__ for a in planned] == ["AppendLedgerLine", "EmitEvent"]
    outcome, _ = [ex.apply(a) for a in planned]
    assert outcome.status == "applied"
    assert outcome.detail.startswith(
        f"moved {outcome.detail.split()[1]} oldest lines to configmap/{LEDGER}-archive-1"
    )
    found = stored(core)
    ledger = next(c for c in found["objects"] if c.metadata.name == LEDGER)
    assert ledger_store.size_of(ledger.data) <= s.ledger_archive_bytes // 2 + 100
    counted = [ln.raw for ln in found["lines"]]
    assert sorted(counted) == sorted([*(r for t in before.values() for r in t.splitlines()), new])
    # The snapshot reads the archive: the oldest card still has its history.
    kube = Kube.connect(str(guard_kubeconfig), in_cluster=False)
    snap = build_snapshot(START, read_cluster(kube, s), PromView(), s)
    oldest_uuid = line(0, 0).split()[3]
    assert count(snap.ledger, oldest_uuid, "gpu-000", "0000:99:00.0").same_card == 1
    assert len(snap.ledger) == len(found["lines"])
    (event,) = node_events(admin, node)
    assert event["reason"] == "GuardLedgerArchived" and event["note"] == planned[1].message
    assert [o.status for o in ex.outcomes] == ["applied", "applied"]  # the line, the Event
    # Planned, but this cycle's append on that node moved nothing: no Event about an archive.
    unmoved = ex.apply(archive_event(AppendLedgerLine("gpu-x", "xid-79", new, LEDGER), 1))
    assert (unmoved.status, unmoved.reason) == ("skipped", "changed-under-us")


WITH_ARCHIVES = REPO / "tests" / "fixtures" / "ledger" / "with-archives.yaml"


def test_ledger_count_from_the_cluster_counts_the_archives_as_the_guard_does(
    guard_kubeconfig, core, admin
):
    """The ledger, its archive (a line in both) and a look-alike without the archive label:
    `ledger count --from-cluster`, run with the guard's own access, says what the guard's
    snapshot counts."""
    items = yaml.safe_load(WITH_ARCHIVES.read_text())["items"]
    for cm in (i for i in items if i["kind"] == "ConfigMap"):
        create(admin, cm)
    card, node, pci = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d", "gpu-node-b", "0000:99:00.0"
    result = CliRunner().invoke(
        ledger_cli,
        [
            "count",
            "--uuid",
            card,
            "--node",
            node,
            "--pci",
            pci,
            "--from-cluster",
            "--kubeconfig",
            str(guard_kubeconfig),
            "--namespace",
            NS,
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["same_card"], out["same_slot"], out.get("archives")) == (
        4,
        4,
        [f"{LEDGER}-archive-1"],
    )
    s = Settings(prometheus_url="http://127.0.0.1:9")
    kube = Kube.connect(str(guard_kubeconfig), in_cluster=False)
    snap = build_snapshot(START, read_cluster(kube, s), PromView(), s)
    guard = count(snap.ledger, card, node, pci)
    assert (guard.same_card, guard.same_slot) == (out["same_card"], out["same_slot"])


def made_before_the_ledger_policy(
    deployed: ControlPlane, admin: client.ApiClient, body: dict[str, Any]
) -> None:
    """Create the ledger `body` as one made before policies/ledger.yaml was applied (an upgrade):
    the policy's binding is taken away, the ledger created, the binding put back and enforcing."""
    (binding,) = [
        d
        for d in yaml_documents(REPO / "policies" / "ledger.yaml")
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
        and d["metadata"]["name"] == "gpu-node-guard-ledger"
    ]
    name = binding["metadata"]["name"]
    client.AdmissionregistrationV1Api(admin).delete_validating_admission_policy_binding(name)
    try:
        deadline = time.monotonic() + 30
        while True:  # the binding's removal reaches admission by informer
            try:
                client.CoreV1Api(admin).create_namespaced_config_map(NS, body)
                return
            except ApiException as exc:
                if exc.status != 422 or name not in str(exc.body) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        create(admin, binding)
        wait_for_enforcement(deployed, admin)


@pytest.mark.parametrize(
    ("extra", "message", "hint", "other_hint"),
    [
        pytest.param(
            {"immutable": True},
            "field is immutable",
            "the ledger ConfigMap is immutable",
            "the ledger ConfigMap is immutable",
            id="immutable",
        ),
        pytest.param(
            {"binaryData": {"NODE": "AAEC"}},
            "binaryData",
            "binaryData already holds",
            "the ledger carries binaryData",
            id="binarydata-clash",
        ),
    ],
)
def test_a_ledger_the_api_will_not_change_is_one_write_error_per_line_with_the_fix(
    guard_kubeconfig, core, admin, deployed, make_node, extra, message, hint, other_hint
):
    """The policies refuse making such a ledger; one made before them still jams every write,
    and each refused line says what a person does about it."""
    node, other = make_node(), make_node()
    if "binaryData" in extra:
        extra = {"binaryData": {node: "AAEC"}}
    data = {"gpu-x": line(1, 1) + "\n"}
    made_before_the_ledger_policy(
        deployed, admin, {"metadata": {"name": LEDGER}, "data": data, **extra}
    )
    ex, _ = executor(guard_kubeconfig, node)
    refused = ex.apply(AppendLedgerLine(node, "xid-79", line(2, 2), LEDGER))
    assert refused.status == "failed"
    assert "HTTP 422" in refused.detail and message in refused.detail and hint in refused.detail
    # Nothing changes an immutable ledger; the ledger policy refuses any change to one with
    # binaryData (policies/ledger.yaml), so the other node's line is refused too, with its fix.
    also = ex.apply(AppendLedgerLine(other, "xid-79", line(3, 3), LEDGER))
    assert also.status == "failed" and "HTTP 422" in also.detail and other_hint in also.detail
    assert core.read_namespaced_config_map(LEDGER, NS).data == data
