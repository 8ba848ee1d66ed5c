"""The evidence parsers' small helpers, one example per spelling they accept."""

from __future__ import annotations

from datetime import timedelta

from guard.evidence import aer
from guard.evidence.collect import speed, width
from guard.evidence.kernel_log import line_time, lines_of, parse_xid, pci_or_none, same_gpu
from guard.evidence.lspci import PcieLink, config_space, lspci_blocks
from guard.evidence.report import _event_sentence, link_sentence
from guard.evidence.verdict import decide
from guard.report.render import duration
from guard.xid_tables import Repair, XidClasses


def test_addresses_lines_and_prefix_times() -> None:
    assert (pci_or_none("PCI:0000:9B:00"), pci_or_none("0003:00")) == ("0000:9b:00.0", None)
    assert same_gpu("0000:99:00.0", "0000:99:00.1") and not same_gpu(None, "0000:99:00.0")
    assert list(lines_of("a\r\nb\n\nc")) == ["a", "b", "", "c"]
    iso = "2025-01-21T04:41:44,283302+00:00"
    assert line_time(f"kern  :warn  : {iso} ") == iso
    assert line_time("Dec  2 10:43:35 worker4 kernel: [240314.528856] ") == "Dec 2 10:43:35"
    assert line_time("[ 130.456250] [ T1946] ") == "130.456250"
    assert line_time("kernel: ") is None


def test_an_xid_79_line_with_unknown_process() -> None:
    r = parse_xid(
        "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus."
    )
    assert r is not None
    assert (r.code, r.pci, r.time, r.pid, r.process, r.message) == (
        79,
        "0000:91:00.0",
        "6781741.548779",
        None,
        None,
        "GPU has fallen off the bus.",
    )


def test_config_space_of_a_dead_gpu_and_the_all_ff_verdict() -> None:
    found = config_space(
        "99:00.0 3D controller: NVIDIA Device 2330 (rev ff) (prog-if ff)\n"
        "\t!!! Unknown header type 7f\n00: ff ff ff ff\n"
    )
    assert (found.all_ff, found.bytes_read, found.vendor_device) == (True, 4, None)
    assert found.header == "99:00.0 3D controller: NVIDIA Device 2330 (rev ff) (prog-if ff)"
    classes = XidClasses({79: Repair.POWER_CYCLE, 48: Repair.RESET, 143: Repair.RMA})
    decision = decide([48], False, True, classes)
    assert (decision.verdict, decision.reasons) == (
        Repair.POWER_CYCLE,
        ("config space reads all ff",),
    )


def test_pcie_and_aer_words() -> None:
    assert aer.severity_word("Uncorrected (Non-Fatal)") == "uncorrectable-nonfatal"
    assert aer.severity_word("Correctable") == "correctable"
    assert [speed(t) for t in ("32.0 GT/s PCIe", "2.5 GT/s PCIe", "8.0 GT/s", "Unknown")] == [
        "32",
        "2.5",
        "8",
        None,
    ]
    assert [width(t) for t in ("16", "0", "x16", None)] == [16, None, None, None]
    blocks = lspci_blocks("x\n97:01.0 PCI bridge: Intel\n\tDevSta:\tCorrErr-\nnext line")
    assert blocks == {"0000:97:01.0": "97:01.0 PCI bridge: Intel\n\tDevSta:\tCorrErr-"}


def test_report_sentences_and_durations() -> None:
    assert (
        link_sentence(PcieLink("0000:18:00.0", 32.0, 16, 32.0, 8))
        == "0000:18:00.0: LnkSta 32GT/s x8 of LnkCap 32GT/s x16: width DOWNGRADED"
    )
    event = aer.AerEvent("0000:00:03.0", "received", "1.5", "correctable", 1, "id=0010")
    assert (
        _event_sentence(event) == "kernel 1.5 0000:00:03.0: correctable error received from id=0010"
    )
    assert (duration(timedelta(days=38)), duration(timedelta(minutes=12, seconds=26))) == (
        "38d 00:00",
        "0:12:26",
    )
    assert duration(None) == "-"
