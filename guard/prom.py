"""The one door to Prometheus: instant queries with strict answer validation.

Anything abnormal raises `PromError` with a one-line reason; it never becomes "no candidates".
Every answer is bounded: one total deadline per request (connect, headers and the whole body,
however slowly it trickles in), a cap on its decoded bytes and one on its series.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import requests

from guard.prom_access import PromAccess
from guard.settings import Settings

Labels = tuple[tuple[str, str], ...]
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_SERIES = 20000
_CHUNK = 64 * 1024
# Each result object starts {"metric":{…}; a label *named* metric has a string value instead.
_RESULT_OBJECT = re.compile(rb'"metric"\s*:\s*\{')


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


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    content_type: str
    body: bytearray


@dataclass
class PromClient:
    """Instant queries against ``<base_url>/api/v1/query`` (POST, so long PromQL fits)."""

    base_url: str
    timeout_s: float = 10.0
    bearer_token: str = ""
    session: requests.Session = field(default_factory=requests.Session)
    max_answer_bytes: int = DEFAULT_MAX_BYTES
    max_series: int = DEFAULT_MAX_SERIES
    access: PromAccess = field(default_factory=PromAccess)
    requests_made: int = 0
    # Queries by HTTP status of the answer ("200", "400", …), "error" where no usable answer
    # came (timeout, refused, too large): the pushed gpu_node_guard_last_run_requests.
    codes: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.access.apply(self.session)
        if self.bearer_token:
            self.session.headers["Authorization"] = f"Bearer {self.bearer_token}"

    @classmethod
    def from_settings(cls, s: Settings) -> PromClient:
        """The client a guard run uses; files named by settings are read here (PromAccessError)."""
        return cls(
            s.prometheus_url,
            s.prometheus_timeout_s,
            max_answer_bytes=s.prometheus_max_answer_bytes,
            max_series=s.prometheus_max_series,
            access=PromAccess.from_settings(s),
        )

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
        url = f"{self.base_url.rstrip('/')}/api/v1/query"
        self.requests_made += 1
        try:
            answer = self._post(name, url, form)
        except PromError:
            self.codes["error"] += 1
            raise
        self.codes[str(answer.status)] += 1
        found = len(_RESULT_OBJECT.findall(answer.body))
        if found > self.max_series:  # counted before parsing: a huge answer never becomes dicts
            raise PromError(
                f"query {name}: answer has {found} series, more than {self.max_series}"
                " (--prometheus-max-series); the query is wrong for this cluster or the limit"
                " too low"
            )
        return _result(name, answer, want, url)

    def _post(self, name: str, url: str, form: dict[str, str]) -> _Answer:
        """The whole answer within `timeout_s`, or PromError; a reader left behind is abandoned.

        requests' timeout bounds each socket read, so a body trickled a byte at a time never
        trips it: the request runs in a worker thread and this thread waits the total deadline.
        """
        box: dict[str, Any] = {}
        stop = threading.Event()
        worker = threading.Thread(
            target=self._read, args=(name, url, form, box, stop), name=f"prom-{name}", daemon=True
        )
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            stop.set()
            _hang_up(box.get("response"))
            got = len(box.get("body", b""))
            raise PromError(
                f"query {name}: no complete answer from {url} within {self.timeout_s:g}s"
                f" (total deadline, {got} bytes received)"
            )
        error = box.get("error")
        if error is not None:
            raise error
        answer: _Answer = box["answer"]
        return answer

    def _read(
        self, name: str, url: str, form: dict[str, str], box: dict[str, Any], stop: threading.Event
    ) -> None:
        try:
            box["answer"] = self._fetch(name, url, form, box, stop)
        except PromError as exc:
            box["error"] = exc
        except requests.exceptions.SSLError as exc:
            box["error"] = PromError(
                f"query {name}: TLS with {url} failed: {_tls_reason(exc)}"
                " (check --prometheus-ca-file and the client certificate)"
            )
        except requests.Timeout:
            box["error"] = PromError(
                f"query {name}: no answer from {url} within {self.timeout_s:g}s"
            )
        except requests.RequestException as exc:
            box["error"] = PromError(f"query {name}: cannot reach {url}: {_errno(exc)}")
        except Exception as exc:  # a worker hands every failure back, even a bug
            box["error"] = PromError(f"query {name}: {type(exc).__name__}: {_first_line(exc)}")

    def _fetch(
        self, name: str, url: str, form: dict[str, str], box: dict[str, Any], stop: threading.Event
    ) -> _Answer:
        limit = (self.timeout_s, self.timeout_s)
        # verify and cert per request: a session-level CA path would lose to REQUESTS_CA_BUNDLE.
        with self.session.post(
            url, data=form, timeout=limit, stream=True, verify=self.access.verify,
            cert=self.access.cert,
        ) as response:  # fmt: skip
            box["response"] = response
            declared = response.headers.get("Content-Length", "")
            encoded = response.headers.get("Content-Encoding", "identity") != "identity"
            if declared.isdigit() and not encoded and int(declared) > self.max_answer_bytes:
                raise self._too_large(name, int(declared))
            body = bytearray()
            box["body"] = body
            for chunk in response.iter_content(_CHUNK):  # decoded: a gzip bomb is counted too
                if stop.is_set():
                    break
                body += chunk
                if len(body) > self.max_answer_bytes:
                    raise self._too_large(name, len(body), at_least=True)
            kind = response.headers.get("Content-Type", "unknown content type")
            return _Answer(response.status_code, kind, body)

    def _too_large(self, name: str, size: int, at_least: bool = False) -> PromError:
        more = "more than " if at_least else ""
        return PromError(
            f"query {name}: answer is {more}{size} bytes, over {self.max_answer_bytes}"
            " (--prometheus-max-answer-bytes); nothing was parsed"
        )


def _hang_up(response: requests.Response | None) -> None:
    """Shut the socket under a reader left behind, so its blocked read returns now.

    Not ``response.close()``: that waits for the reader's buffer lock, i.e. for the trickle.
    """
    connection = getattr(getattr(response, "raw", None), "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _result(name: str, answer: _Answer, want: str, url: str) -> list[Any]:
    status = answer.status
    try:
        body = json.loads(answer.body)
    except ValueError:
        raise PromError(
            f"query {name}: HTTP {status}, answer is not JSON ({answer.content_type})"
            f"{_status_hint(status, url)}"
        ) from None
    if not isinstance(body, dict):
        raise PromError(f"query {name}: answer is JSON but not an object")
    if status != 200 or body.get("status") != "success":
        detail = body.get("error") or body.get("status") or "no error text"
        raise PromError(
            f"query {name}: HTTP {status}, {_first_line(detail)}{_status_hint(status, url)}"
        )
    data = body.get("data")
    if not isinstance(data, dict):
        raise PromError(f"query {name}: answer has no data object")
    if data.get("resultType") != want:
        raise PromError(f"query {name}: expected resultType {want}, got {data.get('resultType')!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromError(f"query {name}: result is not a list")
    return result


def _status_hint(status: int, url: str) -> str:
    if status == 404:
        return (
            f"; nothing answers at {url}: check the path prefix of --prometheus-url (a Prometheus"
            " served under /prometheus needs http://host:port/prometheus)"
        )
    if status in (401, 403):
        return "; check the Prometheus credentials (token file, basic auth, client certificate)"
    return ""


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


def _tls_reason(exc: Exception) -> str:
    """``certificate verify failed: …`` or the SSL alert, without urllib3's wrapping."""
    text = str(exc)
    found = re.search(r"\[SSL[^\]]*\] ([^(')\"]+)", text) or re.search(
        r"SSL\w*Error\(\d+, '([^']+)'", text
    )
    reason = found.group(1).strip() if found else _first_line(exc)
    if "EOF occurred" in reason:
        reason += "; the server hung up, e.g. for want of a client certificate"
    return reason


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0][:300] if text else "(empty)"
