"""The one door to Prometheus: instant queries, every answer bounded (one total deadline, a cap on
its bytes and its series) and validated. Anything abnormal is a one-line `PromError`, never "no
candidates"; transient failures are retried within the run's budget (guard.doors.retry). A series
wrong on its own (not a finite number, a duplicate) is a `BadSeries`: its node alone is blamed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import requests

from guard.doors.kube_errors import socket_reason
from guard.doors.prom_access import PromAccess
from guard.doors.retry import Backoff, retry_after_s
from guard.files import first_line
from guard.settings import Settings

Labels = tuple[tuple[str, str], ...]
_CHUNK = 64 * 1024
# Each result object starts {"metric":{…}; a label *named* metric has a string value instead.
_RESULT_OBJECT = re.compile(rb'"metric"\s*:\s*\{')
# An instant query's samples carry the query's instant (milliseconds on the wire).
_INSTANT_TOLERANCE_S = 1.0
# Without an instant the engine's own clock is used: only a time outside these is absurd.
_EPOCH_FIRST, _EPOCH_LAST = 0.0, 4_102_444_800.0  # 1970 to 2100
# Prometheus 2.45 to 2.55 sent PromQL's info annotations in `warnings` (3.x: `infos`).
_INFO_PREFIX = "PromQL info:"
# Words of a warning that says the answer lacks data (a partial answer: docs/engines.md); any
# other warning is logged once a run and the answer used (`PromClient.warn`).
_PARTIAL_WORDS = (
    "partial",
    "series for",
    "series from",
    "failed to receive",
    "unavailable",
    "no storeapis matched",
)
# Answers a retry may mend: a proxy whose backend restarts, and 429 with Retry-After; 500 and
# other 4xx are the query's or the engine's fault.
_TRANSIENT = frozenset({502, 503, 504})
T = TypeVar("T", "Sample", "Series")


class PromError(Exception):
    """A Prometheus answer the guard cannot trust; the message is one line."""


class _Transient(PromError):
    """No answer came: another try may get one."""


@dataclass(frozen=True, slots=True)
class _Labelled:
    labels: Labels

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")


@dataclass(frozen=True, slots=True)
class Sample(_Labelled):
    value: float


@dataclass(frozen=True, slots=True)
class Series(_Labelled):
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class BadSeries(_Labelled):
    why: str  # never holds a label value: those may carry anything, line breaks included
    value: str = ""  # the sample's value as sent, where that is what is wrong
    what: str = "value"  # what is wrong: the value, a missing label's name, or "labels"


@dataclass(frozen=True, slots=True)
class Checked(Generic[T]):
    good: tuple[T, ...]
    bad: tuple[BadSeries, ...] = ()


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    content_type: str
    body: bytearray
    tries: str = ""  # " (gave up after 3 tries)" on the last of several transient answers
    retry_after: str = ""  # the header as sent


def _retry_wait(answer: _Answer) -> float | None:
    """The least wait before another try (0: the backoff's own); None: not transient."""
    if answer.status in _TRANSIENT:
        return 0.0
    if answer.status == 429:
        return retry_after_s(answer.retry_after, datetime.now(UTC))
    return None


def _tries(attempt: int) -> str:
    return f" (gave up after {attempt} tries)" if attempt > 1 else ""


@dataclass
class PromClient:
    """Instant queries against ``<base_url>/api/v1/query`` (POST, so long PromQL fits)."""

    base_url: str
    timeout_s: float = 10.0
    session: requests.Session = field(default_factory=requests.Session)
    max_answer_bytes: int = 16 * 1024 * 1024
    max_series: int = 20000
    access: PromAccess = field(default_factory=PromAccess)
    requests_made: int = 0
    # Queries by HTTP status, "error" where no usable answer came (the pushed requests metric).
    codes: Counter[str] = field(default_factory=Counter)
    # The run's retry budget (guard.run `Budget`: the cycle's deadline, then the run's).
    backoff: Backoff = field(default_factory=Backoff.once)
    # (query, warning) of a warning that is not of a partial answer, once per text.
    warn: Callable[[str, str], None] = lambda _name, _warning: None
    warned: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.access.apply(self.session)

    @classmethod
    def from_settings(cls, s: Settings) -> PromClient:
        """Files named by settings are read here (PromAccessError)."""
        return cls(
            s.prometheus_url,
            s.prometheus_timeout_s,
            max_answer_bytes=s.prometheus_max_answer_bytes,
            max_series=s.prometheus_max_series,
            access=PromAccess.from_settings(s),
        )

    def checked(
        self,
        name: str,
        promql: str,
        at: datetime | None,
        required: Iterable[str] = (),
        window_s: float | None = None,
    ) -> Checked[Any]:
        """A vector's samples, or with `window_s` a matrix's series, every point in the `window_s`
        before the instant."""
        matrix = window_s is not None
        result = self._query(name, promql, at, "matrix" if matrix else "vector")
        clock = _Clock.of(name, at, window_s)
        good: list[Any] = []
        bad: list[BadSeries] = []
        for item in result:
            labels = _labels(name, item)
            values = item.get("values") if matrix else [item.get("value")]
            if not isinstance(values, list):
                raise PromError(f"query {name}: a series has no values list")
            points = [_point(name, pair, labels, clock) for pair in values]
            wrong = next((p for p in points if isinstance(p, BadSeries)), None)
            wrong = wrong or _lacking(labels, required)
            if wrong is not None:
                bad.append(wrong)
                continue
            found = tuple(p for p in points if isinstance(p, tuple))
            good.append(Series(labels, found) if matrix else Sample(labels, found[0][1]))
        return _split_duplicates(good, bad)

    def server_time(self, name: str = "prometheus-time") -> datetime:
        """The engine's own now: ``time()`` at no instant (some engines answer a vector)."""
        result = self._query(name, "time()", None, "scalar|vector")
        clock = _Clock.of(name, None)
        pair: Any = result
        if result and isinstance(result[0], dict):
            if len(result) != 1:
                raise PromError(f"query {name}: expected one sample, got {len(result)}")
            pair = result[0].get("value")
        if not isinstance(pair, list) or len(pair) != 2:
            raise PromError(f"query {name}: malformed value {_first_line(repr(pair))}")
        return datetime.fromtimestamp(clock.check(pair[0]), UTC)

    def _query(self, name: str, promql: str, at: datetime | None, want: str) -> list[Any]:
        # Thanos Query answers with what the reachable stores have unless told not to (fewer
        # series would read as fewer faults); Prometheus ignores the parameter.
        form = {"query": promql, "partial_response": "false"}
        if at is not None:
            form["time"] = f"{at.timestamp():.3f}"
        url = f"{self.base_url.rstrip('/')}/api/v1/query"
        answer = self._answer(name, url, form)
        found = len(_RESULT_OBJECT.findall(answer.body))
        if found > self.max_series:  # counted before parsing: a huge answer never becomes dicts
            raise PromError(
                f"query {name}: answer has {found} series, more than {self.max_series}"
                " (--prometheus-limits series=); the query is wrong for this cluster or the limit"
                " too low"
            )
        result, warnings = _result(name, answer, want, url)
        for warning in warnings:
            if warning not in self.warned:
                self.warned.add(warning)
                self.warn(name, warning)
        return result

    def _answer(self, name: str, url: str, form: dict[str, str]) -> _Answer:
        """The first answer that is not transient, else the last one; PromError: none came."""
        attempt = 0
        while True:
            attempt += 1
            # A retry never runs past the deadline; the first try has its whole timeout.
            timeout = (
                min(self.timeout_s, self.backoff.remaining_s()) if attempt > 1 else self.timeout_s
            )
            self.requests_made += 1
            try:
                answer = self._post(name, url, form, timeout)
            except _Transient as exc:
                self.codes["error"] += 1
                if self.backoff.wait(attempt):
                    continue
                raise PromError(f"{exc}{_tries(attempt)}") from None
            except PromError:
                self.codes["error"] += 1
                raise
            self.codes[str(answer.status)] += 1
            wait = _retry_wait(answer)
            if wait is None:
                return answer
            if not self.backoff.wait(attempt, at_least_s=wait):
                return _Answer(answer.status, answer.content_type, answer.body, _tries(attempt))

    def _post(self, name: str, url: str, form: dict[str, str], timeout_s: float) -> _Answer:
        """The whole answer within `timeout_s`, or PromError. requests' timeout bounds each read,
        not a body trickled a byte at a time: a worker thread reads, this one waits the total."""
        box: dict[str, Any] = {"stop": threading.Event()}
        args = (name, url, form, timeout_s, box)
        worker = threading.Thread(target=self._read, args=args, name=f"prom-{name}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            box["stop"].set()
            _hang_up(box.get("response"))
            got = len(box.get("body", b""))
            raise _Transient(
                f"query {name}: no complete answer from {url} within {timeout_s:g}s"
                f" (total deadline, {got} bytes received)"
            )
        error = box.get("error")
        if error is not None:
            raise error
        answer: _Answer = box["answer"]
        return answer

    def _read(
        self, name: str, url: str, form: dict[str, str], timeout_s: float, box: dict[str, Any]
    ) -> None:
        try:
            # verify and cert per request: a session-level CA path would lose to REQUESTS_CA_BUNDLE.
            with self.session.post(
                url,
                data=form,
                timeout=(timeout_s, timeout_s),
                stream=True,
                verify=self.access.verify,
                cert=self.access.cert,
            ) as response:
                box["response"] = response
                declared = response.headers.get("Content-Length", "")
                encoded = response.headers.get("Content-Encoding", "identity") != "identity"
                if declared.isdigit() and not encoded and int(declared) > self.max_answer_bytes:
                    raise self._too_large(name, int(declared))
                body = bytearray()
                box["body"] = body
                for chunk in response.iter_content(_CHUNK):  # decoded: a gzip bomb is counted too
                    if box["stop"].is_set():
                        break
                    body += chunk
                    if len(body) > self.max_answer_bytes:
                        raise self._too_large(name, len(body), at_least=True)
                kind = response.headers.get("Content-Type", "unknown content type")
                retry_after = response.headers.get("Retry-After", "")
                box["answer"] = _Answer(response.status_code, kind, body, retry_after=retry_after)
        except PromError as exc:
            box["error"] = exc
        except requests.exceptions.SSLError as exc:
            box["error"] = PromError(
                f"query {name}: TLS with {url} failed: {_tls_reason(exc)}"
                " (check --prometheus-tls ca= and the client certificate)"
            )
        except requests.Timeout:
            box["error"] = _Transient(f"query {name}: no answer from {url} within {timeout_s:g}s")
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            box["error"] = _Transient(f"query {name}: cannot reach {url}: {_errno(exc)}")
        except requests.RequestException as exc:
            box["error"] = PromError(f"query {name}: cannot reach {url}: {_errno(exc)}")
        except Exception as exc:  # a worker hands every failure back, even a bug
            box["error"] = PromError(f"query {name}: {type(exc).__name__}: {_first_line(exc)}")

    def _too_large(self, name: str, size: int, at_least: bool = False) -> PromError:
        more = "more than " if at_least else ""
        return PromError(
            f"query {name}: answer is {more}{size} bytes, over {self.max_answer_bytes}"
            " (--prometheus-limits answer-bytes=); nothing was parsed"
        )


def _hang_up(response: requests.Response | None) -> None:
    """Shut the socket under a reader left behind (``close()`` would wait for its read)."""
    connection = getattr(getattr(response, "raw", None), "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _result(name: str, answer: _Answer, want: str, url: str) -> tuple[list[Any], list[str]]:
    """The answer's result and its warnings that do not say it is partial."""
    status = answer.status
    try:
        body = json.loads(answer.body)
    except ValueError:
        raise PromError(
            f"query {name}: HTTP {status}, answer is not JSON ({answer.content_type})"
            f"{_status_hint(status, url)}{answer.tries}"
        ) from None
    if not isinstance(body, dict):
        raise PromError(f"query {name}: answer is JSON but not an object{answer.tries}")
    if status != 200 or body.get("status") != "success":
        detail = body.get("error") or body.get("status") or "no error text"
        raise PromError(
            f"query {name}: HTTP {status}, {_first_line(detail)}{_status_hint(status, url)}"
            f"{answer.tries}"
        )
    warnings = _warnings(name, body)
    data = body.get("data")
    if not isinstance(data, dict):
        raise PromError(f"query {name}: answer has no data object")
    if data.get("resultType") not in want.split("|"):
        raise PromError(f"query {name}: expected resultType {want}, got {data.get('resultType')!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromError(f"query {name}: result is not a list")
    return result, warnings


def _status_hint(status: int, url: str) -> str:
    if status == 404:
        return (
            f"; nothing answers at {url}: check the path prefix of --prometheus-url (a Prometheus"
            " served under /prometheus needs http://host:port/prometheus)"
        )
    if status in (401, 403):
        return "; check the Prometheus credentials (token file, basic auth, client certificate)"
    return ""


def _labels(name: str, item: Any) -> Labels:
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
    ):
        raise PromError(f"query {name}: a result has no valid metric labels")
    return tuple(sorted(metric.items()))


def _lacking(labels: Labels, required: Iterable[str]) -> BadSeries | None:
    """A series without (or with an empty) label the query must have."""
    missing = next((label for label in required if not dict(labels).get(label)), None)
    if missing is None:
        return None
    return BadSeries(labels, f"a series lacks label {missing!r}", what=missing)


def _warnings(name: str, body: dict[str, Any]) -> list[str]:
    """The answer's warnings but PromQL's info annotations; a partial answer (`isPartial`, a
    warning that data is missing) is refused: fewer series would read as fewer faults."""
    if body.get("isPartial") is True:
        raise PromError(f"query {name}: partial answer (isPartial: true)")
    warnings = body.get("warnings") or []
    if not isinstance(warnings, list):
        warnings = [warnings]
    real = [_first_line(w) for w in warnings if not str(w).startswith(_INFO_PREFIX)]
    partial = [w for w in real if any(word in w.lower() for word in _PARTIAL_WORDS)]
    if partial:
        raise PromError(
            f"query {name}: partial answer, the engine warns: {partial[0]}"
            f"{f' (and {len(partial) - 1} more)' if len(partial) > 1 else ''}"
        )
    return real


@dataclass(frozen=True, slots=True)
class _Clock:
    """The sample times an answer may carry, in seconds since the epoch."""

    name: str
    earliest: float
    latest: float
    instant: str  # how the error line names the expected time

    @classmethod
    def of(cls, name: str, at: datetime | None, window_s: float | None = None) -> _Clock:
        """At `at` (a vector), or in the `window_s` before it (a matrix); any time without it."""
        if at is None:
            return cls(name, _EPOCH_FIRST, _EPOCH_LAST, "a time between 1970 and 2100")
        ref = at.timestamp()
        said = _stamp_text(at.timestamp())
        if window_s is not None:
            said = f"within {window_s:g}s up to {said}"
        earliest = ref - (window_s or 0) - _INSTANT_TOLERANCE_S
        return cls(name, earliest, ref + _INSTANT_TOLERANCE_S, said)

    def check(self, raw: Any) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise PromError(f"query {self.name}: sample timestamp {raw!r} is not a number")
        if not self.earliest <= raw <= self.latest:
            raise PromError(
                f"query {self.name}: sample timestamp {raw!r} ({_stamp_text(raw)}) is not"
                f" {self.instant}; the engine answered for another time"
            )
        return float(raw)


def _stamp_text(stamp: float) -> str:
    try:
        return datetime.fromtimestamp(stamp, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return "out of range"


def _point(name: str, pair: Any, labels: Labels, clock: _Clock) -> tuple[float, float] | BadSeries:
    """(time, value) of one sample; a value that is no finite number is the series' fault."""
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise PromError(f"query {name}: malformed value {pair!r} for {_brief(dict(labels))}")
    stamp = clock.check(pair[0])
    text = pair[1]
    try:
        value = float(text)
    except ValueError:
        return BadSeries(labels, "non-numeric value", repr(text[:40]))
    if not math.isfinite(value):
        return BadSeries(labels, "value", text)
    return stamp, value


def _split_duplicates(good: list[T], bad: list[BadSeries]) -> Checked[T]:
    """The same label set twice (an engine's failed deduplication): both copies are bad."""
    count = Counter(s.labels for s in good)
    twice = {labels for labels, n in count.items() if n > 1}
    bad.extend(BadSeries(labels, "duplicate series", what="labels") for labels in twice)
    return Checked(tuple(s for s in good if s.labels not in twice), tuple(bad))


def _brief(metric: dict[str, str]) -> str:
    """Labels for an error line, each value escaped as JSON: a line break stays ``\\n``."""
    shown = (f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(metric.items()))
    return "{" + ",".join(shown) + "}"


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


_first_line = functools.partial(first_line, limit=300, blank="(empty)")
_errno = functools.partial(socket_reason, line=_first_line)  # ``[Errno 111] Connection refused``
