"""Prometheus' own time against each engine: what guard.plan.instant takes as the cycle's
instant when the pod's clock runs ahead (tests/unit/test_instant.py decides it)."""

from __future__ import annotations

from datetime import UTC, datetime

from guard.doors.prom import PromClient
from tests.engines import LocalPrometheus


def test_every_engine_answers_its_own_time_and_takes_partial_response_false(
    prom: LocalPrometheus,
) -> None:
    """`time()` asked at no instant gives the engine's clock; every query carries Thanos'
    `partial_response=false` (Prometheus and VictoriaMetrics take the extra parameter)."""
    client = PromClient(prom.url)
    sent: list[str] = []
    client.session.hooks["response"].append(lambda r, *_a, **_k: sent.append(r.request.body))
    theirs = client.server_time()
    assert abs((theirs - datetime.now(UTC)).total_seconds()) < 60
    assert client.vector("one", "vector(1)", theirs)[0].value == 1.0
    assert sent and all("partial_response=false" in body for body in sent)
