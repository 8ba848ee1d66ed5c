"""Log lines: text and JSON carry the same event and keys."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

from guard.actions import Skip
from guard.log import Log

CLOCK = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)


def test_text_and_json_lines_agree():
    skip = Skip("gpu-node-b", "hold", 'card "swap" pending', "a person removes hold")
    text, js = io.StringIO(), io.StringIO()
    Log("text", text, CLOCK).line(str(skip))
    Log("json", js, CLOCK).line(str(skip))
    assert text.getvalue() == (
        "2026-09-21T05:55:00Z INFO skip node=gpu-node-b reason=hold "
        'detail="card \\"swap\\" pending" next="a person removes hold"\n'
    )
    assert json.loads(js.getvalue()) == {
        "time": "2026-09-21T05:55:00Z",
        "level": "INFO",
        "event": "skip",
        "node": "gpu-node-b",
        "reason": "hold",
        "detail": 'card "swap" pending',
        "next": "a person removes hold",
    }
