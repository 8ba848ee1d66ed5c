"""Log lines: text and JSON come from the same fields; JSON keeps types and never reuses a key."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

from guard.actions import Cordon, EmitEvent, Skip
from guard.log import DECISION_LINES, Log

CLOCK = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)


def lines(fmt: str, write) -> list[str]:
    out = io.StringIO()
    write(Log(fmt, out, CLOCK))  # type: ignore[arg-type]
    return out.getvalue().splitlines()


def test_text_and_json_lines_agree():
    skip = Skip("gpu-node-b", "hold", 'card "swap" pending', "a person removes hold")
    assert lines("text", lambda log: log.emit(*skip.log_line())) == [
        "2026-09-21T05:55:00Z INFO skip node=gpu-node-b reason=hold "
        'detail="card \\"swap\\" pending" next="a person removes hold '
        '(https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#held-by-a-person)"'
    ]
    (js,) = lines("json", lambda log: log.emit(*skip.log_line()))
    assert json.loads(js) == {
        "time": "2026-09-21T05:55:00Z",
        "level": "INFO",
        "event": "skip",
        "node": "gpu-node-b",
        "reason": "hold",
        "detail": 'card "swap" pending',
        "next": "a person removes hold (https://github.com/gpu-node-guard/gpu-node-guard/blob/main/docs/runbook.md#held-by-a-person)",
    }


def test_a_hint_links_the_sites_runbook():
    """The same line with GUARD_RUNBOOK_BASE_URL set: the `next=` link is the site's, absolute."""
    skip = Skip("gpu-node-b", "hold", "", "a person removes hold")
    out = io.StringIO()
    Log("json", out, CLOCK, runbook_base_url="https://wiki.site.test/runbook").emit(
        *skip.log_line()
    )
    assert json.loads(out.getvalue())["next"] == (
        "a person removes hold (https://wiki.site.test/runbook#held-by-a-person)"
    )


def test_json_values_keep_their_types():
    cordon = Cordon("gpu-17", "xid-79", "7", (), "0000:99:00.0", 600, "job/e")
    (js,) = lines("json", lambda log: log.emit(*cordon.log_line()))
    record = json.loads(js)
    assert record["held_s"] == 600 and isinstance(record["held_s"], int)
    (done,) = lines("json", lambda log: log.event("done", applied=3, failed=0, elapsed_s=0.25))
    assert json.loads(done) | {"time": "t"} == {
        "time": "t",
        "level": "INFO",
        "event": "done",
        "applied": 3,
        "failed": 0,
        "elapsed_s": 0.25,
    }


def test_an_events_reason_does_not_overwrite_the_log_event():
    event = EmitEvent("gpu-17", "xid-79", "Warning", "GuardCordoned", "cordoned")
    (js,) = lines("json", lambda log: log.emit(*event.log_line()))
    record = json.loads(js)
    assert (record["event"], record["event_reason"]) == ("event", "GuardCordoned")
    (text,) = lines("text", lambda log: log.emit(*event.log_line()))
    assert text.endswith(
        "event node=gpu-17 reason=xid-79 type=Warning event_reason=GuardCordoned message=cordoned"
    )


def test_dry_run_lines_say_would_in_text_and_carry_a_flag_in_json():
    cordon = Cordon("gpu-17", "xid-79", "7", (), "0000:99:00.0", 600, "job/e")
    (text,) = lines("text", lambda log: log.emit(*cordon.log_line(), dry_run=True))
    assert " INFO dry-run would cordon node=gpu-17 reason=xid-79 " in text
    (js,) = lines("json", lambda log: log.emit(*cordon.log_line(), dry_run=True))
    record = json.loads(js)
    assert (record["event"], record["dry_run"], record["node"]) == ("cordon", True, "gpu-17")
    assert not any(key.startswith("would") for key in record)


@pytest.mark.parametrize("key", ["event", "time", "level", "dry_run"])
def test_a_field_may_not_take_a_key_the_line_owns(key):
    with pytest.raises(ValueError, match="reserved"):
        lines("json", lambda log: log.emit("skip", {key: "x"}))


@pytest.mark.parametrize("level", ["WARNING", "warn", "DEBUG"])
def test_a_line_has_one_of_three_level_words(level):
    """INFO, WARN, ERROR in every program (the guard, its Jobs, the node agent): a grep for
    ``WARN`` finds every warning."""
    with pytest.raises(ValueError, match="not one of ERROR, INFO, WARN"):
        lines("text", lambda log: log.emit("agent-check", {"node": "n"}, level))


def test_decisions_beyond_the_first_of_their_kind_become_one_summary_line():
    def write(log: Log) -> None:
        for i in range(DECISION_LINES + 5):
            log.decision(*Skip(f"n{i:02d}", "already-cordoned", "", "nothing").log_line())
        log.decision(*Skip("h", "hold", "", "a person").log_line())
        log.decision(*Skip("w", "already-cordoned", "", "look", level="WARN").log_line(), "WARN")
        log.summarise()

    out = lines("json", write)
    records = [json.loads(line) for line in out]
    shown = [r["node"] for r in records if r["event"] == "skip"]
    assert shown == [f"n{i:02d}" for i in range(DECISION_LINES)] + ["h", "w"]
    (summary,) = [r for r in records if r["event"] == "summary"]
    assert summary | {"time": "t"} == {
        "time": "t",
        "level": "INFO",
        "event": "summary",
        "of": "skip",
        "reason": "already-cordoned",
        "shown": DECISION_LINES,
        "more": 5,
        "first_not_shown": f"n{DECISION_LINES:02d}",
        "next": "--output json lists every decision",
    }


def test_two_hundred_thousand_skips_make_twenty_one_lines():
    def write(log: Log) -> None:
        for i in range(200_000):
            log.decision("skip", {"node": f"n{i}", "reason": "not-in-api"})
        log.summarise()

    out = lines("text", write)
    assert len(out) == DECISION_LINES + 1
    assert out[-1].endswith(
        "summary of=skip reason=not-in-api shown=20 more=199980 first_not_shown=n20 "
        'next="--output json lists every decision"'
    )


@pytest.mark.parametrize(
    "value", ["xid-79\n2026-09-21T05:55:00Z INFO uncordon node=x", "a\rb", "\x1b[2J"]
)
def test_a_value_with_control_characters_stays_on_its_line(value: str) -> None:
    """A person's annotation or a Prometheus label read into a field cannot forge a log line."""
    skip = Skip("gpu-node-b", "hold", value, "a person removes hold")
    (text,) = lines("text", lambda log: log.emit(*skip.log_line()))
    assert not any(ch in text for ch in "\n\r\x1b")
    (js,) = lines("json", lambda log: log.emit(*skip.log_line()))
    assert json.loads(js)["detail"] == value
