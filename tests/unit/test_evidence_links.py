"""The evidence Job records every GPU's PCIe link (the lower of the GPU's and its port's max)
in its termination message, and the guard reads it back (guard.read.job_results)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from guard.evidence.cli import evidence
from guard.evidence.collect import Host, node_gpus, node_links
from guard.model import RecordedLink
from guard.read.job_results import result
from guard.wire import EvidenceSummary, SummaryError
from guard.wire import parse_evidence_summary as parse_summary
from guard.wire import render_evidence_summary as render_summary
from tests.unit.test_evidence_collect import fake_bin as fake_bin

FAULTED = "0000:99:00.0"


def device(
    root: Path,
    chain: tuple[str, ...],
    *,
    vendor: str = "0x10de",
    cls: str = "0x030200",
    files: dict[str, str] | None = None,
) -> None:
    """One device at the end of `chain` (bridges first), sysfs files as the kernel writes them."""
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    here = root / "sys" / "devices" / "pci0000:00"
    for address in chain:
        here = here / address
        here.mkdir(parents=True, exist_ok=True)
        if not (bus / address).exists():
            (bus / address).symlink_to(os.path.relpath(here, bus))
    (here / "vendor").write_text(f"{vendor}\n")
    (here / "class").write_text(f"{cls}\n")
    for name, text in (files or {}).items():
        (here / name).write_text(f"{text}\n")


def link(max_speed: str, max_width: str, cur: str = "2.5 GT/s PCIe", cur_w: str = "16") -> dict:
    return {
        "max_link_speed": max_speed,
        "max_link_width": max_width,
        "current_link_speed": cur,
        "current_link_width": cur_w,
    }


def port(root: Path, chain: tuple[str, ...], max_speed: str, max_width: str) -> None:
    device(
        root,
        chain,
        vendor="0x1000",
        cls="0x060400",
        files={"max_link_speed": max_speed, "max_link_width": max_width},
    )


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """An 8-GPU-like node in miniature: GPUs behind switch ports, an NVSwitch, audio, a NIC."""
    root = tmp_path / "host"
    sw = ("0000:00:01.0", "0000:15:00.0")
    # a gen5 GPU in a gen4 slot: the slot's 16 GT/s is what it can train to; idle at 2.5 now
    port(root, (*sw, "0000:16:00.0"), "16.0 GT/s PCIe", "16")
    device(root, (*sw, "0000:16:00.0", "0000:18:00.0"), files=link("32.0 GT/s PCIe", "16"))
    # a port that only has 8 lanes wired
    port(root, (*sw, "0000:16:01.0"), "32.0 GT/s PCIe", "8")
    device(root, (*sw, "0000:16:01.0", "0000:2a:00.0"), files=link("32.0 GT/s PCIe", "16"))
    # the faulted GPU: fallen off the bus, config space all ones, so sysfs says Unknown
    port(root, (*sw, "0000:16:02.0"), "32.0 GT/s PCIe", "16")
    device(
        root, (*sw, "0000:16:02.0", FAULTED), files=link("Unknown", "63", cur="Unknown", cur_w="63")
    )
    # a GPU whose link is down although it is still listed
    port(root, (*sw, "0000:16:03.0"), "32.0 GT/s PCIe", "16")
    device(
        root, (*sw, "0000:16:03.0", "0000:ab:00.0"), files=link("32.0 GT/s PCIe", "16", cur_w="0")
    )
    # not GPUs
    device(
        root, ("0000:00:02.0", "0000:c0:00.0"), cls="0x068000", files=link("32.0 GT/s PCIe", "2")
    )  # NVSwitch
    device(root, (*sw, "0000:16:00.0", "0000:18:00.1"), cls="0x040300")  # the GPU's audio
    device(root, ("0000:00:03.0", "0000:3b:00.0"), vendor="0x15b3", cls="0x020700")  # a NIC
    return root


def test_each_gpu_records_the_lower_of_its_and_its_ports_max(node: Path) -> None:
    host = Host(root=node)
    assert node_gpus(host) == ("0000:18:00.0", "0000:2a:00.0", FAULTED, "0000:ab:00.0")
    assert node_links(host) == (("0000:18:00.0", "16GT/s,x16"), ("0000:2a:00.0", "32GT/s,x8"))


def test_a_gpu_without_readable_max_values_records_nothing(node: Path) -> None:
    (node / "sys" / "bus" / "pci" / "devices" / "0000:16:01.0" / "max_link_width").unlink()
    assert node_links(Host(root=node)) == (("0000:18:00.0", "16GT/s,x16"),)


def test_no_sysfs_records_nothing(tmp_path: Path) -> None:
    assert node_links(Host(root=tmp_path)) == ()


def test_collect_writes_the_summary_the_guard_reads(node: Path, fake_bin: Path) -> None:
    log = node.parent / "termination-log"
    log.write_text("")
    args = [
        "collect",
        "--node",
        "gpu-node-b",
        "--pci",
        FAULTED,
        "--xid",
        "79",
        "--host-root",
        str(node),
        "--timeout-s",
        "0.5",
        "--termination-log",
        str(log),
    ]
    run = CliRunner().invoke(evidence, args)
    assert run.exit_code == 0, run.output
    message = log.read_text()
    assert json.loads(message) == {
        "schema": "gpu-node-guard/evidence-summary/v1",
        "pci": FAULTED,
        "verdict": "power-cycle",
        "links": [
            {"pci": "0000:18:00.0", "link": "16GT/s,x16"},
            {"pci": "0000:2a:00.0", "link": "32GT/s,x8"},
        ],
    }
    ended = {"terminated": {"exitCode": 0, "message": message}}
    pod = {
        "metadata": {"name": "gng-ev-b-1-x"},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"name": "evidence", "state": ended}],
        },
    }
    read = result("evidence", pod)
    assert (read.state, read.links) == (
        "read",
        (RecordedLink("0000:18:00.0", "16GT/s,x16"), RecordedLink("0000:2a:00.0", "32GT/s,x8")),
    )


def test_a_run_by_hand_writes_no_termination_file(node: Path, fake_bin: Path) -> None:
    missing = node.parent / "no-such-file"
    args = [
        "collect",
        "--node",
        "n",
        "--pci",
        FAULTED,
        "--host-root",
        str(node),
        "--timeout-s",
        "0.5",
        "--termination-log",
        str(missing),
    ]
    assert CliRunner().invoke(evidence, args).exit_code == 0
    assert not missing.exists()


@pytest.mark.parametrize(
    ("message", "says"),
    [
        pytest.param(
            "",
            "empty termination message: the evidence program did not finish",
            id="did-not-finish",
        ),
        pytest.param("{", "not JSON", id="not-json"),
        pytest.param(
            '{"schema":"gpu-node-guard/conformance-summary/v1"}', "schema is", id="another-summary"
        ),
        pytest.param(
            '{"schema":"gpu-node-guard/evidence-summary/v1","pci":"0000:99:00.0",'
            '"verdict":"reset","links":[{"pci":"0000:18:00.0","link":"16GT/s,x16"},'
            '{"pci":"0000:18:00.0","link":"8GT/s,x16"}]}',
            "twice",
            id="pci-twice",
        ),
        pytest.param(
            '{"schema":"gpu-node-guard/evidence-summary/v1","pci":"0000:99:00.0",'
            '"verdict":"reset","links":[{"pci":"18:00.0","link":"16GT/s,x16"}]}',
            "is not {pci",
            id="pci-not-sysfs-form",
        ),
        pytest.param(
            '{"schema":"gpu-node-guard/evidence-summary/v1","verdict":"reset"}',
            "no pci or verdict",
            id="no-pci",
        ),
    ],
)
def test_a_summary_of_another_shape_is_refused_in_one_line(message: str, says: str) -> None:
    with pytest.raises(SummaryError) as refused:
        parse_summary(message)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_summary_fits_a_termination_message_and_round_trips() -> None:
    links = tuple((f"0000:{i:02x}:00.0", "32GT/s,x16") for i in range(64))
    text = render_summary(EvidenceSummary(FAULTED, "power-cycle", links))
    assert len(text.encode()) <= 4000
    assert parse_summary(text).links == links[: len(parse_summary(text).links)]
