"""The one door to Prometheus: instant queries with strict answer validation.

Anything abnormal raises `PromError` with a one-line reason; it never becomes "no candidates".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import requests

Labels = tuple[tuple[str, str], ...]


class PromError(Exception):
    """A Prometheus answer the guard cannot trust; the message is one line."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Labels
    value: float

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")


@dataclass(frozen=True, slots=True)
class Series:
    labels: Labels
    points: tuple[tuple[float, float], ...]

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")


@dataclass
class PromClient:
    """Instant queries against ``<base_url>/api/v1/query`` (POST, so long PromQL fits)."""

    base_url: str
    timeout_s: float = 10.0
    bearer_token: str = ""
    session: requests.Session = field(default_factory=requests.Session)
    requests_made: int = 0

    def vector(
        self, name: str, promql: str, at: datetime | None, required: Iterable[str] = ()
    ) -> tuple[Sample, ...]:
        result = self._query(name, promql, at, "vector")
        samples = tuple(_sample(name, item, tuple(required)) for item in result)
        _reject_duplicates(name, [s.labels for s in samples])
        return samples

    def matrix(
        self, name: str, promql: str, at: datetime | None, required: Iterable[str] = ()
    ) -> tuple[Series, ...]:
        result = self._query(name, promql, at, "matrix")
        series = tuple(_series(name, item, tuple(required)) for item in result)
        _reject_duplicates(name, [s.labels for s in series])
        return series

    def _query(self, name: str, promql: str, at: datetime | None, want: str) -> list[Any]:
        form = {"query": promql}
        if at is not None:
            form["time"] = f"{at.timestamp():.3f}"
        headers = {"Authorization": f"Bearer {self.bearer_token}"} if self.bearer_token else {}
        url = f"{self.base_url.rstrip('/')}/api/v1/query"
        self.requests_made += 1
        try:
            response = self.session.post(url, data=form, headers=headers, timeout=self.timeout_s)
        except requests.Timeout:
            raise PromError(
                f"query {name}: no answer from {url} within {self.timeout_s:g}s"
            ) from None
        except requests.RequestException as exc:
            raise PromError(f"query {name}: cannot reach {url}: {_errno(exc)}") from None
        return _result(name, response, want)


def _result(name: str, response: requests.Response, want: str) -> list[Any]:
    try:
        body = response.json()
    except ValueError:
        kind = response.headers.get("Content-Type", "unknown content type")
        raise PromError(
            f"query {name}: HTTP {response.status_code}, answer is not JSON ({kind})"
        ) from None
    if not isinstance(body, dict):
        raise PromError(f"query {name}: answer is JSON but not an object")
    if response.status_code != 200 or body.get("status") != "success":
        detail = body.get("error") or body.get("status") or "no error text"
        raise PromError(f"query {name}: HTTP {response.status_code}, {_first_line(detail)}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise PromError(f"query {name}: answer has no data object")
    if data.get("resultType") != want:
        raise PromError(f"query {name}: expected resultType {want}, got {data.get('resultType')!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromError(f"query {name}: result is not a list")
    return result


def _labels(name: str, item: Any, required: tuple[str, ...]) -> Labels:
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
    ):
        raise PromError(f"query {name}: a result has no valid metric labels")
    missing = [label for label in required if not metric.get(label)]
    if missing:
        raise PromError(f"query {name}: a series lacks label {missing[0]!r}: {_brief(metric)}")
    return tuple(sorted(metric.items()))


def _number(name: str, pair: Any, labels: Labels) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise PromError(f"query {name}: malformed value {pair!r} for {_brief(dict(labels))}")
    try:
        stamp, value = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise PromError(f"query {name}: non-numeric value {pair[1]!r}") from None
    if not math.isfinite(value):
        raise PromError(f"query {name}: value {pair[1]} for {_brief(dict(labels))}")
    return stamp, value


def _sample(name: str, item: Any, required: tuple[str, ...]) -> Sample:
    labels = _labels(name, item, required)
    return Sample(labels, _number(name, item.get("value"), labels)[1])


def _series(name: str, item: Any, required: tuple[str, ...]) -> Series:
    labels = _labels(name, item, required)
    values = item.get("values")
    if not isinstance(values, list):
        raise PromError(f"query {name}: a series has no values list")
    return Series(labels, tuple(_number(name, pair, labels) for pair in values))


def _reject_duplicates(name: str, label_sets: list[Labels]) -> None:
    seen: set[Labels] = set()
    for labels in label_sets:
        if labels in seen:
            raise PromError(f"query {name}: duplicate series {_brief(dict(labels))}")
        seen.add(labels)


def _brief(metric: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def _errno(exc: Exception) -> str:
    """The useful tail of a requests connection error (``[Errno 111] Connection refused``)."""
    found = re.search(r"\[Errno -?\d+\][^'\")]*", str(exc))
    return found.group(0).strip() if found else _first_line(exc)


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0][:300] if text else "(empty)"
