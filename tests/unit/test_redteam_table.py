"""The red-team table (tests/redteam_table.py) and its copy in docs/security.md agree, and the
table is one a real request can hold to: every refusal names RBAC or a policy that exists, with
its words; every identity walks every surface; a test it cites exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests import redteam_table as table
from tests.pysource import parse

ROOT = Path(__file__).resolve().parents[2]
POLICIES = {
    doc["metadata"]["name"]
    for path in (ROOT / "policies").glob("*.yaml")
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
    if doc and doc.get("kind") == "ValidatingAdmissionPolicy"
}
# The cluster admin is root-equivalent (docs/security.md): her rows are where a policy holds
# even her, or where she is the one who may.
EVERYONE_BUT_ROOT = set(table.WHO_SAYS) - {"cluster-admin"}


def test_the_docs_quote_the_table_as_it_is() -> None:
    quoted = table.quoted(table.DOC.read_text(encoding="utf-8"))
    assert quoted is not None, "docs/security.md lost the red-team table's markers"
    assert quoted == table.render(), "run `python -m tests.redteam_table write`"


def test_write_replaces_only_the_quoted_table(tmp_path: Path) -> None:
    doc = tmp_path / "security.md"
    doc.write_text(f"before\n{table.BEGIN}\n| stale |\n{table.END}\nafter\n", encoding="utf-8")
    table.write(doc)
    assert doc.read_text(encoding="utf-8") == f"before\n{table.render()}after\n"


def test_rows_are_one_each_and_say_who_refuses() -> None:
    assert len({r.id for r in table.ROWS}) == len(table.ROWS)
    for row in table.ROWS:
        assert row.who in table.WHO_SAYS, row
        assert row.why, row
        if row.allowed:
            assert not row.by and not row.words, row
        elif row.by != table.RBAC:
            assert row.by in POLICIES and row.words, row


def test_every_identity_walks_every_surface() -> None:
    for surface in (table.SETTINGS, table.LEASE, table.FENCE, table.CLAIM, table.RULE):
        walked = {r.who for r in table.ROWS if r.surface == surface}
        assert walked >= EVERYONE_BUT_ROOT, (surface, EVERYONE_BUT_ROOT - walked)
    assert {r.tier for r in table.ROWS if r.surface in (table.CLAIM, table.RULE)} == {"dra"}


def test_no_row_is_a_known_gap_unless_it_says_why() -> None:
    gaps = [r for r in table.ROWS if r.known_gap]
    assert all(r.allowed for r in gaps), gaps  # a gap is something that gets through
    assert gaps == []  # none today: docs/security.md says so


@pytest.mark.parametrize("row", [r for r in table.ROWS if r.proved_by], ids=lambda r: r.id)
def test_a_cited_test_exists(row: table.Row) -> None:
    path, name = row.proved_by.split("::")
    tree = parse((ROOT / path).read_text(encoding="utf-8"))
    assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, row


def _row(allowed: bool, by: str = "", words: str = "") -> table.Row:
    return table.Row("apiserver", "guard-token", "s", "a", allowed, by, words, "why")


@pytest.mark.parametrize(
    ("row", "status", "message", "matches"),
    [
        (_row(True), 0, "", True),
        (_row(True), 403, "forbidden", False),
        (_row(False, table.RBAC), 403, "forbidden", True),
        (_row(False, table.RBAC), 0, "", False),
        (_row(False, table.RBAC), 422, "ValidatingAdmissionPolicy 'p' denied", False),
        (_row(False, "p", "its words"), 422, "ValidatingAdmissionPolicy 'p': its words", True),
        (_row(False, "p", "its words"), 422, "ValidatingAdmissionPolicy 'q': its words", False),
        (_row(False, "p", "its words"), 422, "ValidatingAdmissionPolicy 'p': other", False),
        (_row(False, "p", "its words"), 403, "ValidatingAdmissionPolicy 'p': its words", False),
        (_row(False, "p", "its words"), 0, "", False),
    ],
)
def test_a_row_holds_only_its_own_answer(
    row: table.Row, status: int, message: str, matches: bool
) -> None:
    assert (table.mismatch(row, status, message) == "") is matches
