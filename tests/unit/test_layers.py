"""guard/ in stages: a unit imports only units of its own stage or of an earlier one.

The order is docs/architecture.md's ("Layout"): the words and facts every stage shares, the doors
to the outside systems, the Job programs (which use nothing else), then read, plan, status (read
and plan, no executor), apply and the programs around them. Static: every import counts, the lazy
ones in functions too (hack/import_graph.py reads the same graph and counts it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.pysource import parse

REPO = Path(__file__).resolve().parents[2]
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "shared words and facts",
        (
            "actions",
            "bundle",
            "cli_options",
            "figures",
            "files",
            "gpu_classes",
            "jobs",
            "ledger",
            "log",
            "metric_names",
            "model",
            "names",
            "pci",
            "runbook",
            "settings",
            "settings_flags",
            "states",
            "wire",
            "xid_tables",
        ),
    ),
    ("doors", ("doors",)),
    (
        "job programs",
        (
            "agent",
            "conformance",
            "evidence",
            "fence",
            "loadtest",
        ),
    ),
    ("the texts read and plan share", ("codec",)),
    ("read", ("read",)),
    ("plan", ("plan",)),
    ("status (read and plan, no executor)", ("status",)),
    ("report (read, the figures, no executor)", ("report",)),
    ("apply", ("apply",)),
    ("the run and its watch", ("run", "returns", "watch")),
    ("generators", ("generate",)),
    ("the command", ("cli",)),
    ("the built-in example", ("example",)),
)
RANK = {f"guard.{unit}": i for i, (_, units) in enumerate(LAYERS) for unit in units}
# Units of the order that still never import each other: a planner is a pure function of the
# Snapshot, so what it shares with the read stage (annotation codecs, PromQL) is in guard.codec.
APART = {("guard.plan", "guard.read")}


def unit_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def module_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[str]:
    out: list[str] = []
    for node in ast.walk(parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "guard":
                out += [f"guard.{a.name}" for a in node.names]
            else:
                out.append(node.module)
    return [name for name in out if name.startswith("guard.")]


def units(root: Path) -> set[str]:
    found = {unit_of(module_of(p, root)) for p in (root / "guard").rglob("*.py")}
    return found - {"guard", "guard.__main__"}


def upward(root: Path) -> list[str]:
    """`module -> import` for each import of a later stage's unit (or of a unit not staged)."""
    found = []
    for path in sorted((root / "guard").rglob("*.py")):
        module = module_of(path, root)
        here = unit_of(module)
        if here in ("guard", "guard.__main__"):
            continue
        for name in imports(path):
            there = unit_of(name)
            if there == here:
                continue
            if here not in RANK or there not in RANK:
                found.append(f"{module} -> {name}: not in LAYERS")
            elif RANK[there] > RANK[here] or (here, there) in APART:
                found.append(f"{module} -> {name}")
    return found


def test_no_unit_imports_a_later_stage() -> None:
    assert upward(REPO) == []


def test_every_top_level_unit_has_a_stage() -> None:
    assert sorted(units(REPO) - set(RANK)) == []


def test_the_check_finds_an_upward_import(tmp_path: Path) -> None:
    for rel, text in {
        "guard/doors/bad.py": "from guard.apply import KubeExecutor\n",
        "guard/read/ok.py": "from guard.doors import kube\nfrom guard import names\n",
        "guard/plan/odd.py": "def later():\n    from guard.apply import push\n",
        "guard/plan/reads.py": "from guard.read.records import parse_record\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert upward(tmp_path) == [
        "guard.doors.bad -> guard.apply",
        "guard.plan.odd -> guard.apply",
        "guard.plan.reads -> guard.read.records",
    ]
