"""The shape of guard/: its top-level units (a flat module or a subpackage) and the distinct
unit-to-unit imports between them, read from the source (static: every import, lazy ones too),
and the guard modules `import guard.cli` loads (the CronJob's `run` start).

Usage: python hack/import_graph.py [--pairs]   (from the repository root)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GUARD = REPO / "guard"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """guard.plan.isolation → guard.plan; guard.cli → guard.cli."""
    return ".".join(module.split(".")[:2])


def imports(path: Path) -> set[str]:
    """The guard modules `path` imports (a `from guard.x import y` names guard.x)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("guard")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "guard":
                out |= {f"guard.{a.name}" for a in node.names}
            elif node.module.startswith("guard."):
                out.add(node.module)
    return out


def graph() -> tuple[set[str], set[tuple[str, str]]]:
    units: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for path in sorted(GUARD.rglob("*.py")):
        here = unit(module_name(path))
        if here in ("guard", "guard.__main__"):
            continue
        units.add(here)
        pairs |= {(here, unit(m)) for m in imports(path) if unit(m) not in (here, "guard")}
    return units, pairs


def loaded_by_cli() -> list[str]:
    code = "import sys, guard.cli; print(*sorted(m for m in sys.modules if m.startswith('guard')))"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    out.check_returncode()
    return out.stdout.split()


def main() -> None:
    units, pairs = graph()
    loaded = loaded_by_cli()
    print(f"top-level units: {len(units)}")
    print(f"distinct unit-to-unit imports: {len(pairs)}")
    print(f"guard modules loaded by `import guard.cli`: {len(loaded)}")
    if "--pairs" in sys.argv:
        for a, b in sorted(pairs):
            print(f"  {a} -> {b}")


if __name__ == "__main__":
    main()
