"""Every way a Prometheus answer can be wrong ends in a one-line PromError, never in 'no data'."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import random
import socketserver
import threading
import time
from datetime import UTC, datetime

import pytest
import requests
import responses

from guard.doors.prom import PromError
from guard.doors.prom_access import PromAccess
from guard.doors.retry import Backoff
from guard.settings import Settings, SettingsError
from tests.prom_client import PromClient, strict

URL = "http://prom.test:9090"
QUERY = f"{URL}/api/v1/query"


def vector(*samples):
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def sample(value="79", stamp=1789970100.0, **labels):
    labels = labels or {"node": "gpu-node-b", "gpu": "4"}
    return {"metric": labels, "value": [stamp, value]}


FAILURES = [
    pytest.param({"status": 500, "body": "boom"}, "HTTP 500", id="http-500"),
    pytest.param(
        {"status": 503, "json": {"status": "error", "error": "unavailable"}},
        "HTTP 503, unavailable",
        id="http-503-json",
    ),
    pytest.param({"body": requests.Timeout()}, "no answer", id="timeout"),
    pytest.param(
        {"body": requests.ConnectionError("[Errno 111] Connection refused")},
        "cannot reach",
        id="connection-refused",
    ),
    pytest.param(
        {"status": 200, "body": "<html>login</html>", "content_type": "text/html"},
        "not JSON (text/html)",
        id="html-instead-of-json",
    ),
    pytest.param(
        {"json": {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}},
        "parse error",
        id="status-error",
    ),
    pytest.param(
        {"json": {"status": "success", "data": {"resultType": "matrix", "result": []}}},
        "expected resultType vector, got 'matrix'",
        id="matrix-not-vector",
    ),
    pytest.param({"json": vector(sample(gpu="4"))}, "lacks label 'node'", id="sample-without-node"),
    pytest.param({"json": vector(sample("NaN"))}, "value NaN", id="nan-value"),
    pytest.param({"json": vector(sample("+Inf"))}, "value +Inf", id="inf-value"),
    pytest.param({"json": vector(sample("seventy"))}, "non-numeric", id="garbage-value"),
    pytest.param({"json": vector(sample(), sample())}, "duplicate series", id="duplicate-series"),
    pytest.param({"json": ["not", "an", "object"]}, "not an object", id="json-array"),
    pytest.param({"json": {"status": "success"}}, "no data object", id="no-data"),
    pytest.param(
        {"json": {"status": "success", "data": {"resultType": "vector"}}},
        "not a list",
        id="no-result",
    ),
    pytest.param(
        {"json": vector({"metric": {"node": "b"}, "value": [1, 79]})},
        "malformed value",
        id="value-not-string",
    ),
]


@pytest.mark.parametrize(("reply", "message"), FAILURES)
@responses.activate
def test_bad_answers_raise_one_line_reason(reply, message):
    responses.add(responses.POST, QUERY, **reply)
    with pytest.raises(PromError) as err:
        PromClient(URL, timeout_s=1).vector("isolation-candidates", "up", None, ("node",))
    text = str(err.value)
    assert message in text
    assert text.startswith("query isolation-candidates: ")
    assert "\n" not in text


@responses.activate
def test_good_answer_is_parsed_with_time_and_labels():
    responses.add(responses.POST, QUERY, json=vector(sample(), sample("48", node="a", gpu="1")))
    client = PromClient(URL, timeout_s=1)
    at = datetime(2026, 9, 21, 5, 55, tzinfo=UTC)
    got = client.vector("q", "up", at, ("node",))
    assert [(s.label("node"), s.value) for s in got] == [("gpu-node-b", 79.0), ("a", 48.0)]
    body = responses.calls[0].request.body
    assert "time=1789970100.000" in body and "query=up" in body
    assert client.requests_made == 1


@responses.activate
def test_empty_vector_is_valid_and_empty():
    responses.add(responses.POST, QUERY, json=vector())
    assert PromClient(URL).vector("q", "up", None) == ()


@responses.activate
def test_matrix_answer():
    responses.add(
        responses.POST,
        QUERY,
        json={
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [{"metric": {"node": "b"}, "values": [[1, "1"], [61, "1"]]}],
            },
        },
    )
    (series,) = strict("q", PromClient(URL).checked("q", "x[2m:1m]", None, ("node",), 31 * 86400))
    assert series.points == ((1.0, 1.0), (61.0, 1.0))


@responses.activate
def test_bearer_token_is_sent():
    responses.add(responses.POST, QUERY, json=vector())
    access = PromAccess((("Authorization", "Bearer s3cret"),))
    PromClient(URL, access=access).vector("q", "up", None)
    assert responses.calls[0].request.headers["Authorization"] == "Bearer s3cret"


@responses.activate
def test_queries_are_counted_by_the_answers_status_and_error():
    responses.add(responses.POST, QUERY, json=vector())
    responses.add(responses.POST, QUERY, status=400, json={"status": "error", "error": "bad"})
    responses.add(responses.POST, QUERY, body=requests.ConnectionError("refused"))
    client = PromClient(URL, timeout_s=1)
    client.vector("q", "up", None)
    for _ in range(2):
        with pytest.raises(PromError):
            client.vector("q", "up", None)
    assert dict(client.codes) == {"200": 1, "400": 1, "error": 1}


def test_real_closed_port_is_connection_error():
    with pytest.raises(PromError, match="cannot reach"):
        PromClient("http://127.0.0.1:9", timeout_s=1).vector("q", "up", None)


def test_error_bodies_are_never_json_dumped_raw():
    # guard against a multi-line server error leaking into the single log line
    with responses.RequestsMock() as rsps:
        rsps.add(
            responses.POST,
            QUERY,
            status=422,
            body=json.dumps({"status": "error", "error": "line one\nline two"}),
        )
        with pytest.raises(PromError) as err:
            PromClient(URL).vector("q", "up", None)
    assert str(err.value) == "query q: HTTP 422, line one"


# ---- bounded answers, against a loopback server this test controls ---------------------------


class Answer:
    """What the loopback server sends: raw header lines and body chunks with pauses between."""

    def __init__(
        self,
        body: bytes,
        *,
        pause_s: float = 0.0,
        headers: dict[str, str] | None = None,
        status: int = 200,
        chunk: int = 65536,
        trickle_headers: bool = False,
    ) -> None:
        self.body, self.pause_s, self.status, self.chunk = body, pause_s, status, chunk
        self.headers = {
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            **(headers or {}),
        }
        self.trickle_headers = trickle_headers

    def send(self, wfile) -> None:
        head = (
            f"HTTP/1.1 {self.status} X\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
            + "Connection: close\r\n\r\n"
        )
        parts = [head.encode()] if not self.trickle_headers else [bytes([b]) for b in head.encode()]
        parts += [self.body[i : i + self.chunk] for i in range(0, len(self.body), self.chunk)]
        for part in parts:
            wfile.write(part)
            wfile.flush()
            if self.pause_s:
                time.sleep(self.pause_s)


@pytest.fixture
def loopback():
    """A real HTTP server on 127.0.0.1 that sends `server.answer` to every request."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            length = 0
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.rfile.read(length)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                server.answer.send(self.wfile)  # or the client gave up, as it should

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.answer = Answer(json.dumps(vector()).encode())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def client_for(server, **kwargs) -> PromClient:
    return PromClient(f"http://127.0.0.1:{server.server_address[1]}", **kwargs)


def series_body(count: int) -> bytes:
    items = [sample(node=f"gpu-{i:06d}", gpu="0", Hostname=f"gpu-{i:06d}") for i in range(count)]
    return json.dumps(vector(*items)).encode()


@pytest.mark.parametrize(
    "trickle_headers", [pytest.param(False, id="body"), pytest.param(True, id="headers")]
)
def test_a_trickled_answer_ends_at_the_total_deadline(loopback, trickle_headers):
    # 400 bytes, one every 0.05 s: each read is far inside the 1 s timeout, the whole takes 20 s
    body = json.dumps(vector(*[sample() for _ in range(1)])).encode().ljust(400)
    loopback.answer = Answer(body, pause_s=0.05, chunk=1, trickle_headers=trickle_headers)
    with pytest.raises(PromError, match=r"no complete answer .* within 1s \(total deadline"):
        client_for(loopback, timeout_s=1).vector("hardware-xid", "up", None)


def test_the_same_answer_sent_at_once_is_accepted(loopback):
    loopback.answer = Answer(json.dumps(vector(sample())).encode().ljust(400))
    assert len(client_for(loopback, timeout_s=1).vector("hardware-xid", "up", None)) == 1


@pytest.mark.parametrize(
    ("headers", "declared"),
    [
        pytest.param({}, True, id="content-length"),
        pytest.param({"Transfer-Encoding": "chunked"}, False, id="no-length"),
    ],
)
def test_an_answer_over_the_byte_cap_aborts_before_parsing(loopback, headers, declared):
    body = series_body(3000)  # ~250 kB
    if not declared:
        chunked = b"".join(
            b"%x\r\n%s\r\n" % (len(c), c)
            for c in (body[i : i + 8192] for i in range(0, len(body), 8192))
        )
        loopback.answer = Answer(chunked + b"0\r\n\r\n", headers=headers)
        loopback.answer.headers.pop("Content-Length")
    else:
        loopback.answer = Answer(body)
    with pytest.raises(PromError, match=r"over 65536 \(--prometheus-limits answer-bytes="):
        client_for(loopback, max_answer_bytes=65536).vector("exporter-hosts", "up", None)


def test_a_compressed_answer_is_capped_by_its_decoded_size(loopback):
    body = series_body(3000)
    loopback.answer = Answer(gzip.compress(body), headers={"Content-Encoding": "gzip"})
    assert len(gzip.compress(body)) < 65536 < len(body)
    with pytest.raises(
        PromError, match=r"over 65536 \(--prometheus-limits answer-bytes=\); nothing was parsed"
    ):
        client_for(loopback, max_answer_bytes=65536).vector("exporter-hosts", "up", None)


def test_too_many_series_abort_with_the_count(loopback):
    loopback.answer = Answer(series_body(250))
    with pytest.raises(
        PromError, match=r"has 250 series, more than 200 \(--prometheus-limits series=\)"
    ):
        client_for(loopback, max_series=200).vector("exporter-hosts", "up", None)
    assert len(client_for(loopback, max_series=250).vector("exporter-hosts", "up", None)) == 250


def test_a_label_named_metric_is_not_counted_as_a_series(loopback):
    items = [sample(metric="x", node=f"n{i}") for i in range(150)]
    loopback.answer = Answer(json.dumps(vector(*items)).encode())
    assert len(client_for(loopback, max_series=150).vector("q", "up", None)) == 150


def test_404_says_to_check_the_path_prefix(loopback):
    loopback.answer = Answer(
        b"404 page not found\n", status=404, headers={"Content-Type": "text/plain"}
    )
    with pytest.raises(PromError) as err:
        client_for(loopback).vector("q", "up", None)
    assert "HTTP 404" in str(err.value) and "check the path prefix of --prometheus-url" in str(
        err.value
    )


def test_a_path_prefix_is_kept():
    with responses.RequestsMock() as rsps:
        rsps.add(responses.POST, "http://thanos.test/prometheus/api/v1/query", json=vector())
        PromClient("http://thanos.test/prometheus/").vector("q", "up", None)
        seen = [c.request.url for c in rsps.calls]
    assert seen == ["http://thanos.test/prometheus/api/v1/query"]


# ---- access settings: read at start, a bad file is a usage error naming the flag -------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        pytest.param(
            "--prometheus-bearer-token-file",
            "/nonexistent/token",
            "--prometheus-bearer-token-file /nonexistent/token: cannot read it: No such"
            " file or directory",
            id="missing-token-file",
        ),
        pytest.param(
            "--prometheus-tls",
            "ca=/nonexistent/ca.pem",
            "cannot read --prometheus-tls ca /nonexistent/ca.pem: No such file",
            id="missing-ca",
        ),
        pytest.param(
            "--prometheus-tls",
            "ca=/dev/zero",
            "--prometheus-tls ca /dev/zero is not a regular file",
            id="dev-zero-ca",
        ),
        pytest.param("--prometheus-tls", "ca=EMPTY", "not a PEM CA bundle", id="ca-not-pem"),
        pytest.param(
            "--prometheus-bearer-token-file", "EMPTY", "the file is empty", id="empty-token-file"
        ),
        pytest.param(
            "--prometheus-bearer-token-file", "EURO", "not printable ASCII", id="token-not-ascii"
        ),
        pytest.param(
            "--prometheus-bearer-token-file",
            "/dev/zero",
            "is not a regular file",
            id="token-file-dev-zero",
        ),
        pytest.param(
            "--prometheus-bearer-token-file",
            "HUGE",
            "larger than the limit",
            id="token-file-over-64-kib",
        ),
    ],
)
def test_unusable_access_files_are_usage_errors(tmp_path, flag, value, message):
    from click.testing import CliRunner

    from guard.cli import cli

    if value == "EMPTY":
        value = str(tmp_path / "empty")
        (tmp_path / "empty").write_text("")
        message = f"{flag} {value}: {message}"
    if value == "ca=EMPTY":
        (tmp_path / "empty").write_text("")
        value = f"ca={tmp_path / 'empty'}"
        message = f"{flag} {value}: {message}"
    if value == "HUGE":
        value = str(tmp_path / "huge")
        (tmp_path / "huge").write_text("t" * (65 * 1024))
    if value == "EURO":
        value = str(tmp_path / "euro")
        (tmp_path / "euro").write_text("token-\u20ac\n")
        message = f"{flag} {value}: {message}"
    args = ["run", "--prometheus-url", "http://127.0.0.1:9", "--dry-run", flag, value]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        pytest.param(
            {"prometheus_cert_file": "/c.pem"},
            ("prometheus_cert_file", "goes together with prometheus_key_file"),
            id="cert-without-key",
        ),
        pytest.param(
            {"prometheus_basic_auth_user": "guard"},
            (
                "prometheus_basic_auth_user",
                "goes together with prometheus_basic_auth_password_file",
            ),
            id="user-without-password",
        ),
        pytest.param(
            {"prometheus_bearer_token_file": "/t", "prometheus_service_account_token": True},
            ("prometheus_bearer_token_file", "is one credential of three"),
            id="two-credentials",
        ),
        pytest.param(
            {"prometheus_headers": "Authorization=Bearer x"},
            ("prometheus_headers", "must not set Authorization"),
            id="authorization-header",
        ),
        pytest.param(
            {"prometheus_headers": "X-Scope-OrgID=a\r\nX-Injected=b"},
            ("prometheus_headers", "values must be printable ASCII"),
            id="header-value-with-line-break",
        ),
        pytest.param(
            {"prometheus_headers": "X-Scope-OrgID=\u20ac"},
            ("prometheus_headers", "values must be printable ASCII"),
            id="header-value-not-ascii",
        ),
        pytest.param(
            {"prometheus_headers": "X-Scope-OrgID"},
            ("prometheus_headers", "must be comma-separated Name=value"),
            id="header-without-value",
        ),
        pytest.param(
            {"dcgm_node_labels": "Host name"},
            ("dcgm_node_labels", "must be comma-separated Prometheus label names"),
            id="label-with-space",
        ),
        pytest.param({"dcgm_node_labels": " , "}, ("dcgm_node_labels", "must be"), id="no-label"),
        pytest.param(
            {"prometheus_timeout_s": 0.0},
            ("prometheus_timeout_s", "must be in [0.1, 600]"),
            id="no-timeout",
        ),
        pytest.param(
            {"prometheus_timeout_s": 1e-320},
            ("prometheus_timeout_s", "must be in [0.1, 600]"),
            id="subnormal-timeout",
        ),
        pytest.param(
            {"prometheus_max_answer_bytes": 1024},
            ("prometheus_max_answer_bytes", "must be in 65536..67108864"),
            id="tiny-answer-cap",
        ),
        pytest.param(
            {"prometheus_max_answer_bytes": 10**25},
            ("prometheus_max_answer_bytes", "must be in 65536..67108864"),
            id="answer-cap-past-the-memory-limit",
        ),
        pytest.param(
            {"prometheus_max_series": 10},
            ("prometheus_max_series", "must be in 100..50000"),
            id="tiny-series-cap",
        ),
        pytest.param(
            {"prometheus_max_series": 10**9},
            ("prometheus_max_series", "must be in 100..50000"),
            id="huge-series-cap",
        ),
        pytest.param(
            {"dcgm_node_labels": "__name__"},
            ("dcgm_node_labels", "must be comma-separated Prometheus label names"),
            id="reserved-label",
        ),
        pytest.param(
            {"dcgm_selector": 'job=~"a{1001}"'},
            ("dcgm_selector", "must be"),
            id="selector-repeat-past-re2",
        ),
        pytest.param(
            {"ksm_selector": 'job=~"a++"'}, ("ksm_selector", "must be"), id="selector-possessive"
        ),
    ],
)
def test_a_bad_prometheus_setting_is_refused_naming_its_field(overrides, problem):
    with pytest.raises(SettingsError) as refused:
        Settings(**overrides)
    ((field, message),) = refused.value.problems
    assert field == problem[0] and message.startswith(problem[1])


def test_a_bad_prometheus_setting_is_one_usage_line_naming_its_flag():
    from click.testing import CliRunner

    from guard.cli import cli

    args = [
        "run",
        "--prometheus-url",
        "http://127.0.0.1:9",
        "--dry-run",
        "--prometheus-tls",
        "cert=/c.pem",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "bad setting: --prometheus-tls (GUARD_PROMETHEUS_TLS) cert= goes together" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_access_headers_and_basic_auth_reach_the_server(tmp_path):
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    s = Settings(
        prometheus_url=URL,
        prometheus_basic_auth_user="guard",
        prometheus_basic_auth_password_file=str(password),
        prometheus_headers="X-Scope-OrgID=team-a",
    )
    with responses.RequestsMock() as rsps:
        rsps.add(responses.POST, QUERY, json=vector())
        PromClient.from_settings(s).vector("q", "up", None)
        headers = rsps.calls[0].request.headers
    assert headers["X-Scope-OrgID"] == "team-a"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"guard:s3cret").decode()


def test_service_account_token_is_read_from_its_mount(tmp_path):
    token = tmp_path / "token"
    token.write_text("eyJhbGciOi.sa.token")
    s = Settings(prometheus_url=URL, prometheus_service_account_token=True)
    access = PromAccess.from_settings(s, service_account_token=token)
    assert ("Authorization", "Bearer eyJhbGciOi.sa.token") in access.headers


# ---- transient answers: retried within the run's budget (guard.doors.retry) ----------------


class FakeTime:
    """A monotonic clock that moves only when the door sleeps."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def budgeted(deadline_s: float = 30.0) -> tuple[PromClient, FakeTime]:
    t = FakeTime()
    backoff = Backoff(t.now + deadline_s, clock=t.clock, sleep=t.sleep, rng=random.Random(3))
    return PromClient(URL, timeout_s=1, backoff=backoff), t


TRANSIENT = [
    pytest.param({"status": 503, "json": {"status": "error", "error": "unavailable"}}, id="503"),
    pytest.param({"status": 502, "body": "<html>Bad Gateway</html>"}, id="502-proxy-html"),
    pytest.param({"status": 504, "body": "upstream timed out"}, id="504"),
    pytest.param({"body": requests.ConnectionError("Connection reset by peer")}, id="reset"),
    pytest.param({"body": requests.ConnectionError("[Errno 111] refused")}, id="refused"),
    pytest.param({"body": requests.ReadTimeout("read timed out")}, id="timeout"),
    pytest.param(
        {"status": 429, "headers": {"Retry-After": "4"}, "body": "slow down"}, id="429-retry-after"
    ),
]


@pytest.mark.parametrize("reply", TRANSIENT)
@responses.activate
def test_a_transient_failure_is_retried_and_the_answer_used(reply):
    responses.add(responses.POST, QUERY, **reply)
    responses.add(responses.POST, QUERY, json=vector(sample()))
    client, t = budgeted()
    (found,) = client.vector("q", "up", None, ("node",))
    assert found.value == 79.0
    assert client.requests_made == 2 and client.backoff.waits == 1 and len(t.slept) == 1
    if reply.get("status") == 429:
        assert t.slept == [4.0]  # the server's word on when, not the backoff's shorter one


NOT_TRANSIENT = [
    pytest.param({"status": 400, "json": {"status": "error", "error": "parse error"}}, id="400"),
    pytest.param({"status": 422, "json": {"status": "error", "error": "bad"}}, id="422"),
    pytest.param({"status": 500, "body": "boom"}, id="500"),
    pytest.param({"status": 429, "body": "slow down"}, id="429-without-retry-after"),
    pytest.param({"status": 200, "body": "{not json", "content_type": "text/plain"}, id="bad-json"),
    pytest.param({"json": {**vector(), "isPartial": True}}, id="partial"),
    pytest.param({"json": {**vector(), "warnings": ["partial response"]}}, id="partial-warning"),
]


@pytest.mark.parametrize("reply", NOT_TRANSIENT)
@responses.activate
def test_a_wrong_answer_is_final_at_once(reply):
    responses.add(responses.POST, QUERY, **reply)
    responses.add(responses.POST, QUERY, json=vector(sample()))
    client, t = budgeted()
    with pytest.raises(PromError) as err:
        client.vector("q", "up", None, ("node",))
    assert client.requests_made == 1 and t.slept == []
    assert "tries" not in str(err.value)


@responses.activate
def test_a_failure_that_lasts_gives_up_at_the_deadline_naming_the_tries():
    responses.add(responses.POST, QUERY, status=503, body="Service Unavailable")
    client, t = budgeted(deadline_s=5.0)
    with pytest.raises(PromError) as err:
        client.vector("q", "up", None)
    text = str(err.value)
    assert text.startswith("query q: HTTP 503, answer is not JSON")
    assert text.endswith(f"(gave up after {client.requests_made} tries)")
    assert client.requests_made > 2 and sum(t.slept) <= 5.0
    assert client.codes["503"] == client.requests_made


@responses.activate
def test_a_client_without_a_budget_tries_once():
    responses.add(responses.POST, QUERY, status=503, body="Service Unavailable")
    client = PromClient(URL, timeout_s=1)
    with pytest.raises(PromError, match="HTTP 503"):
        client.vector("q", "up", None)
    assert client.requests_made == 1


@responses.activate
def test_a_retry_never_runs_past_the_deadline():
    """The first try has the whole timeout; a retry only what is left of the run's budget."""
    responses.add(responses.POST, QUERY, body=requests.ConnectionError("Connection reset"))
    responses.add(responses.POST, QUERY, json=vector())
    t = FakeTime()
    backoff = Backoff(t.now + 3.0, clock=t.clock, sleep=t.sleep, rng=random.Random(3))
    PromClient(URL, timeout_s=10, backoff=backoff).vector("q", "up", None)
    first, second = (call.request.req_kwargs["timeout"] for call in responses.calls)
    assert first == (10, 10) and second[0] == second[1] == pytest.approx(3.0 - t.slept[0])
