"""The return table: one rule for every unit, its differences written down."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from guard.model import Unit
from guard.names import Annotations
from guard.plan import return_rule, units

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    text = (ROOT / "docs" / "isolation.md").read_text(encoding="utf-8")
    found = re.search(r"^## One return rule, two units\n(.*?)^## ", text, re.M | re.S)
    assert found is not None
    return found.group(1)


def test_every_unit_is_in_the_table_and_every_row_names_a_unit() -> None:
    registered: set[Unit] = {u.name for u in units.UNITS}
    assert {u for row in return_rule.TABLE for u in row.units} == registered
    assert all(return_rule.rows(u) for u in registered)


def test_each_difference_between_the_units_is_documented() -> None:
    """A row that holds for one unit only is a difference: docs/isolation.md names its word."""
    everyone = frozenset(u.name for u in units.UNITS)
    section = _section()
    missing = sorted(
        {row.word for row in return_rule.TABLE if row.units != everyone}
        - set(re.findall(r"`([a-z-]+)`", section))
    )
    assert missing == []


def test_each_units_rows_start_with_the_api_and_reach_prometheus() -> None:
    """status marks a node not-seen once the API rows before the first Prometheus row hold:
    the table's order is what it reads, so each unit has such a row."""
    for unit in ("cordon", "device-taint"):
        reads = [bool(row.reads) for row in return_rule.rows(unit)]  # True: a Prometheus row
        assert True in reads and reads[0] is False


def test_each_unit_names_its_record_and_a_policy_that_bounds_its_writes() -> None:
    """A unit's registration is what the recipe (docs/architecture.md) asks for: a guard
    annotation that records it, and a shipped admission policy on the kind it writes."""
    k = Annotations("example.com/")
    resources = {
        r
        for path in sorted((ROOT / "policies").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc and doc.get("kind") == "ValidatingAdmissionPolicy"
        for rule in doc["spec"]["matchConstraints"].get("resourceRules", [])
        for r in rule.get("resources", [])
    }
    for unit in units.UNITS:
        assert unit.record(k).startswith(k.prefix), unit.name
        assert f"{unit.policy_kind.lower()}s" in resources, unit.name
