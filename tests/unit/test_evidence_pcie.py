"""lspci config-space and port-status facts, kernel AER lines in old and new wording, counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.evidence.aer import (
    counters_surprise_down,
    parse_aer_lines,
    parse_counters,
    parse_grep_counters,
    related,
)
from guard.evidence.lspci import config_space, port_status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _read(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "all_ff", "bytes_read", "vendor_device"),
    [
        pytest.param("gpu-all-ff.txt", True, 256, None, id="dead-gpu-dump-all-ff"),
        pytest.param("gpu-normal.txt", False, 256, "10de:2330", id="live-h100-dump"),
        pytest.param("gpu-rev-ff-header-only.txt", True, 0, None, id="rev-ff-header-no-dump"),
        pytest.param("gpu-not-listed.txt", None, 0, None, id="lspci-printed-nothing"),
    ],
)
def test_config_space(
    name: str, all_ff: bool | None, bytes_read: int, vendor_device: str | None
) -> None:
    found = config_space(_read("lspci", name))
    assert (found.all_ff, found.bytes_read, found.vendor_device) == (
        all_ff,
        bytes_read,
        vendor_device,
    )


def test_one_live_byte_means_config_space_is_not_all_ff() -> None:
    text = _read("lspci", "gpu-all-ff.txt").replace("f0: ff ff", "f0: 00 ff", 1)
    assert config_space(text).all_ff is False


def test_without_an_address_only_the_first_device_block_counts() -> None:
    text = _read("lspci", "gpu-normal.txt") + _read("lspci", "gpu-all-ff.txt")
    assert config_space(text).all_ff is False


@pytest.mark.parametrize(
    ("pci", "all_ff", "header"),
    [
        pytest.param("0000:18:00.0", False, "18:00.0 3D controller", id="first-gpu-live"),
        pytest.param("0000:2a:00.0", True, "2a:00.0 3D controller", id="second-gpu-dead"),
        pytest.param("0000:3a:00.0", False, "3a:00.0 3D controller", id="after-the-dead-one"),
        pytest.param("0000:5d:00.0", False, "5d:00.0 3D controller", id="last-gpu-live"),
        pytest.param("0000:99:00.0", None, "", id="gpu-not-in-the-listing"),
    ],
)
def test_each_gpu_of_a_multi_gpu_listing_is_judged_by_its_own_block(
    pci: str, all_ff: bool | None, header: str
) -> None:
    found = config_space(_read("lspci", "gpus-dgx-one-dead.txt"), pci)
    assert (found.all_ff, found.header.startswith(header)) == (all_ff, True)
    assert found.bytes_read == (256 if header else 0)


def test_a_dead_neighbour_in_plain_lspci_says_nothing_about_the_gpu() -> None:
    """Plain ``lspci`` (no dump): `(rev ff)` on another device's line is not this GPU's."""
    text = "18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n" + _read(
        "lspci", "gpu-rev-ff-header-only.txt"
    )
    assert config_space(text, "0000:18:00.0").all_ff is None
    assert config_space(text, "0000:c2:00.0").all_ff is True


@pytest.mark.parametrize(
    ("name", "has_aer", "uncorrectable", "correctable", "link_active"),
    [
        pytest.param(
            "rootport-aer-old.txt",
            True,
            ("SDES",),
            ("Timeout",),
            False,
            id="pciutils-3.12-one-line-uesta-surprise-down",
        ),
        pytest.param(
            "rootport-aer-new.txt",
            True,
            ("CmpltTO", "UnsupReq"),
            ("AdvNonFatalErr",),
            True,
            id="pciutils-3.13-uesta-over-three-lines",
        ),
        pytest.param(
            "rootport-sdes-new.txt",
            True,
            ("SDES",),
            (),
            False,
            id="pciutils-3.13-surprise-down-link-down",
        ),
        pytest.param(
            "rootport-no-aer.txt",
            False,
            (),
            (),
            True,
            id="port-without-aer-capability",
        ),
    ],
)
def test_port_status(
    name: str,
    has_aer: bool,
    uncorrectable: tuple[str, ...],
    correctable: tuple[str, ...],
    link_active: bool,
) -> None:
    status = port_status(_read("lspci", name))
    assert status.has_aer is has_aer
    assert status.uncorrectable == uncorrectable
    assert status.correctable == correctable
    assert status.link_active is link_active
    assert status.surprise_down is ("SDES" in uncorrectable)


def test_port_device_status_summary_without_aer() -> None:
    status = port_status(_read("lspci", "rootport-no-aer.txt"))
    assert status.device_status == ("CorrErr", "UnsupReq")


@pytest.mark.parametrize(
    ("name", "kinds", "severities", "surprise_down"),
    [
        pytest.param(
            "kernel-old-wording.log",
            [
                "received",
                "severity",
                "status",
                "error",
                "received",
                "severity",
                "status",
                "error",
                "no-handler",
            ],
            {"correctable", "uncorrectable-fatal"},
            True,
            id="old-uncorrected-corrected-id-and-long-names",
        ),
        pytest.param(
            "kernel-new-wording.log",
            ["no-handler", "received", "severity", "status", "error", "error", "recovery-failed"],
            {"uncorrectable-fatal"},
            True,
            id="newer-bdf-and-short-names-sdes",
        ),
        pytest.param(
            "kernel-uncorrectable-source.log",
            ["received", "severity", "status", "error", "error", "no-handler"],
            {"uncorrectable-nonfatal"},
            False,
            id="uncorrectable-wording-received-from-source",
        ),
        pytest.param(
            "kernel-correctable-syslog.log",
            ["received", "severity", "status", "error"],
            {"correctable"},
            False,
            id="correctable-message-received-from-syslog-prefix",
        ),
    ],
)
def test_kernel_aer_lines(
    name: str, kinds: list[str], severities: set[str], surprise_down: bool
) -> None:
    events = parse_aer_lines(_read("aer", name))
    assert [e.kind for e in events] == kinds
    assert {e.detail for e in events if e.kind in ("received", "severity")} == severities
    assert any(e.surprise_down for e in events) is surprise_down


def test_surprise_down_is_read_from_the_status_word_too() -> None:
    events = parse_aer_lines(_read("aer", "kernel-new-wording.log"))
    (status,) = [e for e in events if e.kind == "status"]
    assert (status.device, status.detail) == ("0000:00:03.0", "00004020")
    assert status.surprise_down is True


def test_events_relate_by_device_or_by_named_source() -> None:
    events = parse_aer_lines(_read("aer", "kernel-uncorrectable-source.log"))
    port_line = events[0]
    assert (port_line.device, port_line.source) == ("0000:00:01.2", "0000:63:00.0")
    assert related(events, ["0000:63:00.0"]) == events
    assert related(events, ["0000:00:01.2"]) == (port_line,)
    assert related(events, ["0000:99:00.0"]) == ()


def test_old_kernels_name_the_source_by_requester_id() -> None:
    (first, *_) = parse_aer_lines(_read("aer", "kernel-old-wording.log"))
    assert (first.device, first.source, first.time) == ("0000:00:02.0", "id=0010", "527.346371")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("aer_dev_fatal", {"SDES": 1, "TOTAL_ERR_FATAL": 1}, id="fatal-sdes"),
        pytest.param("aer_dev_correctable", {"Timeout": 2, "TOTAL_ERR_COR": 2}, id="correctable"),
        pytest.param("aer_dev_nonfatal", {}, id="nonfatal-all-zero"),
    ],
)
def test_sysfs_counter_files(name: str, expected: dict[str, int]) -> None:
    counters = parse_counters(_read("aer", name))
    assert {k: v for k, v in counters.items() if v} == expected


def test_grep_output_of_counter_files() -> None:
    found = parse_grep_counters(_read("aer", "sysfs-grep.txt"))
    port = found["0000:97:01.0"]
    assert port["aer_dev_fatal"]["SDES"] == 1
    assert port["aer_rootport_total_err_fatal"] == {"TOTAL": 1}
    assert counters_surprise_down(port) is True
    assert counters_surprise_down({"aer_dev_correctable": {"Timeout": 2}}) is False
