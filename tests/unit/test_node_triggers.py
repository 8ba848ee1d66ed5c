"""The node triggers' pure parts: the ledger's node-incident lines, the GPU classes and their
learned count, bad settings refused with one line, and the fabric trigger's hold, its one
not-applicable line and its return row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from guard.actions import Skip
from guard.cli import cli
from guard.codec import queries
from guard.gpu_classes import ClassError, class_of, kept_label_keys, majority, parse_classes
from guard.ledger import count, parse_ledger, parse_line
from guard.model import PromView, Snapshot
from guard.names import Annotations
from guard.plan import triggers
from guard.plan.return_rule import TABLE
from guard.read.objects import node_info
from guard.settings import Settings, SettingsError
from tests.builders import KEYS, node

CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
XID_LINE = f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} manual"


@pytest.mark.parametrize("word", ["gpu-short", "admission-rejected", "fabric"])
def test_a_node_incident_line_reads_back_with_its_word(word: str) -> None:
    line = parse_line("b", f"2026-09-21T05:52:44Z {word} unknown - gpu-node-guard")
    assert line.entry is not None and line.problem == ""
    assert (line.entry.word, line.entry.reason, line.entry.uuid) == (word, word, "-")
    assert line.entry.format() == f"2026-09-21T05:52:44Z {word} unknown - gpu-node-guard"


@pytest.mark.parametrize(
    "raw",
    [
        "2026-09-21T05:52:44Z gpu-missing unknown - gpu-node-guard",  # not a reason word
        "2026-09-21T05:52:44Z xid-79 0000:99:00.0 - gpu-node-guard",  # an Xid names its card
    ],
)
def test_other_words_and_an_xid_without_its_card_are_not_incidents(raw: str) -> None:
    assert parse_line("b", raw).entry is None


def test_node_incidents_never_count_as_a_card_or_slot_incident() -> None:
    lines = parse_ledger(
        {"b": f"{XID_LINE}\n2026-09-21T05:52:44Z gpu-short unknown - gpu-node-guard\n"}
    )
    counted = count(lines, "-", "b", "unknown")
    assert (counted.same_card, counted.same_slot) == (0, 0)
    card = count(lines, CARD, "b", "0000:99:00.0")
    assert (card.same_card, card.same_slot) == (1, 1)


def test_the_first_class_a_node_matches_is_its_class() -> None:
    classes = parse_classes("pool=a,gpu!=none:8; pool=a:4; big:auto")
    assert class_of(classes, {"pool": "a", "gpu": "h100"}) == classes[0]
    assert class_of(classes, {"pool": "a", "gpu": "none"}) == classes[1]
    assert class_of(classes, {"big": ""}) == classes[2]
    assert class_of(classes, {"pool": "b"}) is None


def test_a_learned_count_needs_a_majority_of_at_least_two_peers() -> None:
    assert majority([8, 8, 7]) == 8
    assert majority([8, 7]) is None and majority([8]) is None and majority([]) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("pool=a", "must be <selector>:<count>"),
        ("pool=a:eight", "must be <selector>:<count>"),
        ("pool=a:0", "the count must be in 1..64"),
        ("po ol=a:8", "is not k=v, k!=v or k of a Node label"),
    ],
)
def test_bad_classes_are_refused_naming_the_entry(text: str, says: str) -> None:
    with pytest.raises(ClassError, match=says):
        parse_classes(text)
    with pytest.raises(SettingsError, match="gpu_classes"):
        Settings(gpu_classes=text)


def test_bad_classes_are_one_error_line_and_a_non_zero_exit() -> None:
    result = CliRunner().invoke(
        cli, ["run", "--prometheus-url", "http://127.0.0.1:1", "--gpu-classes", "pool=a"]
    )
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    (error,) = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert "--gpu-classes (GUARD_GPU_CLASSES) entry 'pool=a'" in error


def test_a_node_keeps_only_the_labels_its_class_selects_on() -> None:
    raw = {
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "labels": {"gpu-pool": "interactive", "feature.node.kubernetes.io/cpu-AVX": "true"},
        },
    }
    keys = Annotations("gpu-node-guard.io/")
    kept = node_info(raw, keys, kept_label_keys("gpu-pool=interactive:8", ""))
    assert kept.labels == (("gpu-pool", "interactive"),)
    assert node_info(raw, keys).labels == ()  # no classes: no label kept


NOW = datetime(2026, 9, 21, 1, 0, tzinfo=UTC)


def fabric_snap(view: PromView, *names: str) -> Snapshot:
    return Snapshot(NOW, tuple(node(n) for n in names), (), (), (), view)


def test_a_failed_fabric_is_a_candidate_only_once_held() -> None:
    s = Settings()
    since = (("held", NOW - timedelta(seconds=600)), ("early", NOW - timedelta(seconds=540)))
    found = {
        h.node: h
        for h in triggers.hits(fabric_snap(PromView(fabric_since=since), "held", "early"), s)
    }
    assert (found["held"].reason, found["held"].held) == ("fabric", True)
    assert (found["early"].held_s, found["early"].held) == (540, False)


def test_a_cordoned_node_or_one_not_in_the_api_is_not_a_fabric_hit() -> None:
    since = (("gone", NOW - timedelta(hours=1)), ("out", NOW - timedelta(hours=1)))
    view = PromView(fabric_since=since, cordoned=("out",))
    assert list(triggers.hits(fabric_snap(view, "out"), Settings())) == []


@pytest.mark.parametrize(("seen", "lines"), [(False, 1), (True, 0), (None, 0)])
def test_an_absent_fabric_field_is_one_line_for_the_run(seen: bool | None, lines: int) -> None:
    found = triggers.fabric.not_applicable(fabric_snap(PromView(fabric_seen=seen), "a", "b", "c"))
    assert [(a.node, a.reason, a.level) for a in found if isinstance(a, Skip)] == [
        ("", "fabric-not-applicable", "INFO")
    ] * lines


def test_the_fabric_return_row_waits_for_success_on_every_gpu() -> None:
    assert any(row.word == "fabric" and row.reads for row in TABLE)  # a Prometheus row
    notes = {KEYS.reason: "fabric", KEYS.at: "2026-09-21T00:40:00Z", KEYS.boot_id: "boot-1"}
    cordoned = node("f", cordoned=True, boot="boot-2", extra=notes)
    assert cordoned.cordon is not None
    waiting = fabric_snap(PromView(fabric_not_success=("f",)), "f")
    (skip,) = triggers.fabric_gate(waiting, cordoned, cordoned.cordon)
    assert isinstance(skip, Skip) and (skip.reason, skip.level) == ("fabric", "WARN")
    assert triggers.fabric_gate(fabric_snap(PromView(), "f"), cordoned, cordoned.cordon) == ()
    other = node("f", cordoned=True, boot="boot-2", extra={**notes, KEYS.reason: "gpu-short"})
    assert other.cordon is not None
    assert triggers.fabric_gate(waiting, other, other.cordon) == ()


def test_the_not_applicable_line_names_every_fabric_field() -> None:
    (skip,) = triggers.fabric.not_applicable(fabric_snap(PromView(fabric_seen=False), "a"))
    assert isinstance(skip, Skip)
    for metric in queries.FABRIC_METRICS:
        assert metric in skip.detail


def test_every_fabric_field_is_seen_by_one_query_with_the_exporter_pin() -> None:
    found = queries.fabric_seen(queries.Pins('job="dcgm"'))
    assert found.startswith("count({__name__=~") and found.endswith(', job="dcgm"})')
    assert all(metric in found for metric in queries.FABRIC_METRICS)


def test_nvlink_recovery_errors_are_read_as_their_growth_over_the_fabric_hold() -> None:
    s = Settings(fabric_hold_s=900)
    found = queries.fabric_failed(s)
    m = queries.NVLINK_RECOVERY_METRIC
    # now less its lowest sample in the hold: not increase(), which VictoriaMetrics counts from 0
    # for a series new in the window (an exporter restart would look like errors)
    assert f"({m} - min_over_time({m}[15m])) > 0" in found
    assert f"{m} >" not in found  # never its raw value
    # the switch fields join the node by the same host labels as every dcgm field
    assert found.count('"guard_host", ";", "node", "Hostname", "hostname"') == 4
    # the return waits while any of them is faulted, not only the Fabric Manager status
    assert f"{queries.NVSWITCH_FATAL_METRIC} > 0" in queries.fabric_not_success(s)
