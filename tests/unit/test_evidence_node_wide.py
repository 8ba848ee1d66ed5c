"""Node-wide evidence (`evidence collect --trigger`): the node triggers without an Xid judged from
real `lspci -nn -k` shapes and kernel logs (docs/triggers.md, docs/evidence.md "Node-wide")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guard.doors.hostexec import CommandResult
from guard.evidence import node_wide
from guard.evidence.cli import JSON_MARK, evidence
from guard.evidence.collect import Host
from guard.wire import parse_evidence_summary
from guard.xid_tables import load_classes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLASSES = load_classes()
JOURNAL_0 = "journalctl -k -b 0 --no-pager -o short-iso-precise"
LSPCI = "lspci -nn -k -d 10de:"


def _fixture(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text(encoding="utf-8")


class Answers:
    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.calls = answers, list[str]()

    def run(self, argv: tuple[str, ...]) -> CommandResult:
        key = " ".join(argv)
        self.calls.append(key)
        if key in self.answers:
            return CommandResult(argv, 0, self.answers[key])
        return CommandResult(argv, 1, "", f"no answer for {key}\n")


def _judge(trigger: str, lspci: str, log: str = "no-gpu-records.log", expected: int | None = 4):
    answers = {JOURNAL_0: _fixture("kernel-log", "scenarios", log), LSPCI: _fixture("lspci", lspci)}
    runner = Answers(answers)
    found, slots = node_wide.gather(Host(runner=runner, root=Path("/nonexistent")), CLASSES)
    return node_wide.judge(found, slots, trigger, expected, CLASSES), runner


def test_the_gpus_of_a_real_listing_with_their_drivers_and_no_audio_function() -> None:
    slots = node_wide.gpu_slots(_fixture("lspci", "gpu-nn-k-laptop.txt"))
    assert slots == (node_wide.Slot("0000:01:00.0", "nvidia"),)


@pytest.mark.parametrize(
    ("trigger", "lspci", "log", "verdict", "reason"),
    [
        pytest.param(
            "gpu-short",
            "gpus-nn-k-one-unbound.txt",
            "no-gpu-records.log",
            "power-cycle",
            "lspci: 0000:2a:00.0 listed without `Kernel driver in use: nvidia`",
            id="unbound",
        ),
        pytest.param(
            "gpu-short",
            "gpus-nn-k-one-missing.txt",
            "no-gpu-records.log",
            "human",
            "lspci lists 3 of 4 GPUs: 1 off the bus",
            id="off-the-bus",
        ),
        pytest.param(
            "gpu-short",
            "gpus-nn-k-all-bound.txt",
            "no-gpu-records.log",
            "human",
            "gpu-short: every listed GPU has the driver bound",
            id="all-bound",
        ),
        pytest.param(
            "gpu-short",
            "gpus-nn-k-one-missing.txt",
            "xid143-fsp.log",
            "rma",
            "Xid 143",
            id="a-hardware-xid-still-wins",
        ),
        pytest.param(
            "gpu-short",
            "gpus-nn-k-one-unbound.txt",
            "rminit-failed.log",
            "power-cycle",
            "driver record: RmInitAdapter failed (the driver could not initialise the GPU)",
            id="unbound-with-rminit-record",
        ),
        pytest.param(
            "admission-rejected",
            "gpus-nn-k-all-bound.txt",
            "no-gpu-records.log",
            "power-cycle",
            "admission-rejected: kubelet refuses GPU pods",
            id="admission-rejected",
        ),
        pytest.param(
            "fabric",
            "gpus-nn-k-all-bound.txt",
            "no-gpu-records.log",
            "reset",
            "fabric: NVLink fabric failed (restart Fabric Manager first)",
            id="fabric",
        ),
        pytest.param(
            "fabric",
            "gpus-nn-k-all-bound.txt",
            "incident-gpu-node-b.log",
            "power-cycle",
            "Xid 79",
            id="fabric-with-xid-79",
        ),
    ],
)
def test_the_verdict_of_each_trigger(
    trigger: str, lspci: str, log: str, verdict: str, reason: str
) -> None:
    expected = 4 if trigger == "gpu-short" else None
    found, runner = _judge(trigger, lspci, log, expected)
    assert (found.verdict.value, found.reasons[0]) == (verdict, reason)
    assert runner.calls[:2] == [JOURNAL_0, LSPCI]


def test_unreadable_lspci_is_an_unknown_and_the_trigger_decides() -> None:
    runner = Answers({JOURNAL_0: _fixture("kernel-log", "scenarios", "no-gpu-records.log")})
    found, slots = node_wide.gather(Host(runner=runner, root=Path("/nonexistent")), CLASSES)
    judged = node_wide.judge(found, slots, "admission-rejected", None, CLASSES)
    assert slots is None and judged.verdict.value == "power-cycle"
    assert [u.what for u in judged.unknowns] == [LSPCI]


def _collect(tmp_path: Path, *args: str) -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (
        ("nsenter", 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"'),
        ("journalctl", f"cat {FIXTURES / 'kernel-log' / 'scenarios' / 'rminit-failed.log'}"),
        ("lspci", f"cat {FIXTURES / 'lspci' / 'gpus-nn-k-one-unbound.txt'}"),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    base = ["collect", "--node", "gpu-node-b", "--host-root", str(tmp_path), "--timeout-s", "5"]
    result = CliRunner().invoke(evidence, [*base, *args], env=env)
    return result.exit_code, result.output


def test_collect_of_a_node_trigger_prints_the_verdict_and_a_request_naming_no_gpu(
    tmp_path: Path,
) -> None:
    summary = tmp_path / "termination-log"
    summary.write_text("")
    args = ("--trigger", "gpu-short", "--expected-gpus", "4", "--termination-log", str(summary))
    code, output = _collect(tmp_path, *args)
    assert code == 0, output
    # The guard reads it back as any evidence Job's (guard.read.job_results).
    read = parse_evidence_summary(summary.read_text())
    assert (read.pci, read.verdict) == ("unknown", "power-cycle")
    lines = output.splitlines()
    assert lines[0] == "== gpu-node-guard evidence: node gpu-node-b, trigger gpu-short =="
    assert lines[1].startswith("verdict: power-cycle (driver record: RmInitAdapter failed")
    assert "  0000:2a:00.0: driver none bound" in lines
    record = json.loads(lines[-1].removeprefix(JSON_MARK))
    assert (record["trigger"], record["pci"], record["verdict"]) == (
        "gpu-short",
        None,
        "power-cycle",
    )
    draft = record["request"]
    assert draft.startswith("Subject: gpu-node-b: gpu-short needs cold power cycle")
    assert "GPU slot (PCI)" not in draft and "- 0000:2a:00.0: driver none bound" in draft
    assert "Verdict: power-cycle (" in draft


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "give --pci (one GPU) or --trigger", id="neither"),
        pytest.param(["--trigger", "fabric", "--pci", "0000:18:00.0"], "exactly one", id="both"),
        pytest.param(["--trigger", "fabric", "--xid", "79"], "--xid names a GPU", id="xid"),
        pytest.param(["--trigger", "fabric", "--expected-gpus", "8"], "gpu-short only", id="count"),
        pytest.param(["--trigger", "xid-79"], "--trigger", id="not-a-node-trigger"),
    ],
)
def test_collect_refuses_a_mixed_or_unknown_mode(
    tmp_path: Path, args: list[str], message: str
) -> None:
    code, output = _collect(tmp_path, *args)
    assert code == 2 and message in output, output
