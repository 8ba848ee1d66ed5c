"""Ledger archiving decisions: which lines move, and how archives and ledger read back as one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from guard.doors import ledger_store

START = datetime(2025, 1, 1, tzinfo=UTC)


def guard_line(i: int) -> str:
    at = (START + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{at} xid-79 0000:99:00.0 GPU-{i:08x}-0000-0000-0000-000000000000 gpu-node-guard"


def full() -> dict[str, str]:
    """10,810 incidents of 97 bytes over 100 nodes: the ledger that jammed at 1 MiB."""
    data: dict[str, str] = {}
    for i in range(10_810):
        node = f"gpu-{(i * 37) % 100:03d}"  # interleaved: each node's text is in time order
        data[node] = data.get(node, "") + guard_line(i) + "\n"
    return data


def test_the_oldest_lines_move_until_the_ledger_is_under_the_target():
    data = full()
    assert ledger_store.size_of(data) > 1_048_576
    split = ledger_store.split_oldest(data, 384 * 1024)
    assert ledger_store.size_of(split.keep) <= 384 * 1024
    kept = sorted(r for t in split.keep.values() for r in t.splitlines())
    moved = sorted(r for t in split.moved.values() for r in t.splitlines())
    assert len(kept) + len(moved) == 10_810 == split.lines + len(kept)
    assert max(moved) < min(kept), "every moved line is older than every kept one"


def test_a_note_moves_with_the_incident_it_follows():
    data = {"a": f"{guard_line(0)}\npower cycled by infra 9/22\n{guard_line(5)}\n"}
    split = ledger_store.split_oldest(data, 100)
    assert split.moved == {"a": f"{guard_line(0)}\npower cycled by infra 9/22\n"}
    assert split.keep == {"a": f"{guard_line(5)}\n"}


def test_archives_and_ledger_read_back_as_one_ledger_with_nothing_counted_twice():
    data = full()
    split = ledger_store.split_oldest(data, 384 * 1024)
    archive = {"metadata": {"name": "gpu-fault-ledger-archive-1"}, "data": split.moved}
    # A run stopped after writing the archive and before shrinking the ledger: both hold them.
    lines = ledger_store.ledger_lines(data, [archive])
    assert lines == ledger_store.ledger_lines(split.keep, [archive])
    assert len(lines) == 10_810
    assert sorted({line.node for line in lines}) == sorted(data)


def test_an_archive_is_known_by_its_ledgers_name_and_its_number():
    assert ledger_store.archive_index("gpu-fault-ledger", "gpu-fault-ledger-archive-12") == 12
    assert ledger_store.archive_index("gpu-fault-ledger", "other-archive-1") is None


def test_an_archives_lines_come_first_and_a_line_in_both_counts_once():
    line = "2026-01-01T00:00:00Z xid-79 0000:01:00.0 GPU-1 manual"
    archive = {"metadata": {"name": "l-archive-1"}, "data": {"a": f"{line}\n"}}
    found = ledger_store.ledger_lines({"a": f"note\n{line}\n"}, [archive])
    assert [ln.raw for ln in found] == [line, "note"]
