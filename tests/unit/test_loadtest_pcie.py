"""`nvidia-smi --query-gpu` PCIe answers (the fallback when NVML is not importable): parsing, and a
real process for the failures (driver gone, hung, missing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guard.loadtest.model import ExpectedLink, PcieLink, link_text, parse_expected_link
from guard.loadtest.torch_backend import parse_smi, smi_links

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


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Put an executable `nvidia-smi` running `script` first on PATH."""
    binary = tmp_path / "nvidia-smi"
    binary.write_text(f"#!/bin/sh\n{script}\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def test_smi_answer_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path, monkeypatch, "echo '00000000:99:00.0, 4, 5, 16, 16'")
    assert smi_links(10.0) == (PcieLink("0000:99:00.0", 4, 5, 16, 16),)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        pytest.param(
            "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'"
            " >&2; exit 9",
            "exit 9: NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver",
            id="driver-gone",
        ),
        # Stuck on a dead GPU, with a child holding the output pipe: the whole group is killed and
        # the read returns, instead of waiting for the child after the timeout.
        pytest.param("sleep 300 & sleep 300", "nvidia-smi timed out after 0.5s", id="hangs"),
    ],
)
def test_smi_failure_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, message: str
) -> None:
    fake_smi(tmp_path, monkeypatch, script)
    with pytest.raises(RuntimeError) as raised:
        smi_links(0.5)
    assert str(raised.value) == message


def test_smi_missing_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError) as raised:
        smi_links(1.0)
    assert str(raised.value) == "cannot start nvidia-smi: No such file or directory"


def test_parse_smi_lowers_the_address_and_reads_na_as_unknown() -> None:
    text = "00000000:18:00.0, 5, 5, 16, 16\n00000000:2A:00.0, 1, 5, 8, 16\n"
    assert parse_smi(text)[1] == PcieLink("0000:2a:00.0", 1, 5, 8, 16)
    assert parse_smi("00000000:18:00.0, [N/A], 5, 16, 16")[0].gen_current is None


def test_expected_link_takes_any_address_spelling_and_round_trips_its_text() -> None:
    assert parse_expected_link("00000000:99:00.0=16GT/s,x16") == ExpectedLink("0000:99:00.0", 4, 16)
    assert parse_expected_link("0000:18:00=2.5GT/s,x8") == ExpectedLink("0000:18:00.0", 1, 8)
    assert (link_text(4, 16), link_text(None, 8)) == ("16GT/s,x16", "?GT/s,x8")
