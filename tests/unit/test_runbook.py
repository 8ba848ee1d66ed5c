"""docs/runbook.md has a section at every stable anchor: each node state, condition and alert."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guard import runbook
from guard.generate import alert_queries, alerts
from guard.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "runbook.md"


def github_slug(heading: str) -> str:
    """The anchor GitHub (and most renderers) give a heading.

    >>> github_slug("Waiting for `reset-done`")
    'waiting-for-reset-done'
    >>> github_slug("Returned in the last 24 h")
    'returned-in-the-last-24-h'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings() -> list[str]:
    text = RUNBOOK.read_text(encoding="utf-8")
    text = re.sub(
        r"```.*?```", "", text, flags=re.S
    )  # a `#` comment in a shell block is no heading
    return [github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)]


def _alert_names() -> list[str]:
    groups = alerts.rule_groups(Settings(), alert_queries.AlertParams())
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def test_headings_have_unique_anchors() -> None:
    slugs = _headings()
    assert len(slugs) == len(set(slugs)), [s for s in slugs if slugs.count(s) > 1]


@pytest.mark.parametrize("anchor", list(runbook.Section), ids=str)
def test_every_state_and_condition_has_its_section(anchor: runbook.Section) -> None:
    assert anchor.value in _headings()
    assert f"`{anchor.value}`" in RUNBOOK.read_text(encoding="utf-8")  # in the anchor table


@pytest.mark.parametrize("alert", _alert_names())
def test_every_alert_has_its_section(alert: str) -> None:
    assert runbook.alert_anchor(alert) in _headings()
    assert f"`{runbook.alert_anchor(alert)}`" in RUNBOOK.read_text(encoding="utf-8")


def test_every_runbook_url_of_the_shipped_rules_resolves_to_a_heading() -> None:
    groups = alerts.rule_groups(Settings(), alert_queries.AlertParams())
    for rule in (r for g in groups for r in g["rules"] if "alert" in r):
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == Settings().runbook_base_url, rule["alert"]
        assert base.endswith("/blob/main/docs/runbook.md") and anchor in _headings(), rule["alert"]
