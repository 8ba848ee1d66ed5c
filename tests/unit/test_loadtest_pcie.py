"""Parsing `nvidia-smi --query-gpu` PCIe answers (the fallback when NVML is not importable)."""

from __future__ import annotations

import pytest

from guard.loadtest.model import PcieLink
from guard.loadtest.pcie import parse_smi

# Shape of `nvidia-smi --query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,
# pcie.link.width.current,pcie.link.width.max --format=csv,noheader,nounits` on an 8-GPU node.
EIGHT_GPUS = "".join(
    f"00000000:{bus}:00.0, 5, 5, 16, 16\n"
    for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "00000000:99:00.0, 1, 4, 8, 16\n",
            (PcieLink("0000:99:00.0", 1, 4, 8, 16),),
            id="downtrained-link",
        ),
        pytest.param(
            "00000000:99:00.0, [N/A], 4, [Not Supported], 16\n",
            (PcieLink("0000:99:00.0", None, 4, None, 16),),
            id="unknown-values-are-none",
        ),
        pytest.param("", (), id="no-gpus"),
    ],
)
def test_parse_smi(text: str, expected: tuple[PcieLink, ...]) -> None:
    assert parse_smi(text) == expected


def test_parse_smi_eight_gpus_in_sysfs_form() -> None:
    links = parse_smi(EIGHT_GPUS)
    assert [link.pci for link in links][:2] == ["0000:18:00.0", "0000:2a:00.0"]
    assert not any(link.is_below_max for link in links)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("00000000:99:00.0, 5, 5, 16\n", id="missing-field"),
        pytest.param("GPU-1234, 5, 5, 16, 16\n", id="not-a-pci-address"),
    ],
)
def test_parse_smi_rejects_unexpected_lines(text: str) -> None:
    with pytest.raises(ValueError):
        parse_smi(text)
