"""`evidence classify`: the verdict on every fixture, the JSON contract, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from guard.evidence.cli import evidence

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "kernel-log" / "scenarios"
LSPCI = FIXTURES / "lspci"
AER = FIXTURES / "aer"
SMI = FIXTURES / "nvidia-smi"
CARD_B = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
GPU_B = "0000:99:00.0"


def classify(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(evidence, ["classify", *args, "--output", "json"])
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.output)
    return parsed


def _log(name: str) -> list[str]:
    return ["--kernel-log", str(LOGS / name)]


CASES = [
    pytest.param(
        [
            *_log("incident-gpu-node-b.log"),
            "--pci",
            "0000:99:00.0",
            "--lspci",
            str(LSPCI / "gpu-all-ff.txt"),
        ],
        {
            "verdict": "power-cycle",
            "uuid": CARD_B,
            "recovery_action": "GPU Reset Required",
            "config_space_all_ff": True,
            "codes": [79, 154],
        },
        id="incident-xid79-driver-says-reset-config-ff-power-cycle",
    ),
    pytest.param(
        [*_log("probe-fallen-off-dmesg.log"), "--pci", "0000:99:00.0"],
        {"verdict": "power-cycle", "uuid": None, "codes": []},
        id="probe-fallen-off-multiline-no-xid",
    ),
    pytest.param(
        [*_log("probe-fallen-off-journal.log")],
        {"verdict": "power-cycle", "pci": "0000:99:00.0", "codes": []},
        id="probe-fallen-off-journal-only-gpu-inferred",
    ),
    pytest.param(
        [*_log("legacy-fallen-off.log"), "--pci", "0000:01:00.0"],
        {"verdict": "power-cycle", "codes": []},
        id="legacy-fallen-off-one-liner",
    ),
    pytest.param(
        [*_log("xid48-dbe.log"), "--pci", "0000:03:00", "--lspci", "03:00.0@gpu-normal.txt"],
        {
            "verdict": "reset",
            "recovery_action": "Drain and Reset",
            "config_space_all_ff": False,
            "codes": [48, 63, 154, 45],
        },
        id="xid48-dbe-config-normal-reset",
    ),
    pytest.param(
        [*_log("xid48-dbe.log"), "--pci", "0000:03:00", "--lspci", "03:00.0@gpu-all-ff.txt"],
        {"verdict": "power-cycle", "config_space_all_ff": True},
        id="xid48-but-config-all-ff-power-cycle",
    ),
    pytest.param(
        [*_log("xid48-dbe.log"), "--pci", "0000:03:00", "--lspci", str(LSPCI / "gpu-all-ff.txt")],
        {"verdict": "reset", "config_space_all_ff": None},
        id="lspci-of-another-device-proves-nothing",
    ),
    pytest.param(
        [*_log("xid94-mig.log"), "--pci", "0000:01:00.0"],
        {"verdict": "reset", "codes": [94, 45]},
        id="xid94-mig-instance-reset",
    ),
    pytest.param(
        [*_log("xid95-uncontained.log"), "--pci", "0000:01:00.0"],
        {"verdict": "reset", "recovery_action": "GPU Reset Required"},
        id="xid95-reset",
    ),
    pytest.param(
        [*_log("xid119-gsp-dmesg-T.log"), "--pci", "0000:9b:00.0"],
        {
            "verdict": "reset",
            "uuid": "GPU-509665ad-b600-ac93-3616-d754b23d636d",
            "codes": [119, 119, 119, 119],
        },
        id="xid119-gsp-timeout-dmesg-T-reset",
    ),
    pytest.param(
        [*_log("xid120-gsp.log"), "--pci", "0000:4e:00.0"],
        {"verdict": "reset"},
        id="xid120-gsp-error-reset",
    ),
    pytest.param(
        [*_log("xid143-fsp.log"), "--pci", "0000:41:00.0"],
        {"verdict": "rma", "codes": [143]},
        id="xid143-fsp-boot-rma",
    ),
    pytest.param(
        [*_log("xid143-then-79.log"), "--pci", "0000:41:00.0"],
        {"verdict": "power-cycle", "codes": [143, 79]},
        id="xid143-then-79-power-cycle-wins",
    ),
    pytest.param(
        [*_log("user-code-here-hardware-there.log"), "--pci", "0000:38:00.0"],
        {
            "verdict": "human",
            "uuid": None,
            "codes": [13, 13, 13, 43],
            "other_gpus": ["0000:91:00.0"],
        },
        id="faulted-gpu-has-only-user-code-xids-other-gpu-79-human",
    ),
    pytest.param(
        [*_log("user-code-here-hardware-there.log"), "--pci", "0000:91:00.0"],
        {
            "verdict": "power-cycle",
            "uuid": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b",
            "other_gpus": ["0000:38:00.0"],
        },
        id="the-other-gpu-is-power-cycle",
    ),
    pytest.param(
        [
            *_log("xid154-only.log"),
            "--pci",
            "0000:99:00.0",
            "--lspci",
            str(LSPCI / "gpu-normal.txt"),
        ],
        {
            "verdict": "reset",
            "recovery_action": "GPU Reset Required",
            "reasons": ["Xid 154: GPU Reset Required"],
        },
        id="xid154-alone-follows-its-recovery-action",
    ),
    pytest.param(
        [
            *_log("xid154-only.log"),
            "--pci",
            "0000:99:00.0",
            "--lspci",
            "99:00.0@gpu-rev-ff-header-only.txt",
        ],
        {"verdict": "power-cycle", "config_space_all_ff": True},
        id="rev-ff-header-power-cycle",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:2a:00.0",
            "--lspci",
            str(LSPCI / "gpus-dgx-one-dead.txt"),
        ],
        {"verdict": "power-cycle", "config_space_all_ff": True},
        id="four-gpu-listing-the-dead-one-is-power-cycle",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:3a:00.0",
            "--lspci",
            str(LSPCI / "gpus-dgx-one-dead.txt"),
        ],
        {"verdict": "human", "config_space_all_ff": False},
        id="four-gpu-listing-the-dead-neighbour-does-not-count",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:18:00.0",
            "--lspci",
            str(LSPCI / "gpus-dgx-one-dead.txt"),
        ],
        {"verdict": "human", "config_space_all_ff": False},
        id="four-gpu-listing-first-gpu-live-before-a-dead-one",
    ),
    pytest.param(
        [*_log("nvlink-gb200.log"), "--pci", "0009:01:00.0"],
        {"verdict": "reset", "recovery_action": "Drain and Reset", "codes": [149, 154]},
        id="nvlink5-xid149-drain-and-reset-from-xid154",
    ),
    pytest.param(
        [*_log("no-gpu-records.log"), "--pci", "0000:06:00.0"],
        {"verdict": "human", "codes": []},
        id="nvswitch-sxid-is-not-a-gpu-record",
    ),
    pytest.param(
        [*_log("legacy-no-pci.log"), "--pci", "0000:01:00.0"],
        {"verdict": "human", "codes": [13]},
        id="legacy-xid-without-pci-prefix",
    ),
    pytest.param(
        [*_log("localized-journal.log"), "--pci", "0000:01:00.0"],
        {"verdict": "power-cycle", "uuid": "GPU-5e7d2a9c-1f3b-4c8d-9e0a-6b7c8d9e0f1a"},
        id="localized-month-names",
    ),
    pytest.param(
        [*_log("xid140-ecc.log"), "--pci", "0000:2a:00.0"],
        {"verdict": "human", "codes": [140, 140]},
        id="xid140-outside-the-table-human",
    ),
    pytest.param(
        [
            "--kernel-log",
            str(AER / "kernel-old-wording.log"),
            "--pci",
            "0000:02:00.0",
            "--root-port",
            "0000:00:02.0",
        ],
        {"verdict": "power-cycle", "surprise_down": True, "root_port": "0000:00:02.0"},
        id="aer-old-wording-surprise-down-at-root-port",
    ),
    pytest.param(
        [
            "--kernel-log",
            str(AER / "kernel-new-wording.log"),
            "--pci",
            "0000:03:00.0",
            "--root-port",
            "0000:00:03.0",
        ],
        {"verdict": "human", "surprise_down": True, "codes": []},
        id="aer-new-wording-sdes-without-xid-human",
    ),
    pytest.param(
        ["--kernel-log", str(AER / "kernel-uncorrectable-source.log"), "--pci", "0000:63:00.0"],
        {"verdict": "human", "surprise_down": False, "codes": [31]},
        id="aer-from-gpu-then-xid31-human",
    ),
    # Dead-GPU records without an Xid number (docs/evidence.md "Verdict").
    pytest.param(
        [*_log("rminit-failed.log")],
        {"verdict": "power-cycle", "pci": "0000:98:00.0", "codes": [], "dead": ["init-failed"]},
        id="rminit-failed-power-cycle",
    ),
    pytest.param(
        [*_log("rminit-failed-syslog.log"), "--pci", "0000:0a:00.0"],
        {"verdict": "power-cycle", "dead": ["init-failed", "init-failed"]},
        id="rminit-failed-syslog-repeated",
    ),
    pytest.param(
        [*_log("fsp-boot-no-xid.log")],
        {
            "verdict": "power-cycle",
            "pci": "0000:01:00.0",
            "dead": ["fsp-boot", "init-failed", "fsp-boot"],
        },
        id="fsp-boot-without-xid143-power-cycle-first",
    ),
    pytest.param(
        [*_log("gsp-heartbeat.log"), "--pci", "0000:05:00.0"],
        {"verdict": "reset", "dead": ["gsp-timeout", "gsp-timeout"]},
        id="gsp-heartbeat-naming-no-gpu-judged-for-the-only-gpu",
    ),
    pytest.param(
        [*_log("gsp-rpc-rate-limit.log")],
        {
            "verdict": "reset",
            "pci": "0000:9b:00.0",
            "uuid": "GPU-509665ad-b600-ac93-3616-d754b23d636d",
            "dead": ["gsp-timeout"],
        },
        id="gsp-rpc-rate-limit-line-reset",
    ),
    pytest.param(
        [*_log("gpu-lost-assert.log"), "--pci", "0000:01:00.0"],
        {"verdict": "power-cycle", "dead": ["gpu-lost", "gpu-lost"]},
        id="gpu-lost-assertion-power-cycle",
    ),
    pytest.param(
        [*_log("gpu-lost-check-failed.log"), "--pci", "0000:01:00.0"],
        {"verdict": "power-cycle", "dead": ["gpu-lost", "gpu-lost"]},
        id="gpu-lost-check-failed-form-power-cycle",
    ),
    pytest.param(
        [*_log("gpu-lost-other-gpus-named.log"), "--pci", "0000:99:00.0"],
        {"verdict": "human", "dead": [], "uuid": CARD_B},
        id="gpu-lost-assertion-not-pinned-when-the-log-names-several-gpus",
    ),
    pytest.param(
        [*_log("legacy-identity-no-pci.log"), "--pci", "0000:01:00.0"],
        {
            "verdict": "power-cycle",
            "uuid": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b",
            "codes": [79],
        },
        id="pre-2015-identity-line-gives-the-uuid",
    ),
    # Xid 154 by its payload.
    pytest.param(
        [*_log("xid154-node-reboot.log")],
        {"verdict": "power-cycle", "uuid": CARD_B, "reasons": ["Xid 154: Node Reboot Required"]},
        id="xid154-node-reboot-required-power-cycle",
    ),
    pytest.param(
        [*_log("xid154-none.log")],
        {"verdict": "human", "reasons": ["Xid 154: None (nothing to act on)"]},
        id="xid154-back-to-none-human",
    ),
    # nvidia-smi -q.
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:10:1c.0",
            "--nvidia-smi-q",
            str(SMI / "a100-remap-pending.txt"),
        ],
        {
            "verdict": "reset",
            "reasons": [
                "nvidia-smi: row remapping pending (takes effect at a GPU reset)",
                "config space not read",
            ],
        },
        id="smi-row-remap-pending-reset",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            GPU_B,
            "--nvidia-smi-q",
            str(SMI / "h100-remap-failure.txt"),
        ],
        {"verdict": "rma", "uuid": CARD_B},
        id="smi-row-remap-failure-rma-uuid-from-smi",
    ),
    pytest.param(
        [
            *_log("incident-gpu-node-b.log"),
            "--pci",
            GPU_B,
            "--lspci",
            str(LSPCI / "gpu-all-ff.txt"),
            "--nvidia-smi-q",
            str(SMI / "h100-remap-failure.txt"),
        ],
        {"verdict": "power-cycle"},
        id="smi-row-remap-failure-but-xid79-power-cycle-first",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            GPU_B,
            "--nvidia-smi-q",
            str(SMI / "h100-reset-required.txt"),
        ],
        {"verdict": "reset"},
        id="smi-reset-required-reset",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            GPU_B,
            "--nvidia-smi-q",
            str(SMI / "gpu-requires-reset.txt"),
        ],
        {
            "verdict": "reset",
            "reasons": ["nvidia-smi: GPU requires reset", "config space not read"],
        },
        id="smi-no-handle-requires-reset",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:02:00.0",
            "--nvidia-smi-q",
            str(SMI / "gpu-is-lost.txt"),
        ],
        {"verdict": "power-cycle"},
        id="smi-gpu-is-lost-power-cycle",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:03:00.0",
            "--nvidia-smi-q",
            str(SMI / "gpu-is-lost-index-form.txt"),
        ],
        {"verdict": "power-cycle", "reasons": ["nvidia-smi: GPU is lost."]},
        id="smi-gpu-is-lost-index-form-power-cycle",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:01:00.0",
            "--nvidia-smi-q",
            str(SMI / "gpu-is-lost-lower-case.txt"),
        ],
        {
            "verdict": "power-cycle",
            "reasons": ["nvidia-smi: GPU is lost. Reboot the system to recover this GPU"],
        },
        id="smi-gpu-is-lost-lower-case-reason-on-next-line-power-cycle",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:43:00.0",
            "--nvidia-smi-q",
            str(SMI / "h100-two-lost-list.txt"),
        ],
        {"verdict": "human", "reasons": ["nvidia-smi: Unknown Error"]},
        id="smi-list-unknown-error-is-the-gpus-own-record-human",
    ),
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            GPU_B,
            "--nvidia-smi-q",
            str(SMI / "clean-h100.txt"),
        ],
        {"verdict": "human", "uuid": CARD_B},
        id="smi-clean-human",
    ),
    # lspci -vv: config space read, links per GPU.
    pytest.param(
        [
            *_log("no-gpu-records.log"),
            "--pci",
            "0000:18:00.0",
            "--lspci",
            str(LSPCI / "gpus-vv-links.txt"),
        ],
        {"verdict": "human", "config_space_all_ff": False},
        id="lspci-vv-config-space-read",
    ),
]


def _readdressed(args: list[str], tmp: Path) -> list[str]:
    """``ADDRESS@fixture``: the single-device lspci fixture as if lspci -s ADDRESS printed it."""
    out = []
    for arg in args:
        if "@" in arg:
            address, name = arg.split("@")
            text = (LSPCI / name).read_text(encoding="utf-8")
            arg = str(tmp / name)
            Path(arg).write_text(address + text[text.index(" ") :], encoding="utf-8")
        out.append(arg)
    return out


@pytest.mark.parametrize(("args", "expected"), CASES)
def test_classify_fixture(args: list[str], expected: dict[str, Any], tmp_path: Path) -> None:
    out = classify(*_readdressed(args, tmp_path))
    for key in ("verdict", "uuid", "recovery_action", "config_space_all_ff", "pci", "reasons"):
        if key in expected:
            assert out[key] == expected[key], key
    if "dead" in expected:
        assert [d["kind"] for d in out["dead_records"]] == expected["dead"]
    if "codes" in expected:
        assert [x["code"] for x in out["xids"]] == expected["codes"]
    if "other_gpus" in expected:
        assert out["other_gpus"] == expected["other_gpus"]
    for key in ("surprise_down", "root_port"):
        if key in expected:
            assert out["aer"][key] == expected[key], key


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param("0000:99:00", id="kernel-form"),
        pytest.param("0000:99:00.0", id="sysfs-form"),
        pytest.param("00000000:99:00.0", id="dcgm-form"),
        pytest.param("00000000:99:00.0".upper(), id="dcgm-form-upper-case"),
    ],
)
def test_every_address_spelling_selects_the_same_gpu(spelling: str) -> None:
    out = classify(*_log("incident-gpu-node-b.log"), "--pci", spelling)
    assert (out["pci"], out["verdict"], out["uuid"]) == ("0000:99:00.0", "power-cycle", CARD_B)
    assert {x["pci"] for x in out["xids"]} == {"0000:99:00.0"}


def test_json_has_the_documented_keys_and_xid_details() -> None:
    out = classify(*_log("incident-gpu-node-b.log"), "--pci", "0000:99:00.0")
    assert {"verdict", "xids", "uuid", "recovery_action", "config_space_all_ff"} <= set(out)
    assert out["config_space_all_ff"] is None  # no --lspci given
    xid79 = out["xids"][0]
    assert xid79 == {
        "code": 79,
        "pci": "0000:99:00.0",
        "time": "2026-09-21T05:52:44.100224+0000",
        "message": "GPU has fallen off the bus.",
        "pid": None,
        "process": None,
        "mig": None,
        "caused_by": None,
        "line": 11,
        "mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "catalog_immediate_action": "RESTART_BM",
        "verdict_class": "power-cycle",
    }
    assert out["xids"][1]["verdict_class"] == "reset"  # Xid 154: the class of its action
    assert out["recovery_action_code"] == 1


def test_aer_file_with_port_lspci_and_counters_names_the_port() -> None:
    aer_file = FIXTURES / "lspci" / "rootport-sdes-new.txt"
    out = classify(*_log("incident-gpu-node-b.log"), "--pci", GPU_B, "--aer", str(aer_file))
    (port,) = out["aer"]["ports"]
    assert (port["address"], port["uncorrectable"], port["link_active"]) == (
        "0000:97:01.0",
        ["SDES"],
        False,
    )
    assert out["aer"]["surprise_down"] is True
    kinds = [e["kind"] for e in out["aer"]["events"]]
    assert kinds == ["received", "severity", "status", "error", "no-handler", "recovery-failed"]


def test_grep_counters_in_the_aer_file_become_port_counters() -> None:
    out = classify(
        *_log("xid154-only.log"), "--pci", "0000:99:00.0", "--aer", str(AER / "sysfs-grep.txt")
    )
    (port,) = out["aer"]["ports"]
    assert port["counters"]["aer_dev_fatal"] == {"SDES": 1, "TOTAL_ERR_FATAL": 1}
    assert out["aer"]["surprise_down"] is True


def test_text_output_has_every_section() -> None:
    result = CliRunner().invoke(
        evidence,
        [
            "classify",
            *_log("incident-gpu-node-b.log"),
            "--pci",
            "0000:99:00.0",
            "--lspci",
            str(LSPCI / "gpu-all-ff.txt"),
        ],
    )
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[1] == (
        "verdict: power-cycle (Xid 79, fallen-off-the-bus record, config space reads all ff)"
    )
    for section in (
        "-- Xids for this GPU --",
        "-- PCI config space --",
        "-- AER --",
        "-- recovery action --",
    ):
        assert section in lines
    assert "  other GPUs with records (not judged): 0000:3b:00.0" in lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--kernel-log", "/nonexistent/kern.log"], "does not exist", id="missing-file"
        ),
        pytest.param(
            [*_log("xid143-fsp.log"), "--pci", "99:zz"], "not a PCI address", id="bad-pci"
        ),
        pytest.param(
            [*_log("xid143-fsp.log"), "--output", "yaml"], "'yaml' is not one of", id="bad-output"
        ),
    ],
)
def test_bad_input_is_one_error_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(evidence, ["classify", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_binary_file_is_refused(tmp_path: Path) -> None:
    packed = tmp_path / "kern.log.gz"
    packed.write_bytes(gzip.compress((LOGS / "xid143-fsp.log").read_bytes(), mtime=0))
    result = CliRunner().invoke(evidence, ["classify", "--kernel-log", str(packed)])
    assert result.exit_code == 2
    assert f"{packed} is not a text file" in result.output


def test_broken_verdict_mapping_stops_with_file_and_line(tmp_path: Path) -> None:
    mapping = tmp_path / "classes.tsv"
    mapping.write_text("xid\tverdict\n79\tpower-cycle\n79\trma\n")
    result = CliRunner().invoke(
        evidence, ["classify", *_log("xid143-fsp.log"), "--xid-classes", str(mapping)]
    )
    assert result.exit_code == 1
    assert result.output == f"Error: {mapping}:3: duplicate Xid code 79\n"


def test_mapping_is_configurable_data(tmp_path: Path) -> None:
    mapping = tmp_path / "classes.tsv"
    mapping.write_text("xid\tverdict\n143\treset\n")
    out = classify(*_log("xid143-fsp.log"), "--xid-classes", str(mapping))
    assert out["verdict"] == "reset"


def test_lspci_vv_reports_each_gpus_link_and_a_downgraded_width() -> None:
    out = classify(
        *_log("no-gpu-records.log"),
        "--pci",
        "0000:18:00.0",
        "--lspci",
        str(LSPCI / "gpus-vv-links.txt"),
    )
    links = {link["pci"]: link for link in out["pcie_links"]}
    assert links["0000:18:00.0"] == {
        "pci": "0000:18:00.0",
        "cap_speed_gts": 16.0,
        "cap_width": 16,
        "speed_gts": 5.0,
        "width": 1,
        "width_downgraded": True,
        "speed_downgraded": True,
    }
    # An idle GPU's lower speed is by design: reported, not a downgrade of the width.
    assert (links["0000:2a:00.0"]["width_downgraded"], links["0000:2a:00.0"]["speed_gts"]) == (
        False,
        2.5,
    )


def test_text_report_names_the_dead_gpu_record_and_nvidia_smi_facts() -> None:
    result = CliRunner().invoke(
        evidence,
        [
            "classify",
            *_log("rminit-failed.log"),
            "--nvidia-smi-q",
            str(SMI / "a100-remap-pending.txt"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "-- driver records without an Xid --" in result.output
    assert "RmInitAdapter failed! (0x62:0x65:1792)" in result.output
    # nvidia-smi names another GPU (10:1c.0): said so, not judged.
    assert "nvidia-smi -q: no block for this GPU in its output" in result.output


def test_times_are_normalised_as_the_log_printed_them() -> None:
    out = classify(*_log("legacy-identity-no-pci.log"), "--pci", "0000:01:00.0")
    assert out["xids"][0]["time"] == "Mon Mar 6 10:21:44 2014"


def test_records_naming_no_gpu_go_to_the_one_gpu_the_identity_line_names(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    heartbeat = (LOGS / "gsp-heartbeat.log").read_text(encoding="utf-8")
    identity = "[ 10.1] NVRM: GPU at PCI:0000:05:00: GPU-509665ad-b600-ac93-3616-d754b23d636d\n"
    log.write_text(identity + heartbeat, encoding="utf-8")
    out = classify("--kernel-log", str(log))
    assert (out["pci"], out["verdict"], out["uuid"]) == (
        "0000:05:00.0",
        "reset",
        "GPU-509665ad-b600-ac93-3616-d754b23d636d",
    )
