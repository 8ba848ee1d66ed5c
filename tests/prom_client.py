"""The PromClient the tests query with: `vector` raises on an answer's first bad series (the
guard itself blames a bad series on its node: guard.read.prom_view)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from guard.doors import prom


class PromClient(prom.PromClient):
    def vector(
        self, name: str, promql: str, at: datetime | None, required: Iterable[str] = ()
    ) -> tuple[prom.Sample, ...]:
        return strict(name, self.checked(name, promql, at, required))


def strict(name: str, got: prom.Checked[Any]) -> tuple[Any, ...]:
    if got.bad:
        first = got.bad[0]
        value = f" {first.value}" if first.value else ""
        labels = prom._brief(dict(first.labels))
        raise prom.PromError(f"query {name}: {first.why}{value} for {labels}")
    return got.good
