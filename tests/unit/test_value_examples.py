"""The small value functions of guard/ on their edge cases: PCI spellings, object and label names,
ledger lines and times, log values, GPU classes, Xid classes, Job labels."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from guard.actions import event_name
from guard.files import depth, first_line
from guard.gpu_classes import ClassError, kept_label_keys, majority, parse_classes
from guard.jobs import job_name, node_label
from guard.ledger import Counts, LedgerEntry, history, parse_ledger, parse_line, parse_time
from guard.log import format_line, format_value, printable, redact
from guard.model import rebooted
from guard.names import (
    Annotations,
    is_dns_label,
    is_dns_subdomain,
    is_label_pair,
    ledger_archive_pattern,
)
from guard.pci import link_record, normalize_pci
from guard.runbook import PUBLISHED_URL, Hint, Section, alert_anchor, url
from guard.states import STATES, Decision, anchored, as_reason
from guard.xid_tables import Repair, XidClasses

LINE = "0000:99:00.0 GPU-1a2b manual"


def test_pci_addresses_in_every_spelling_read_as_sysfs() -> None:
    assert normalize_pci("00000000:99:00.0") == "0000:99:00.0"  # dcgm-exporter
    assert normalize_pci("0000:99:00") == "0000:99:00.0"  # a kernel Xid line
    assert normalize_pci("0000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci("99:00.0") == "0000:99:00.0"
    assert link_record("0000:18:00.0=16GT/s,x16") == ("0000:18:00.0", "16GT/s,x16")
    assert link_record("0000:18:00.0=3GT/s,x16") is None


def test_names_and_labels() -> None:
    assert (is_dns_label("gpu-node-guard"), is_dns_label("Bad_NS"), is_dns_label("a" * 64)) == (
        True,
        False,
        False,
    )
    assert is_dns_subdomain("gpu-node-guard.io")
    assert not is_dns_subdomain("gpu_node") and not is_dns_subdomain("")
    assert is_label_pair("nvidia.com/gpu.present=true")
    assert not is_label_pair("gpu") and not is_label_pair("a=b c")


def test_a_node_label_is_the_name_or_its_head_and_digest() -> None:
    assert node_label("gpu-node-b") == "gpu-node-b"
    long = "n" * 92
    assert node_label(long) == "n" * 54 + "-" + hashlib.sha256(long.encode()).hexdigest()[:8]
    assert len(node_label("n" * 253)) == 63


def test_ledger_lines_and_times() -> None:
    at = datetime(2026, 9, 21, 5, 52, 44, tzinfo=UTC)
    forged = LedgerEntry("n", at, 79, "0000:99:00.0", "GPU-1a2b\nforged", "manual")
    with pytest.raises(
        ValueError, match=r"^not a ledger line: 'GPU-1a2b\\nforged' as the GPU UUID"
    ):
        forged.format()
    assert parse_time("2026-09-21T14:52:44+09:00") == at
    with pytest.raises(ValueError, match=r"^time out of range \(years 1970-9998\)$"):
        parse_time("9999-12-31T23:59:59-23:59")
    with pytest.raises(ValueError, match=r"^not a valid time \(month must be in 1\.\.12\)$"):
        parse_time("2026-13-45T99:00:00Z")
    assert parse_line("b", f"2026-09-10T13:03:59Z xid-79 {LINE}").entry.xid == 79  # type: ignore[union-attr]
    assert parse_line("b", "power cycled by infra 9/22").problem == "not a ledger line"
    old = parse_line("b", f"0001-01-01T00:00:00+01:00 xid-79 {LINE}")
    assert old.problem == "time out of range (years 1970-9998)"
    arabic = parse_line("b", f"2026-09-10T13:03:59Z xid-٧٩ {LINE}")
    assert arabic.problem == "Xid '٧٩' is not an ASCII number"
    assert [(ln.node, ln.problem) for ln in parse_ledger({"b": 7})] == [("b", "value is not text")]
    assert history(Counts(3, 3, None)).value == "replace-card"
    assert history(Counts(1, 3, None)).value == "check-slot"


def test_log_values_stay_on_one_line_and_hide_credentials() -> None:
    assert printable("xid-79\ngpu-b  cordoned\x1b[2J") == "xid-79\\ngpu-b  cordoned\\x1b[2J"
    shown = [format_value(v) for v in ("a b", 600, True, 'x"y', "xid-79\nforged")]
    assert shown == ['"a b"', "600", "true", '"x\\"y"', '"xid-79\\nforged"']
    fields = {"node": "gpu-17", "reason": "hold", "detail": None, "held_s": 60}
    assert format_line("skip", fields) == "skip node=gpu-17 reason=hold held_s=60"
    assert redact("X-Scope-OrgID=team-a,X-Api-Key=s3cr3t") == (
        "X-Scope-OrgID=team-a,X-Api-Key=<redacted>"
    )
    assert redact("Cookie: a=b") == "Cookie: <redacted>"
    assert redact("Proxy-Authorization: Basic dXNlcjpwdw==") == "Proxy-Authorization: <redacted>"


def test_gpu_classes() -> None:
    found = parse_classes("pool=a,gpu!=none:8; pool=b:auto")
    assert [(c.selector, c.count) for c in found] == [("pool=a,gpu!=none", 8), ("pool=b", None)]
    with pytest.raises(ClassError, match=r"^entry 'pool=a': must be <selector>:<count> \(a number"):
        parse_classes("pool=a")
    assert (majority([8, 8, 8, 7]), majority([8, 7]), majority([8]), majority([8, 8])) == (
        8,
        None,
        None,
        8,
    )
    assert sorted(kept_label_keys("pool=a,gpu!=none:8; big:auto", "")) == ["big", "gpu", "pool"]
    assert sorted(kept_label_keys("pool=a:8", "example.com/rack")) == ["example.com/rack", "pool"]


def test_small_helpers() -> None:
    assert XidClasses({79: Repair.POWER_CYCLE}).verdict_of(13) is Repair.HUMAN
    classes = XidClasses({79: Repair.POWER_CYCLE, 94: Repair.RESET, 143: Repair.RMA})
    assert classes.isolating() == (79, 143)
    assert (rebooted("boot-1", "boot-2"), rebooted("", "boot-2"), rebooted("boot-1", "")) == (
        True,
        False,
        False,
    )
    assert (depth({"a": [1, {"b": []}]}), depth(3)) == (4, 0)
    cut = first_line(ValueError("bad value at line 3\nnext"), 9, "…")
    assert (cut, first_line(ValueError())) == ("bad value…", "ValueError")


def test_names_the_guard_makes_never_change() -> None:
    """Object names are found again by the next run and the next release: fixed values."""
    assert job_name("loadtest", "gpu-node-b", "boot-1") == "gng-lt-gpu-node-b-a011f911"
    assert event_name("gpu-17", "GuardCordoned", "2026-09-21T05:55:00Z") == (
        "gpu-17.gng-edbda522588496fc"
    )
    assert ledger_archive_pattern("ledger") == "^ledger-archive-[1-9][0-9]{0,5}$"
    assert Annotations("gpu-node-guard.io/").reason == "gpu-node-guard.io/auto-cordon-reason"


def test_decision_words_and_their_runbook_links() -> None:
    assert Decision("same-boot") is Decision.SAME_BOOT
    assert (as_reason("xid-79"), as_reason("maybe")) == ("xid-79", None)
    assert STATES["same-boot"] is Section.WAITING_FOR_POWER_CYCLE
    assert anchored("checked again next cycle", "gpu-count") == (
        f"checked again next cycle ({PUBLISHED_URL}#return-condition-not-met)"
    )
    assert anchored("stays cordoned", "a-new-word") == "stays cordoned"
    base = "https://git.example.com/ops/guard/docs/runbook.md"
    assert url(base, "gpunodeguardnotrunning") == f"{base}#gpunodeguardnotrunning"
    assert alert_anchor("GPUNodeGuardReturned") == "gpunodeguardreturned"
    hint = Hint("stays cordoned", Section.BREAKER_OPEN)
    assert hint.at("https://wiki.example/runbook") == (
        "stays cordoned (https://wiki.example/runbook#breaker-open)"
    )
