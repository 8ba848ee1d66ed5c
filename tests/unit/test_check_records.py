"""The guard's result and failure records only in the form it writes them (issue 38, item 7):
the node policy's forms and the reader agree, a forged value never reaches a decision, and the
ledger's archives carry no escape bytes."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from guard import ledger
from guard.codec.check_records import (
    checked_boot_value,
    claim_record_value,
    failed_value,
    fence_jobs_value,
    fence_value,
    is_item,
    job_record_value,
    links_value,
    parse_claim,
    parse_fence,
    parse_fence_jobs,
)
from guard.codec.records import Problems, cancel_value, reason_cancel_value
from guard.doors import ledger_store
from guard.generate.policies.nodes import FAILED_FORM, RESULT_FORM
from guard.model import ClaimRecord, RecordedLink
from guard.names import Annotations
from guard.read.objects import node_info

K = Annotations("gpu-node-guard.io/")
AT = ledger.format_time(datetime(2026, 3, 2, 4, 10, tzinfo=UTC))
WRITTEN = f"failed job/gng-lt-gpu-a-1a2b3c4d at {AT}"  # what return_jobs / device_taint write
FORGED = [
    "passed, trust me",
    f"failed job/gng-lt-a at {AT} gng-lt-b gng-lt-c",  # a list of names for `name in recorded`
    "failed job/gng-lt-a at soon",
    f"failed job/Gng-lt-a at {AT}",
    f"failed  job/gng-lt-a at {AT}",
]


def _node(notes: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "gpu-a", "annotations": notes}, "status": {}}


def test_the_guards_own_result_value_reads_back() -> None:
    info = node_info(_node({K.loadtest_result: WRITTEN, K.conformance_result: WRITTEN}), K)
    assert (info.loadtest_result, info.conformance_result) == (WRITTEN, WRITTEN)
    assert info.unreadable == ()


@pytest.mark.parametrize("value", FORGED)
@pytest.mark.parametrize("key", [K.loadtest_result, K.conformance_result])
def test_a_result_record_not_in_the_guards_form_is_unreadable(key: str, value: str) -> None:
    """Unreadable: the guard leaves the node as it is with a WARN (plan/unreadable.py) and the
    value is never read as a result."""
    info = node_info(_node({key: value}), K)
    assert (info.loadtest_result, info.conformance_result) == ("", "")
    assert [u.where for u in info.unreadable] == [key]
    assert "failed job/<name> at <RFC 3339 time>" in info.unreadable[0].fix


@pytest.mark.parametrize("value", FORGED)
def test_the_policy_refuses_what_the_reader_refuses(value: str) -> None:
    assert not re.fullmatch(RESULT_FORM.strip("^$"), value)


def test_the_policy_forms_take_every_value_the_guard_writes() -> None:
    assert re.fullmatch(RESULT_FORM.strip("^$"), WRITTEN)
    for items in (("unknown",), ("ipvs-loaded", "ipvs-persist"), ("x" * 51,)):
        value = failed_value(AT, "gng-cf-gpu-a-1a2b3c4d", items)
        assert re.fullmatch(FAILED_FORM.strip("^$"), value), value
    for bad in (f"{AT} job/gng-cf-a none; all fine", f"{AT} job/gng-cf-a ok\nforged", "soon"):
        assert not re.fullmatch(FAILED_FORM.strip("^$"), bad)


def test_an_archive_stores_no_escape_bytes() -> None:
    """The one writer of archives escapes what is not printable; a guard line is unchanged."""
    line = f"{AT} xid-79 0000:99:00.0 GPU-1a2b gpu-node-guard"
    text = f"{line}\nnote \x1b[2J\x07 cleared\u202e\tok\n"
    stored = ledger_store.archive_text(text)
    assert stored == f"{line}\nnote \\x1b[2J\\x07 cleared\\u202e\tok\n"
    assert all(c.isprintable() or c in "\t\n" for c in stored)
    assert ledger_store.archive_text(f"{line}\n") == f"{line}\n"


UID = "0b9c6d1e-0000-4000-8000-000000000001"
T0 = "2026-09-21T06:00:00Z"
LINKS = (RecordedLink("0000:2a:00.0", "32GT/s,x16"), RecordedLink("0000:18:00.0", "16GT/s,x8"))


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (
            checked_boot_value("boot-2", T0, "job/gng-cf-b-1a2b3c4d"),
            f"boot-2 {T0} job/gng-cf-b-1a2b3c4d",
        ),
        (links_value(LINKS), "0000:18:00.0=16GT/s,x8 0000:2a:00.0=32GT/s,x16"),
        (
            failed_value(T0, "gng-cf-b-1a2b3c4d", ("ipvs-loaded", "ipvs-persist")),
            f"{T0} job/gng-cf-b-1a2b3c4d ipvs-loaded,ipvs-persist",
        ),
        (
            job_record_value("gng-lt-b-1a2b3c4d", UID, "0" * 16),
            f"gng-lt-b-1a2b3c4d {UID} {'0' * 16}",
        ),
        (cancel_value("", "GPU-1a", 79, T0), f"unknown GPU-1a xid-79 {T0}"),
        (reason_cancel_value("boot-2", "nvml-mismatch", T0), f"boot-2 - nvml-mismatch {T0}"),
    ],
)
def test_each_annotation_value_is_written_in_its_form(value: str, written: str) -> None:
    assert value == written


def test_the_claim_fence_jobs_and_fence_records_read_back_and_refuse_other_forms() -> None:
    k = Annotations("p/")
    notes = {
        k.loadtest_claim: claim_record_value("gng-lt-b-1", UID),
        k.fence_jobs: f"{UID} {UID}",
        k.fence: fence_value("fenced", "b-1", "2026-01-01T00:00:00Z", "gng-fn-a-1"),
    }
    problems = Problems("b", notes, k.prefix)
    assert problems.parsed(k.loadtest_claim, parse_claim) == ClaimRecord("gng-lt-b-1", UID)
    assert problems.parsed(k.fence_jobs, parse_fence_jobs) == (UID, UID)
    assert problems.parsed(k.fence, parse_fence).state == "fenced"  # type: ignore[union-attr]
    assert problems.found == []
    bad = {
        k.loadtest_claim: "gng-lt-b-1",
        k.fence_jobs: "gng-fn-a-1",
        k.fence: "maybe b-1 2026-01-01T00:00:00Z job/x",
    }
    problems = Problems("b", bad, k.prefix)
    got = [problems.parsed(k.loadtest_claim, parse_claim)]
    got += [problems.parsed(k.fence_jobs, parse_fence_jobs), problems.parsed(k.fence, parse_fence)]
    assert got == [None, None, None]
    assert [u.where for u in problems.found] == [k.loadtest_claim, k.fence_jobs, k.fence]


def test_items_are_short_words_and_fence_jobs_keep_each_uid_once() -> None:
    assert (is_item("ipvs-loaded"), is_item("Ipvs loaded"), is_item("x" * 52)) == (
        True,
        False,
        False,
    )
    assert fence_jobs_value(("a", "b"), "c") == "a b c"
    assert fence_jobs_value(("a", "b"), "b") == "a b"
