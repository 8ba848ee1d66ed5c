"""The Pushgateway fixture: prometheus-client pushes reach a real Prometheus with their labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

from guard.metric_names import GROUPING_LABEL, LAST_RUN, LAST_SUCCESS, PUSH_JOB
from tests.alerting.conftest import PUSH_SCRAPE_S, PushStack
from tests.alerting.servers import query, wait_until

READ_BACK_S = 30 * PUSH_SCRAPE_S


def _push(stack: PushStack, namespace: str, values: dict[str, float]) -> None:
    """One guard-style push: POST (pushadd), grouping key namespace=<namespace>."""
    registry = CollectorRegistry()
    for metric in (LAST_RUN, LAST_SUCCESS):
        if metric.name in values:
            Gauge(metric.name, metric.help, registry=registry).set(values[metric.name])
    pushadd_to_gateway(
        stack.pushgateway_url,
        job=PUSH_JOB,
        registry=registry,
        grouping_key={GROUPING_LABEL: namespace},
    )


def _series(stack: PushStack, namespace: str) -> dict[str, dict[str, object]]:
    names = f"{LAST_RUN.name}|{LAST_SUCCESS.name}"
    result = query(stack.prometheus_url, f'{{__name__=~"{names}", namespace="{namespace}"}}')
    return {r["metric"]["__name__"]: {**r["metric"], "value": r["value"][1]} for r in result}


def test_a_pushed_metric_reads_back_through_prometheus_with_its_grouping_key(
    push_stack: PushStack,
) -> None:
    _push(push_stack, "gng-smoke", {LAST_RUN.name: 1_790_000_000.5})
    series = wait_until(
        lambda: _series(push_stack, "gng-smoke") or None,
        READ_BACK_S,
        f"Prometheus at {push_stack.prometheus_url} never showed the pushed {LAST_RUN.name}",
    )
    assert series == {
        LAST_RUN.name: {
            "__name__": LAST_RUN.name,
            "job": PUSH_JOB,  # honor_labels: the push's job, not the scrape job `pushgateway`
            "namespace": "gng-smoke",
            # no instance: the Pushgateway's empty one wins under honor_labels, empty = absent
            "value": "1790000000.5",
        }
    }


def test_a_failed_run_pushing_only_its_run_time_keeps_the_last_success(
    push_stack: PushStack,
) -> None:
    """The contract of docs/metrics.md: pushadd (POST) replaces only the names it carries."""
    _push(push_stack, "gng-keep", {LAST_RUN.name: 100.0, LAST_SUCCESS.name: 100.0})
    wait_until(
        lambda: len(_series(push_stack, "gng-keep")) == 2,
        READ_BACK_S,
        "the successful run's two metrics never reached Prometheus",
    )
    _push(push_stack, "gng-keep", {LAST_RUN.name: 400.0})  # a failed run

    def after_the_failed_run() -> dict[str, dict[str, object]] | None:
        series = _series(push_stack, "gng-keep")
        return series if series.get(LAST_RUN.name, {}).get("value") == "400" else None

    after = wait_until(
        after_the_failed_run, READ_BACK_S, "the failed run's last_run=400 never reached Prometheus"
    )
    assert {name: v["value"] for name, v in after.items()} == {
        LAST_RUN.name: "400",
        LAST_SUCCESS.name: "100",
    }
