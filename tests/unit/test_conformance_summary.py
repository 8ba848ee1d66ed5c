"""The summary the guard reads from a conformance Pod's termination message: what it says, that it
fits kubelet's 4096 bytes, and that `parse_summary` refuses anything else with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.conformance.checks import ITEMS
from guard.conformance.cli import summarize
from guard.conformance.model import ItemResult, Status
from guard.wire import CONFORMANCE_SCHEMA as SUMMARY_SCHEMA
from guard.wire import KUBELET_MAX_BYTES as KUBELET_LIMIT
from guard.wire import MAX_BYTES as SUMMARY_MAX_BYTES
from guard.wire import Finding, Summary, parse_summary, render_summary
from guard.wire import SummaryError as ReportError
from tests.fixtures.hosts.hosttree import KUBEADM, check_host


def test_a_kubeadm_node_missing_its_persist_file_is_summarised(tmp_path: Path) -> None:
    results = tuple(check_host(tmp_path, {**KUBEADM, "var/lib/dpkg/status": None}).values())
    text = render_summary(summarize(results))
    doc = json.loads(text)
    assert (doc["schema"], doc["status"]) == (SUMMARY_SCHEMA, "PASS")
    assert [f["item"] for f in doc["skipped"]] == [
        "ipvs-resolvable",
        "ipvs-persist",
        "ipvs-loaded",
        "rke2-unit",
        "rke2-version",
        "auto-upgrade",
        "package-hold",
    ]
    assert doc["skipped"][3]["why"].startswith("not an RKE2 node")
    assert parse_summary(text) == summarize(results)


def test_failed_items_keep_their_order_and_reason() -> None:
    results = (
        ItemResult("ipvs-persist", Status.FAIL, "no modules-load.d file lists ip_vs"),
        ItemResult("ipvs-loaded", Status.FIXED, "loaded by modprobe ip_vs"),
        ItemResult("nvidia-match", Status.FAIL, "module 580.126.09 != NVML 580.159.03"),
        ItemResult("dns-upstream", Status.UNKNOWN, "resolv.conf: Permission denied"),
    )
    summary = parse_summary(render_summary(summarize(results)))
    assert summary.ok is False
    assert summary.failed_items == ("ipvs-persist", "nvidia-match")
    assert summary.failed[1].why == "module 580.126.09 != NVML 580.159.03"
    assert summary.unknown == (Finding("dns-upstream", "resolv.conf: Permission denied"),)
    assert summary.fixed == ("ipvs-loaded",)


@pytest.mark.parametrize("status", [Status.FAIL, Status.SKIP, Status.UNKNOWN, Status.WARN])
def test_the_summary_fits_a_termination_message_whatever_the_items_say(status: Status) -> None:
    long = "x" * 3000 + " é"  # multi-byte text counts in bytes
    results = tuple(ItemResult(f"{name}-{i}", status, long) for i in range(4) for name in ITEMS)
    text = render_summary(summarize(results))
    assert len(text.encode()) <= SUMMARY_MAX_BYTES < KUBELET_LIMIT
    back = parse_summary(text)
    key = {Status.FAIL: "failed", Status.SKIP: "skipped"}.get(status, str(status).lower())
    names = [f.item for f in getattr(back, "warned" if status is Status.WARN else key)]
    assert names == [r.name for r in results]  # names are never dropped


def test_failed_reasons_are_dropped_last() -> None:
    long = "y" * 150
    results = (
        *(ItemResult(f"skip-{i}", Status.SKIP, long) for i in range(30)),
        ItemResult("ipvs-persist", Status.FAIL, "no modules-load.d file lists ip_vs"),
    )
    back = parse_summary(render_summary(summarize(results)))
    assert {f.why for f in back.skipped} == {""}
    assert back.failed == (Finding("ipvs-persist", "no modules-load.d file lists ip_vs"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "did not finish", id="empty-program-died-first"),
        pytest.param("OOMKilled", "not JSON", id="not-json"),
        pytest.param('{"schema": "other/v9"}', "schema is 'other/v9'", id="foreign-schema"),
        pytest.param("[1, 2]", "schema is 'list'", id="not-an-object"),
        pytest.param(
            json.dumps({"schema": SUMMARY_SCHEMA, "status": "OK"}), "status is 'OK'", id="status"
        ),
        pytest.param(
            json.dumps({"schema": SUMMARY_SCHEMA, "status": "FAIL", "failed": []}),
            "says FAIL with 0 failed",
            id="fail-without-items",
        ),
        pytest.param(
            json.dumps({"schema": SUMMARY_SCHEMA, "status": "PASS", "skipped": ["rke2-unit"]}),
            "`skipped` is not a list of {item, why}",
            id="names-without-reasons",
        ),
        pytest.param(
            json.dumps({"schema": SUMMARY_SCHEMA, "status": "PASS", "fixed": "ipvs-loaded"}),
            "`fixed` is not a list of names",
            id="fixed-not-a-list",
        ),
    ],
)
def test_parse_summary_refuses_with_one_line(text: str, message: str) -> None:
    with pytest.raises(ReportError, match=message) as caught:
        parse_summary(text)
    assert "\n" not in str(caught.value)


def test_a_summary_without_optional_lists_is_a_pass() -> None:
    assert parse_summary(json.dumps({"schema": SUMMARY_SCHEMA, "status": "PASS"})) == Summary(True)
