"""The bundled request draft: what it asks for each verdict, and the facts it carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.evidence import request
from guard.evidence.assess import Inputs, assess, offline_inputs
from guard.evidence.report import Tables
from guard.xid_tables import load_catalog, load_classes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TABLES = Tables(load_classes(), load_catalog())


def draft(
    log: str,
    pci: str,
    lspci: str | None = None,
    history: str | None = None,
    smi: str | None = None,
) -> str:
    smi_text = (FIXTURES / "nvidia-smi" / smi).read_text(encoding="utf-8") if smi else None
    files = Inputs(
        kernel_log=(FIXTURES / "kernel-log" / "scenarios" / log).read_text(encoding="utf-8"),
        kernel_log_source=log,
        gpu_lspci=(FIXTURES / "lspci" / lspci).read_text(encoding="utf-8") if lspci else None,
        aer_text=(FIXTURES / "lspci" / "rootport-sdes-new.txt").read_text(encoding="utf-8"),
        nvidia_smi=smi_text,
    )
    found = assess(offline_inputs(files, pci, None), pci, TABLES.classes)
    template = request.load_template()
    return request.render(template, request.context(found, TABLES, "gpu-node-b", history))


@pytest.mark.parametrize(
    ("log", "pci", "subject", "asked"),
    [
        pytest.param(
            "incident-gpu-node-b.log",
            "0000:99:00.0",
            "needs cold power cycle",
            ("please power the node off and on again", "A soft reboot\nhangs"),
            id="power-cycle-explains-why-soft-reboot-hangs",
        ),
        pytest.param(
            "xid95-uncontained.log",
            "0000:01:00.0",
            "needs GPU reset",
            ("nvidia-smi --gpu-reset -i 0000:01:00.0", "reset-done annotation"),
            id="reset-procedure",
        ),
        pytest.param(
            "xid143-fsp.log",
            "0000:41:00.0",
            "needs card replacement (RMA)",
            ("please replace the card",),
            id="rma-card-replacement",
        ),
        pytest.param(
            "xid140-ecc.log",
            "0000:2a:00.0",
            "needs diagnosis",
            ("please diagnose",),
            id="human-diagnosis",
        ),
    ],
)
def test_each_verdict_asks_its_action(
    log: str, pci: str, subject: str, asked: tuple[str, ...]
) -> None:
    text = draft(log, pci)
    assert text.splitlines()[0] == f"Subject: gpu-node-b: GPU {pci} {subject}"
    for phrase in asked:
        assert phrase in text


def test_draft_carries_slot_uuid_xids_config_aer_and_history() -> None:
    text = draft(
        "incident-gpu-node-b.log", "0000:99:00.0", "gpu-all-ff.txt", history="Second time."
    )
    lines = text.splitlines()
    assert "GPU slot (PCI): 0000:99:00.0" in lines
    assert "GPU UUID: GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d" in lines
    assert (
        "- 2026-09-21T05:52:44.100224+0000 Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS): "
        "GPU has fallen off the bus."
    ) in lines
    assert "- 2026-09-21T05:52:44.100231+0000 driver record: GPU has fallen off the bus" in lines
    assert (
        "PCI config space reads all ff (256 bytes): the GPU does not answer config reads." in lines
    )
    assert "- Surprise Down: yes." in lines
    recovery = "Driver recovery action (Xid 154): GPU Reset Required"
    assert any(line.startswith(recovery) for line in lines)
    assert "History: Second time." in lines


def test_missing_history_is_said_not_left_blank() -> None:
    text = draft("xid143-fsp.log", "0000:41:00.0")
    assert "History: not given (no ledger counts were passed to the evidence job)." in text


def test_no_xid_in_the_log_says_so() -> None:
    text = draft("no-gpu-records.log", "0000:99:00.0")
    assert "- none found in the kernel log" in text.splitlines()


def test_draft_says_what_the_log_showed_for_a_dead_gpu_without_an_xid() -> None:
    text = draft("rminit-failed.log", "0000:98:00.0")
    lines = text.splitlines()
    assert lines[0] == "Subject: gpu-node-b: GPU 0000:98:00.0 needs cold power cycle"
    assert "Driver records without an Xid:" in lines
    assert any("RmInitAdapter failed! (0x62:0x65:1792)" in line for line in lines)
    assert any(
        line.startswith("Verdict: power-cycle (driver record: RmInitAdapter") for line in lines
    )


def test_draft_carries_nvidia_smi_and_the_rma_reason() -> None:
    text = draft("no-gpu-records.log", "0000:99:00.0", smi="h100-remap-failure.txt")
    assert (
        text.splitlines()[0] == "Subject: gpu-node-b: GPU 0000:99:00.0 needs card replacement (RMA)"
    )
    assert "nvidia-smi -q: Remapped Rows / Remapping Failure Occurred: Yes" in text.splitlines()
    assert "please replace the card (nvidia-smi: row remapping failure" in text


def test_draft_reports_a_downgraded_link() -> None:
    text = draft("no-gpu-records.log", "0000:18:00.0", lspci="gpus-vv-links.txt")
    assert (
        "PCIe link 0000:18:00.0: LnkSta 5GT/s x1 of LnkCap 16GT/s x16: width DOWNGRADED"
        in text.splitlines()
    )
