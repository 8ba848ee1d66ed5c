"""Every way a Prometheus answer can be wrong ends in a one-line PromError, never in 'no data'."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import requests
import responses

from guard.prom import PromClient, PromError

URL = "http://prom.test:9090"
QUERY = f"{URL}/api/v1/query"


def vector(*samples):
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def sample(value="79", **labels):
    labels = labels or {"node": "gpu-node-b", "gpu": "4"}
    return {"metric": labels, "value": [1758433500.0, value]}


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
    (series,) = PromClient(URL).matrix("q", "x[2m:1m]", None, ("node",))
    assert series.points == ((1.0, 1.0), (61.0, 1.0))


@responses.activate
def test_bearer_token_is_sent():
    responses.add(responses.POST, QUERY, json=vector())
    PromClient(URL, bearer_token="s3cret").vector("q", "up", None)
    assert responses.calls[0].request.headers["Authorization"] == "Bearer s3cret"


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
