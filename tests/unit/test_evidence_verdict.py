"""The verdict table, its precedence, and the bundled data files it is built from."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlparse

import pytest

from guard.evidence.kernel_log import DEAD_RECORDS
from guard.evidence.verdict import (
    DEAD_RECORD_CLASSES,
    RECOVERY_ACTION_CLASSES,
    RECOVERY_ACTIONS,
    Finding,
    decide,
)
from guard.xid_tables import (
    CATALOG_FILE,
    CLASSES_FILE,
    DATA_DIR,
    DataFileError,
    Repair,
    load_catalog,
    load_classes,
)

CLASSES = load_classes()


@pytest.mark.parametrize(
    ("codes", "fallen_off", "all_ff", "verdict"),
    [
        pytest.param([79], False, None, Repair.POWER_CYCLE, id="xid79-power-cycle"),
        pytest.param([], True, None, Repair.POWER_CYCLE, id="fallen-off-record-power-cycle"),
        pytest.param([], False, True, Repair.POWER_CYCLE, id="config-all-ff-power-cycle"),
        pytest.param([48], False, True, Repair.POWER_CYCLE, id="reset-class-but-all-ff"),
        pytest.param([143, 79], False, False, Repair.POWER_CYCLE, id="power-cycle-beats-rma"),
        pytest.param([143], False, False, Repair.RMA, id="xid143-rma"),
        pytest.param([143, 95], False, False, Repair.RMA, id="rma-beats-reset"),
        pytest.param([48], False, False, Repair.RESET, id="xid48-reset"),
        pytest.param([94], False, False, Repair.RESET, id="xid94-reset"),
        pytest.param([95], False, False, Repair.RESET, id="xid95-reset"),
        pytest.param([119], False, False, Repair.RESET, id="xid119-reset"),
        pytest.param([120], False, None, Repair.RESET, id="xid120-reset-config-unread"),
        pytest.param([13, 31, 43], False, False, Repair.HUMAN, id="user-code-human"),
        pytest.param([140], False, False, Repair.HUMAN, id="xid140-not-in-table-human"),
        pytest.param([], False, None, Repair.HUMAN, id="nothing-human"),
        pytest.param([154], False, False, Repair.HUMAN, id="xid154-alone-human"),
        pytest.param([154, 48], False, False, Repair.RESET, id="xid154-does-not-change-reset"),
    ],
)
def test_verdict_table_and_precedence(
    codes: list[int], fallen_off: bool, all_ff: bool | None, verdict: Repair
) -> None:
    assert decide(codes, fallen_off, all_ff, CLASSES).verdict is verdict


def test_reasons_say_why_and_mention_an_unread_config_space() -> None:
    decision = decide([48, 13], False, None, CLASSES)
    assert decision.reasons == ("Xid 48", "config space not read")
    assert decide([79], True, True, CLASSES).reasons == (
        "Xid 79",
        "fallen-off-the-bus record",
        "config space reads all ff",
    )


def test_xid154_never_counts_even_if_the_mapping_gives_it_a_class(tmp_path: Path) -> None:
    mapping = tmp_path / "classes.tsv"
    mapping.write_text("xid\tverdict\n154\treset\n")
    assert decide([154], False, False, load_classes(mapping)).verdict is Repair.HUMAN


def test_bundled_mapping_is_the_design_table() -> None:
    expected = {
        79: "power-cycle",
        48: "reset",
        94: "reset",
        95: "reset",
        119: "reset",
        120: "reset",
        143: "rma",
    }
    assert {code: v.value for code, v in CLASSES.classes.items()} == expected


def test_every_mapped_code_exists_in_nvidia_catalog() -> None:
    catalog = load_catalog()
    assert len(catalog) == 172
    assert sorted(set(CLASSES.classes) - set(catalog)) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "xid\tverdict\n79\tpower-cycle\n48\treboot\n",
            ":3: unknown verdict 'reboot' (expected one of power-cycle, rma, reset, human)",
            id="unknown-verdict",
        ),
        pytest.param("xid\n79\n", ":1: header lacks column(s) verdict", id="missing-column"),
        pytest.param(
            "xid\tverdict\n79\tpower-cycle\n48\n",
            ":3: 1 column(s), header has 2",
            id="short-row",
        ),
        pytest.param(
            "# c\nxid\tverdict\n79\tpower-cycle\n79\treset\n",
            ":4: duplicate Xid code 79",
            id="duplicate-code",
        ),
        pytest.param("xid\tverdict\nx79\treset\n", ":2: Xid code 'x79' is not a number", id="nan"),
        pytest.param("# only a comment\n", ": no header line", id="empty"),
    ],
)
def test_broken_mapping_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    mapping = tmp_path / "classes.tsv"
    mapping.write_text(text)
    with pytest.raises(DataFileError) as err:
        load_classes(mapping)
    assert str(err.value) == f"{mapping}{message}"
    assert "\n" not in str(err.value)


def _manifest() -> dict[str, dict[str, str]]:
    rows = [
        line.split("\t")
        for line in (DATA_DIR / "SOURCES.tsv").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    header, body = rows[0], rows[1:]
    return {row[0]: dict(zip(header, row, strict=True)) for row in body}


def test_every_bundled_data_file_is_in_the_manifest() -> None:
    bundled = {p.name for p in DATA_DIR.iterdir() if p.is_file() and p.name != "SOURCES.tsv"}
    assert bundled == set(_manifest())
    assert {CATALOG_FILE.name, CLASSES_FILE.name} <= bundled


@pytest.mark.parametrize("name", sorted(_manifest()))
def test_bundled_data_file_matches_its_hash_and_names_its_source(name: str) -> None:
    row = _manifest()[name]
    digest = hashlib.sha256((DATA_DIR / name).read_bytes()).hexdigest()
    assert digest == row["sha256"], f"{name} changed: update SOURCES.tsv and say why"
    url = urlparse(row["source_url"])
    assert (url.scheme, bool(url.netloc), bool(url.path)) == ("https", True, True)
    assert row["note"].strip()


@pytest.mark.parametrize(
    ("kind", "verdict"),
    [
        pytest.param("init-failed", Repair.POWER_CYCLE, id="rminitadapter-power-cycle"),
        pytest.param("gpu-lost", Repair.POWER_CYCLE, id="gpu-lost-power-cycle"),
        pytest.param("fsp-boot", Repair.POWER_CYCLE, id="fsp-boot-power-cycle-first"),
        pytest.param("gsp-timeout", Repair.RESET, id="gsp-timeout-reset"),
    ],
)
def test_dead_record_table(kind: str, verdict: Repair) -> None:
    assert DEAD_RECORD_CLASSES[kind] is verdict
    assert decide([], False, False, CLASSES, [Finding(verdict, kind)]).verdict is verdict


def test_every_dead_record_kind_has_a_class() -> None:
    assert set(DEAD_RECORD_CLASSES) == set(DEAD_RECORDS)


@pytest.mark.parametrize(
    ("action", "verdict"),
    [
        pytest.param(1, Repair.RESET, id="gpu-reset-required"),
        pytest.param(2, Repair.POWER_CYCLE, id="node-reboot-required"),
        pytest.param(3, Repair.HUMAN, id="drain-p2p"),
        pytest.param(4, Repair.RESET, id="drain-and-reset"),
        pytest.param(5, Repair.HUMAN, id="recover-imex-domain"),
        pytest.param(6, Repair.HUMAN, id="bus-reset"),
        pytest.param(7, Repair.POWER_CYCLE, id="system-reboot"),
    ],
)
def test_xid154_recovery_action_table(action: int, verdict: Repair) -> None:
    assert RECOVERY_ACTION_CLASSES[action] is verdict
    assert set(RECOVERY_ACTION_CLASSES) == set(RECOVERY_ACTIONS) - {0}


@pytest.mark.parametrize(
    ("findings", "all_ff", "verdict"),
    [
        pytest.param(
            [Finding(Repair.RESET, "Xid 154: GPU Reset Required")],
            True,
            Repair.POWER_CYCLE,
            id="driver-asks-reset-config-ff-power-cycle",
        ),
        pytest.param(
            [Finding(Repair.RMA, "row remap failure"), Finding(Repair.RESET, "remap pending")],
            False,
            Repair.RMA,
            id="rma-finding-beats-reset-finding",
        ),
        pytest.param(
            [Finding(Repair.HUMAN, "Xid 154: Drain P2P")],
            False,
            Repair.HUMAN,
            id="human-finding-is-a-reason",
        ),
    ],
)
def test_findings_rank_like_xids(findings: list[Finding], all_ff: bool, verdict: Repair) -> None:
    decision = decide([154], False, all_ff, CLASSES, findings)
    assert decision.verdict is verdict
    assert "no Xid" not in " ".join(decision.reasons)  # Xid 154 alone is not "no record"
