"""The repair figures against the incident write-up's own arithmetic.

tests/fixtures/writeup-episodes.yaml carries the write-up's GPU-hardware episodes as the guard's
records would (its header says where each time comes from). The write-up computes by hand:
  Xid 79, 1st episode   about 4.5 days x 8 GPUs, "about 870 GPU-hours (upper bound)"
  Xid 79, 2nd episode   "about 25 hours from the cordon, about 200 GPU-hours"
  ECC DBE, gpu-node-a   three healthy GPUs cordoned 38 days: "about 2.7 thousand GPU-hours"
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from guard.figures import (
    UNRECORDED,
    Facts,
    Figures,
    Mark,
    MarkKind,
    Unit,
    budget_of,
    figures,
    recurrences,
    week_of,
)
from guard.ledger import LedgerEntry
from guard.read import load_cluster_file
from guard.report.cli import from_objects
from guard.settings import Settings
from guard.xid_tables import Repair, bundled_classes

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "writeup-episodes.yaml"
SINCE = datetime(2026, 8, 1, tzinfo=UTC)
UNTIL = datetime(2026, 10, 18, 5, 22, tzinfo=UTC)  # Oct 18 14:22 KST: day 38 of the cordon
CARD_B = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
CARD_A = "GPU-9f8e7d6c-5b4a-3c2d-1e0f-a9b8c7d6e5f4"


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def writeup() -> Figures:
    facts = from_objects(load_cluster_file(FIXTURE, Settings()), Settings())
    return figures(facts, bundled_classes(), SINCE, UNTIL)


def span_at(f: Figures, node: str, start: str) -> int:
    return next(i for i, s in enumerate(f.spans) if s.node == node and s.start == t(start))


def test_first_xid79_episode_is_the_writeups_870_gpu_hours(writeup: Figures) -> None:
    i = span_at(writeup, "gpu-node-b", "2026-09-10T13:03:59Z")
    span, hours = writeup.spans[i], writeup.per_span[i]
    assert span.isolated(UNTIL) == timedelta(days=4, hours=12, minutes=45, seconds=1)
    assert hours.total == pytest.approx(870.0, abs=0.01)  # 108.75 h x 8
    assert (hours.faulted, hours.healthy) == pytest.approx((108.75, 761.25), abs=0.01)
    assert span.verdict is Repair.POWER_CYCLE and span.closed_by == "cancel"


def test_second_xid79_episode_is_about_200_gpu_hours_from_the_cordon(writeup: Figures) -> None:
    i = span_at(writeup, "gpu-node-b", "2026-09-21T06:05:10Z")
    span, hours = writeup.spans[i], writeup.per_span[i]
    isolated = timedelta(hours=25, minutes=24, seconds=50)  # 9/21 15:05:10 → 9/22 16:30 KST
    assert span.isolated(UNTIL) == isolated
    assert hours.total == pytest.approx(8 * isolated / timedelta(hours=1), abs=1e-6)
    assert round(hours.total, 1) == 203.3 and abs(hours.total - 200) < 5
    assert hours.healthy == pytest.approx(7 * 25.41389, abs=0.01)
    row = next(r for r in writeup.incidents if r.at == t("2026-09-21T05:52:44Z"))
    assert row.onset_to_cordon == timedelta(minutes=12, seconds=26)  # the write-up's 12:26
    assert row.cordon_to_repair == timedelta(hours=25, minutes=19, seconds=50)  # 16:25 met
    assert row.repair_to_return == timedelta(minutes=5)  # 16:25 → 16:30
    assert row.isolated == isolated


def test_gpu_node_a_healthy_neighbours_are_the_writeups_2_7_thousand(writeup: Figures) -> None:
    i = span_at(writeup, "gpu-node-a", "2026-09-10T05:22:00Z")
    span, hours = writeup.spans[i], writeup.per_span[i]
    assert span.end is None and span.isolated(UNTIL) == timedelta(days=38)
    assert hours.healthy == pytest.approx(3 * 38 * 24)  # 2,736 GPU-hours
    assert hours.faulted == pytest.approx(38 * 24)  # the faulted card's own 912
    assert len(span.incidents) == 2  # the 5th DBE (the memtest) came under the same cordon


def test_gpu_resets_without_a_cordon_hold_no_healthy_gpu(writeup: Figures) -> None:
    resets = [
        (s, h) for s, h in zip(writeup.spans, writeup.per_span, strict=True) if s.unit is Unit.GPU
    ]
    assert [s.start for s, _ in resets] == [
        t("2026-08-10T15:36:00Z"),
        t("2026-08-11T13:25:00Z"),
        t("2026-08-14T13:01:00Z"),
    ]
    assert all(h.healthy == 0 and h.faulted > 0 for _, h in resets)


def test_period_and_weeks_add_up(writeup: Figures) -> None:
    assert writeup.hours.total == pytest.approx(sum(h.total for h in writeup.per_span))
    assert sum(h.faulted for _, h in writeup.weeks) == pytest.approx(writeup.hours.faulted)
    assert sum(h.healthy for _, h in writeup.weeks) == pytest.approx(writeup.hours.healthy)
    assert all(w.weekday() == 0 and w.hour == 0 for w, _ in writeup.weeks)


def test_repeat_cards_slots_and_nodes(writeup: Figures) -> None:
    cards = {c.key: c for c in writeup.repeat_cards()}
    assert set(cards) == {CARD_A, CARD_B}
    assert cards[CARD_A].incidents == 5 and cards[CARD_B].incidents == 2
    # The write-up: "11 days later the same card dropped again".
    assert cards[CARD_B].mean_between == timedelta(days=10, hours=16, minutes=48, seconds=45)
    assert cards[CARD_A].last == t("2026-10-12T10:11:00Z")
    assert [(r.key, r.incidents) for r in writeup.slots] == [
        ("gpu-node-a 0000:3b:00.0", 5),
        ("gpu-node-b 0000:99:00.0", 2),
    ]


def test_the_38_day_cordon_is_past_its_budget(writeup: Figures) -> None:
    assert [(o.node, o.verdict, o.age) for o in writeup.over_budget] == [
        ("gpu-node-a", Repair.RESET, timedelta(days=38))
    ]
    generous = figures(
        from_objects(load_cluster_file(FIXTURE, Settings()), Settings()),
        bundled_classes(),
        SINCE,
        UNTIL,
        budget_of(replace(Settings(), budget_reset_h=40 * 24)),
    )
    assert generous.over_budget == ()


def entry(node: str, at: str, xid: int = 79, recorder: str = "gpu-node-guard") -> LedgerEntry:
    return LedgerEntry(node, t(at), xid, "0000:99:00.0", CARD_B, recorder)


def test_a_guard_line_is_its_cordon_and_a_serving_node_closes_nothing_recorded() -> None:
    facts = Facts(
        (entry("n", "2026-09-01T00:00:00Z"), entry("m", "2026-09-01T00:00:00Z", 48, "manual")),
        (Mark("n", t("2026-09-01T10:00:00Z"), MarkKind.RETURN),),
        {"n": 4, "m": 2},
        frozenset({"m"}),
    )
    f = figures(facts, bundled_classes(), t("2026-08-31T00:00:00Z"), t("2026-09-02T00:00:00Z"))
    n, m = f.spans[1], f.spans[0]
    assert (n.cordon, n.end, f.per_span[1].total) == (n.start, t("2026-09-01T10:00:00Z"), 40.0)
    assert (m.closed_by, f.per_span[0].total) == (UNRECORDED, 0.0)
    assert f.incidents[0].isolated is None  # m's length is unknown, not zero


def test_a_period_clips_an_isolation() -> None:
    facts = Facts((entry("n", "2026-09-01T00:00:00Z"),), (), {"n": 2})
    f = figures(facts, bundled_classes(), t("2026-09-02T00:00:00Z"), t("2026-09-03T00:00:00Z"))
    assert (f.hours.faulted, f.hours.healthy) == (24.0, 24.0)
    assert f.over_budget[0].age == timedelta(days=2)  # its age counts from the cordon


def test_recurrence_and_week_helpers() -> None:
    (r,) = recurrences([("k", t("2026-09-03T00:00:00Z")), ("k", t("2026-09-01T00:00:00Z"))])
    assert (r.incidents, r.mean_between, r.last) == (
        2,
        timedelta(days=2),
        t("2026-09-03T00:00:00Z"),
    )
    assert recurrences([("k", t("2026-09-01T00:00:00Z"))])[0].mean_between is None
    assert week_of(t("2026-09-20T23:00:00Z")) == t("2026-09-14T00:00:00Z")


def test_records_after_the_period_end_are_not_yet_made() -> None:
    """`report --at` a past instant: a repair and a return after it did not exist then."""
    facts = Facts(
        (entry("n", "2026-09-01T00:00:00Z"),),
        (
            Mark("n", t("2026-09-05T00:00:00Z"), MarkKind.REPAIR),
            Mark("n", t("2026-09-06T00:00:00Z"), MarkKind.RETURN),
        ),
        {"n": 2},
    )
    until = t("2026-09-02T00:00:00Z")
    (span,) = figures(facts, bundled_classes(), t("2026-08-31T00:00:00Z"), until).spans
    assert (span.repair, span.end, span.closed_by) == (None, None, "")
    (row,) = figures(facts, bundled_classes(), t("2026-08-31T00:00:00Z"), until).incidents
    assert (row.open, row.cordon_to_repair) == (True, None)


def test_a_new_cordon_ends_the_isolation_whose_end_record_it_removed() -> None:
    """A person uncordoned n (cancel record and Event), then the guard cordoned it again: the
    cordon removed the cancel record, and the push reads no Event. The earlier isolation ended
    before this cordon (the guard cordons only a node out of its care): it is closed with its
    end unrecorded, not merged into the cordon in force."""
    first, cancel, again = "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z", "2026-09-10T00:00:00Z"
    lines = (entry("n", first), entry("n", again))
    now = Mark("n", t(again), MarkKind.CORDON, record=True)  # `auto-cordon-at` on the node
    since, until = t("2026-08-31T00:00:00Z"), t("2026-09-11T00:00:00Z")
    pushed = figures(Facts(lines, (now,), {"n": 8}), bundled_classes(), since, until)
    assert [(s.start, s.end, s.closed_by) for s in pushed.spans] == [
        (t(first), t(first), UNRECORDED),
        (t(again), None, ""),
    ]
    assert [h.total for h in pushed.per_span] == [0.0, 8 * 24.0]
    assert [r.isolated for r in pushed.incidents] == [None, timedelta(days=1)]
    # The report within the Event's hour: the cancel closes the first one where it was.
    ended = (now, Mark("n", t(cancel), MarkKind.CANCEL))
    read = figures(Facts(lines, ended, {"n": 8}), bundled_classes(), since, until)
    assert [(s.end, s.closed_by) for s in read.spans] == [(t(cancel), "cancel"), (None, "")]
    # The cordon Event of the cordon in force, re-emitted by a later cycle, ends nothing.
    late = Mark("n", t(again) + timedelta(minutes=5), MarkKind.CORDON)
    (_, other) = figures(
        Facts(lines, (*ended, late), {"n": 8}), bundled_classes(), since, until
    ).spans
    assert (other.start, other.end, len(other.incidents)) == (t(again), None, 1)
