"""The kernel-log parser against real lines, every prefix format and multi-line records."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.evidence.kernel_log import (
    FallenOff,
    RecoveryChange,
    for_gpu,
    gpus,
    parse_kernel_log,
    parse_xid,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel-log"
SCENARIOS = FIXTURES / "scenarios"


def _none(text: str) -> str | None:
    return None if text == "-" else text


def _real_line_cases() -> list[pytest.ParameterSet]:
    lines = (FIXTURES / "real-lines.tsv").read_text(encoding="utf-8").splitlines()
    rows = [
        r.split("\t")
        for r in (FIXTURES / "real-lines.expected.tsv").read_text(encoding="utf-8").splitlines()
        if r and not r.startswith(("#", "n\t"))
    ]
    assert len(rows) == len(lines), "real-lines.expected.tsv must cover every real line"
    cases = []
    for row, raw in zip(rows, lines, strict=True):
        n, kind, code = row[0], row[1], row[2]
        line = raw.split("\t", 1)[0]  # the second column names the source
        name = f"line{int(n):02d}-{kind}{'' if code == '-' else code}"
        cases.append(pytest.param(line, row, id=name))
    return cases


@pytest.mark.parametrize(("line", "expected"), _real_line_cases())
def test_real_line_parses_as_expected(line: str, expected: list[str]) -> None:
    _, kind, code, pci, time, pid, process, extra = expected
    log = parse_kernel_log(line)
    if kind == "xid":
        assert len(log.xids) == 1
        record = log.xids[0]
        assert (record.code, record.pci, record.time) == (int(code), pci, _none(time))
        assert record.pid == (int(pid) if pid != "-" else None)
        assert record.process == _none(process)
        if extra.startswith("mig="):
            assert record.mig == extra.removeprefix("mig=")
        if extra.startswith("recovery="):
            value, text = extra.removeprefix("recovery=").split(":", 1)
            assert record.recovery is not None
            assert (record.recovery.new, record.recovery.new_text) == (int(value), text)
    elif kind == "identity":
        assert log.uuids == ((pci, extra.removeprefix("uuid=")),)
        assert log.xids == ()
    elif kind == "fallen-off":
        assert [(f.pci, f.time, f.form) for f in log.fallen_off] == [
            (pci, _none(time), extra.removeprefix("form="))
        ]
        assert log.xids == ()
    else:
        assert (log.xids, log.fallen_off, log.uuids) == ((), (), ())


def _prefix_cases() -> list[pytest.ParameterSet]:
    cases = []
    text = (FIXTURES / "prefix-formats.tsv").read_text(encoding="utf-8")
    for row in text.splitlines():
        if not row or row.startswith("#"):
            continue
        line, time, source = row.split("\t")
        name = source.split(" (")[0].replace(" ", "-").replace(",", "")
        cases.append(pytest.param(line, _none(time), id=name))
    return cases


@pytest.mark.parametrize(("line", "time"), _prefix_cases())
def test_every_prefix_format_yields_the_xid_and_its_time(line: str, time: str | None) -> None:
    (record,) = parse_kernel_log(line).xids
    assert (record.code, record.pci, record.time) == (79, "0000:01:00.0", time)
    assert record.message == "GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "probe-fallen-off-dmesg.log",
            (FallenOff("0000:99:00.0", "4.517203", 3, "probe"),),
            id="probe-record-dmesg-continuation-lines",
        ),
        pytest.param(
            "probe-fallen-off-journal.log",
            (FallenOff("0000:99:00.0", "Sep 21 06:31:12", 1, "probe"),),
            id="probe-record-journal-prefix-on-each-line",
        ),
        pytest.param(
            "legacy-fallen-off.log",
            (FallenOff("0000:01:00.0", "Mar 3 14:02:11", 1, "legacy"),),
            id="legacy-one-liner",
        ),
    ],
)
def test_fallen_off_records_without_an_xid_number(
    name: str, expected: tuple[FallenOff, ...]
) -> None:
    log = parse_kernel_log((SCENARIOS / name).read_text(encoding="utf-8"))
    assert log.fallen_off == expected
    assert log.xids == ()


def test_probe_start_without_its_end_is_not_a_fallen_off_record() -> None:
    text = "[ 4.5] NVRM: The NVIDIA GPU 0000:99:00.0\n[ 4.6] a\n[ 4.7] b\n[ 4.8] c\n"
    assert parse_kernel_log(text).fallen_off == ()


def test_probe_record_joined_on_one_line() -> None:
    text = (
        "kernel: NVRM: The NVIDIA GPU 0000:99:00.0 NVRM: (PCI ID: 10de:2330) installed in this "
        "system has NVRM: fallen off the bus and is not responding to commands."
    )
    assert [f.pci for f in parse_kernel_log(text).fallen_off] == ["0000:99:00.0"]


@pytest.mark.parametrize(
    ("line", "code", "pci", "mig", "caused_by"),
    [
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 45, pid=7194, name=python3, "
            "Ch 00000008 caused by previous Xid 94",
            45,
            "0000:01:00.0",
            "GPU-I:05 GPU-CI:01",
            94,
            id="mig-compute-instance-and-root-cause",
        ),
        pytest.param(
            "NVRM: Xid (0000:01:00): 13, 0001 00000000 000090c0 00001b0c",
            13,
            "0000:01:00.0",
            None,
            None,
            id="legacy-address-without-pci-prefix",
        ),
        pytest.param(
            "NVRM: Xid (0003:00): 8, Channel 00000001",
            8,
            None,
            None,
            None,
            id="2008-address-without-domain-is-unmatched",
        ),
        pytest.param(
            "Jan  5 01:02:03 h kernel: NVRM: Xid (PCI:0000:3B:00): 79, GPU has fallen off the bus.",
            79,
            "0000:3b:00.0",
            None,
            None,
            id="upper-case-hex-address",
        ),
    ],
)
def test_address_forms_and_suffixes(
    line: str, code: int, pci: str | None, mig: str | None, caused_by: int | None
) -> None:
    record = parse_xid(line)
    assert record is not None
    assert (record.code, record.pci, record.mig, record.caused_by) == (code, pci, mig, caused_by)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            RecoveryChange(0, 2, "Node Reboot Required"),
            id="named-value",
        ),
        pytest.param(
            "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x6 (Unknown)",
            RecoveryChange(1, 6, "Bus Reset"),
            id="r610-value-the-driver-calls-unknown",
        ),
        pytest.param(
            "GPU recovery action changed from 0x0 to 0x7",
            RecoveryChange(0, 7, "System Reboot"),
            id="hex-without-words",
        ),
        pytest.param(
            "GPU recovery action changed from 0x0 (None) to 0x1f (Something New)",
            RecoveryChange(0, 31, "Something New"),
            id="unknown-value-keeps-the-printed-words",
        ),
    ],
)
def test_xid154_values_come_from_the_hex(message: str, expected: RecoveryChange) -> None:
    record = parse_xid(f"NVRM: Xid (PCI:0008:01:00): 154, {message}")
    assert record is not None
    assert record.recovery == expected


def test_records_are_split_per_gpu_and_identity_follows_the_gpu() -> None:
    log = parse_kernel_log((SCENARIOS / "user-code-here-hardware-there.log").read_text())
    assert gpus(log) == ("0000:38:00.0", "0000:91:00.0")
    user = for_gpu(log, "0000:38:00.0")
    hardware = for_gpu(log, "0000:91:00.1")  # function does not matter: Xid lines carry none
    assert [x.code for x in user.xids] == [13, 13, 13, 43]
    assert [x.code for x in hardware.xids] == [79]
    assert hardware.uuids == (("0000:91:00.0", "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"),)
    assert user.uuids == ()


def test_nvswitch_sxid_and_unrelated_lines_are_ignored() -> None:
    log = parse_kernel_log((SCENARIOS / "no-gpu-records.log").read_text())
    assert (log.xids, log.fallen_off, log.uuids) == ((), (), ())


@pytest.mark.parametrize(
    ("line", "kind", "pci"),
    [
        pytest.param(
            "[ 903.6] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)",
            "init-failed",
            "0000:98:00.0",
            id="rminitadapter",
        ),
        pytest.param(
            "[87669.726564] NVRM: RmInitAdapter failed! (0x26:0xffff:1375)",
            "init-failed",
            None,
            id="rminitadapter-old-no-address",
        ),
        pytest.param(
            "Mar 21 21:42:01 kernel: NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out",
            "gsp-timeout",
            None,
            id="gsp-heartbeat-instance-not-address",
        ),
        pytest.param(
            "[37803.140481] NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out",
            "gsp-timeout",
            None,
            id="gsp-heartbeat-no-instance",
        ),
        pytest.param(
            "[  279.949533] NVRM: kfspDumpDebugState_GH100: GPU 0000:01:00",
            "fsp-boot",
            "0000:01:00.0",
            id="fsp-debug-dump-names-the-gpu",
        ),
        pytest.param(
            "kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU lost from the "
            "bus [NV_ERR_GPU_IS_LOST] (0x0000000F) returned from rmStatus @ "
            "kernel_ce_gv100.c:106",
            "gpu-lost",
            None,
            id="gpu-lost-assertion",
        ),
        pytest.param(
            "[   35.564060] NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus "
            "[NV_ERR_GPU_IS_LOST] (0x0000000F) returned from nvdEngineDumpCallbackHelper(pGpu, "
            "pPrbEnc, pNvDumpState, pEngineCallback) @ nv_debug_dump.c:274",
            "gpu-lost",
            None,
            id="gpu-lost-check-failed",
        ),
    ],
)
def test_dead_gpu_records_from_real_lines(line: str, kind: str, pci: str | None) -> None:
    (record,) = parse_kernel_log(line).dead
    assert (record.kind, record.pci) == (kind, pci)
    assert record.text.startswith("NVRM:")


def test_an_xid_line_is_never_also_a_dead_record() -> None:
    line = "NVRM: Xid (PCI:0000:01:00): 143, Error status 0x1 while polling for FSP boot complete"
    log = parse_kernel_log(line)
    assert ([x.code for x in log.xids], log.dead) == ([143], ())


def test_pre_2015_identity_line_without_pci() -> None:
    log = parse_kernel_log("NVRM: GPU at 0000:01:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b")
    assert log.uuids == (("0000:01:00.0", "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"),)


def test_dead_record_keeps_its_time_and_text_from_nvrm_on() -> None:
    line = "[ 903.6] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)"
    (record,) = parse_kernel_log(line).dead
    assert (record.time, record.line) == ("903.6", 1)
    assert record.text == "NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)"
