"""The docs state the Prometheus requests of a cycle as the code sends them: one request per
query of `guard.codec.queries.guard_queries` (`read_prom`; tests/prometheus/test_example.py checks
the `prometheus_requests` count against a real Prometheus)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guard.codec.queries import guard_queries
from guard.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
STATED = re.compile(r"\b(\d+) Prometheus requests per cycle\b")
# Where the current count is written; older measured runs keep their own counts, marked as such.
STATES_IT = ("README.md", "docs/benchmarks.md", "docs/node-signals.md")


def sent() -> int:
    return len(guard_queries(Settings()))


@pytest.mark.parametrize("doc", STATES_IT)
def test_the_doc_states_the_requests_a_cycle_sends(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    found = [int(n) for n in STATED.findall(" ".join(text.split()))]
    assert found, f"{doc} no longer says '<n> Prometheus requests per cycle'"
    assert set(found) == {sent()}, f"{doc} says {found}; a cycle sends {sent()}"


def test_no_doc_states_another_count() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    wrong = {
        p.name: n
        for p in docs
        for n in map(int, STATED.findall(" ".join(p.read_text(encoding="utf-8").split())))
        if n != sent()
    }
    assert wrong == {}
