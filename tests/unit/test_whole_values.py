"""Every parser and name check matches the whole value: in Python `$` also matches before a
final newline, so `xid-79\\n` once read as valid (then the Job built from it was refused)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from guard.codec.check_records import is_item
from guard.codec.records import COUNT, JOB_REF
from guard.ledger import parse_time
from guard.names import PRINTABLE_WORD, is_dns_label, is_dns_subdomain, is_label_pair
from guard.pci import link_record


def refused(check: Callable[[str], object], value: str) -> bool:
    try:
        return not check(value)
    except ValueError:
        return True


@pytest.mark.parametrize(
    ("check", "value"),
    [
        pytest.param(is_dns_label, "gpu-node-guard", id="dns-label"),
        pytest.param(is_dns_subdomain, "gpu-17.example.com", id="dns-subdomain"),
        pytest.param(is_label_pair, "nvidia.com/gpu.present=true", id="label-pair"),
        pytest.param(is_item, "ipvs-loaded", id="conformance-item"),
        pytest.param(parse_time, "2026-09-21T05:55:00Z", id="rfc3339"),
        pytest.param(link_record, "0000:18:00.0=16GT/s,x16", id="pcie-link"),
        pytest.param(COUNT.match, "8", id="count"),
        pytest.param(PRINTABLE_WORD.match, "GPU-1a", id="token"),
        pytest.param(JOB_REF.match, "job/gng-lt-b-1a2b3c4d", id="job-ref"),
    ],
)
def test_a_trailing_newline_is_refused(check: Callable[[str], object], value: str) -> None:
    assert not refused(check, value)
    assert refused(check, value + "\n")
