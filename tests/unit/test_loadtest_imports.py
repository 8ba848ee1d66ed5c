"""The load-test command on a base install: neither numpy nor torch (nor the Kubernetes client).

Each case runs a fresh interpreter in which those packages cannot be imported, as in a venv that
has only the package's own dependencies, so an import at module level anywhere on the path fails.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Block the packages the way a missing install looks: `import numpy` raises ImportError and
# importlib.util.find_spec("numpy") answers None.
BLOCK = "import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
LOADTEST_MAIN = "from guard.loadtest.cli import loadtest\nloadtest(prog_name='loadtest')\n"
GUARD_MAIN = "from guard.cli import main\nmain()\n"


def run_without(
    blocked: tuple[str, ...], main: str, *args: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", BLOCK.format(blocked=blocked) + main, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("main", "blocked", "args", "shown"),
    [
        pytest.param(
            GUARD_MAIN, ("numpy", "torch"), ["loadtest", "--help"], "  run ", id="guard-loadtest"
        ),
        pytest.param(
            GUARD_MAIN,
            ("numpy", "torch"),
            ["loadtest", "run", "--help"],
            "--expected-gpus",
            id="guard-loadtest-run",
        ),
        # `python -m guard.loadtest`, as in hack/gpu-check.sh: no Kubernetes client on that path.
        pytest.param(
            LOADTEST_MAIN,
            ("numpy", "torch", "kubernetes"),
            ["run", "--help"],
            "--expected-gpus",
            id="module-run",
        ),
    ],
)
def test_help_works_without_numpy_and_torch(
    main: str, blocked: tuple[str, ...], args: list[str], shown: str
) -> None:
    done = run_without(blocked, main, *args)
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout, done.stdout


@pytest.mark.parametrize(
    "backend_args",
    [pytest.param([], id="default"), pytest.param(["--backend", "torch"], id="torch")],
)
def test_missing_torch_is_one_line_and_exit_1(backend_args: list[str]) -> None:
    args = ["run", *backend_args, "--expected-gpus", "1", "--duration-s", "0.1"]
    done = run_without(("numpy", "torch", "kubernetes"), LOADTEST_MAIN, *args)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: ") and "Python package 'torch'" in lines[0], lines
