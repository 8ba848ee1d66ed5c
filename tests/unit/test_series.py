"""What the read stage and the planners both say of Prometheus series (guard/codec/series.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from guard.codec.series import on_step, shown


def test_the_step_grid_and_a_refused_value_as_shown() -> None:
    assert on_step(datetime(2026, 9, 21, 5, 55, 46, tzinfo=UTC), 60).strftime("%H:%M:%S") == (
        "05:55:00"
    )
    assert shown("GPU-1\nforged") == "'GPU-1\\nforged'"
    assert shown("x" * 300)[-17:] == "…(300 characters)"
