"""The PromQL building blocks' text (guard/codec/queries.py); tests/prometheus runs the queries
on real engines."""

from __future__ import annotations

from guard.codec.queries import (
    _is,
    duration,
    first_host,
    grown_by,
    ksm_label,
    pin,
    selector_hint,
    service_network_selectors,
    user_code_filter,
)
from guard.settings import Settings


def test_pin_adds_matchers_to_a_selector_with_or_without_braces() -> None:
    assert pin("kube_node_spec_unschedulable", 'job="kube-state-metrics"') == (
        'kube_node_spec_unschedulable{job="kube-state-metrics"}'
    )
    assert pin('kube_node_status_capacity{resource="nvidia_com_gpu"}', 'job="ksm"') == (
        'kube_node_status_capacity{resource="nvidia_com_gpu", job="ksm"}'
    )
    assert pin("up", "") == "up"


def test_node_names_are_matched_without_a_backslash() -> None:
    assert (_is("node", "a"), _is("node", "b.x", "a", "a")) == ('node="a"', 'node=~"a|b[.]x"')
    joined = 'label_replace(label_join(x, "guard_host", ";", "node", "Hostname"), "node"'
    assert first_host("x", ("Hostname",)).startswith(joined)


def test_the_small_blocks_read_as_promql() -> None:
    assert user_code_filter((43, 13)) == " != 13 != 43"
    assert grown_by("m", 1800) == "(m - min_over_time(m[30m]))"
    assert (duration(86400), duration(600), duration(90)) == ("24h", "10m", "90s")
    key = "gpu-node-guard.io/auto-cordon-reason"
    assert ksm_label("annotation", key) == "annotation_gpu_node_guard_io_auto_cordon_reason"


def test_the_selectors_and_their_hint_name_the_sites_setting() -> None:
    hint = selector_hint("kube_pod_status_phase", Settings(ksm_selector='job="ksm"'))
    assert hint == ' matching --ksm-selector job="ksm"'
    assert service_network_selectors(Settings())[0] == (
        "kube-proxy",
        'namespace="kube-system", pod=~"kube-proxy-.+"',
    )
