"""How the conformance runner words real outcomes: output, failures, missing programs, hangs.

The process mechanics (group kill, escaped children) are tested in test_hostexec.py.
"""

from __future__ import annotations

import pytest

from guard.conformance.runner import SubprocessRunner

RUN = SubprocessRunner(timeout_s=5.0)


@pytest.mark.parametrize(
    ("argv", "ok", "missing", "described"),
    [
        pytest.param(("sh", "-c", "echo 5.15.0-179-generic"), True, False, "", id="success"),
        pytest.param(
            ("sh", "-c", "echo first >&2; echo 'FATAL: Module ip_vs not found' >&2; exit 1"),
            False,
            False,
            "exited 1: FATAL: Module ip_vs not found",
            id="non-zero-exit-names-last-stderr-line",
        ),
        pytest.param(
            ("no-such-program-here", "--version"),
            False,
            True,
            "`no-such-program-here` could not start: No such file or directory",
            id="missing-program",
        ),
        pytest.param(("sh", "-c", "exit 127"), False, True, "exited 127", id="exit-127-is-missing"),
    ],
)
def test_run(argv: tuple[str, ...], ok: bool, missing: bool, described: str) -> None:
    result = RUN.run(argv)
    assert (result.ok, result.missing, result.argv) == (ok, missing, argv)
    if ok:
        assert result.stdout == "5.15.0-179-generic\n"
    else:
        assert described in result.describe_failure()


def test_prefix_runs_before_the_command_and_is_not_reported() -> None:
    result = SubprocessRunner(5.0, prefix=("env", "CHECK=prefixed")).run(
        ("sh", "-c", "echo $CHECK")
    )
    assert (result.ok, result.stdout, result.argv) == (
        True,
        "prefixed\n",
        ("sh", "-c", "echo $CHECK"),
    )


def test_hang_becomes_an_error_not_an_exception() -> None:
    result = SubprocessRunner(timeout_s=0.2).run(("sleep", "30"))
    assert (result.ok, result.returncode, result.error) == (
        False,
        None,
        "`sleep 30` timed out after 0.2 s",
    )
