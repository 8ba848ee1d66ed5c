"""`gpu-node-guard run` loads the guard, not its Job programs: the guard and the programs share
only guard.wire (what a Job reports back) and the Xid tables (guard.xid_tables).

Each case is a fresh interpreter; the count is of the guard's own modules it loaded.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

MAX_MODULES = 64  # 55; guard.figures, guard.plan.budget, .units, .return_rule; the node triggers
JOB_PROGRAMS = ("guard.conformance", "guard.evidence", "guard.loadtest", "guard.agent")
SHOW = "import sys\nprint(*sorted(m for m in sys.modules if m.split('.')[0] == 'guard'))\n"
CASES = {
    "import guard.cli": "import guard.cli\n" + SHOW,
    "gpu-node-guard run --help": (
        "from guard.cli import cli\n"
        "try:\n    cli(['run', '--help'], prog_name='gpu-node-guard')\n"
        "except SystemExit:\n    pass\n" + SHOW
    ),
}


def loaded(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.splitlines()[-1].split()


@pytest.mark.parametrize("case", list(CASES))
def test_run_loads_no_job_program(case: str) -> None:
    modules = loaded(CASES[case])
    assert "guard.plan" in modules  # the count is of a real start
    programs = [m for m in modules if m.startswith(JOB_PROGRAMS)]
    assert programs == []
    assert len(modules) <= MAX_MODULES, modules


def test_the_job_programs_read_the_same_wire_module() -> None:
    """The other side: each Job program writes its summary with guard.wire."""
    import guard.cli_options
    import guard.conformance.cli
    import guard.evidence.cli
    import guard.fence.cli
    import guard.loadtest.cli
    import guard.wire

    assert guard.cli_options.write_termination_message is guard.wire.write_termination_message
    programs = (guard.conformance.cli, guard.evidence.cli, guard.fence.cli, guard.loadtest.cli)
    for program in programs:
        assert program.write_summary is guard.cli_options.write_summary
