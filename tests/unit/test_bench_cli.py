"""Bad arguments to `python -m bench`: one error line and exit 2 before any server starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bench.__main__ import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--reps", "0"], "Invalid value for '--reps'", id="no-runs"),
        pytest.param(["--reps", "-1"], "Invalid value for '--reps'", id="negative-runs"),
        pytest.param(
            ["--sizes", "a,b"], "not a comma-separated list of node counts", id="sizes-not-numbers"
        ),
        pytest.param(["--sizes", "5"], "each size must be at least 10 nodes", id="size-too-small"),
        pytest.param(
            ["--phase-step", "7"],
            "phase step must be a multiple of 15 s",
            id="phase-step-off-the-grid",
        ),
        pytest.param(["--engines", "nope"], "unknown engine ['nope']", id="unknown-engine"),
    ],
)
def test_bad_arguments_are_one_error_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["--only", "cycle", "--sizes", "10", "--no-api", *args])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2, result.output
    assert len(errors) == 1 and message in errors[0], result.output
