"""`ledger count`: same-card and same-slot counts from a ledger file or the cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from guard.evidence.cli import ledger
from guard.evidence.ledger_cli import data_of
from guard.example.promserver import free_port
from guard.ledger import count as ledger_count
from guard.model import PromView
from guard.read import build_snapshot, load_cluster_file
from guard.settings import Settings
from tests.builders import NOW

LEDGERS = Path(__file__).resolve().parents[1] / "fixtures" / "ledger"
CARD_B = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
CARD_A = "GPU-0f3e9d1c-2b4a-4c6d-8e7f-9a0b1c2d3e4f"
NEW_CARD = "GPU-0badcafe-0000-4000-8000-000000000001"


def count(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(ledger, ["count", *args])
    return result.exit_code, result.output


def count_json(uuid: str, node: str, pci: str, ledger_file: str) -> dict[str, Any]:
    code, output = count(
        "--uuid",
        uuid,
        "--node",
        node,
        "--pci",
        pci,
        "--ledger",
        str(LEDGERS / ledger_file),
        "--output",
        "json",
    )
    assert code == 0, output
    parsed: dict[str, Any] = json.loads(output)
    return parsed


@pytest.mark.parametrize(
    ("ledger_file", "uuid", "node", "pci", "card", "slot", "next_history"),
    [
        pytest.param(
            "seed-configmap.yaml",
            CARD_B,
            "gpu-node-b",
            "0000:99:00.0",
            2,
            2,
            "replace-card",
            id="seed-card-twice-next-is-replacement",
        ),
        pytest.param(
            "seed-configmap.json",
            CARD_B,
            "gpu-node-b",
            "00000000:99:00.0",
            2,
            2,
            "replace-card",
            id="configmap-json-dcgm-address",
        ),
        pytest.param(
            "seed-configmap.yaml",
            NEW_CARD,
            "gpu-node-b",
            "0000:99:00",
            0,
            2,
            "check-slot",
            id="new-card-same-slot-next-is-riser-check",
        ),
        pytest.param(
            "seed-configmap.yaml",
            CARD_B,
            "gpu-node-c",
            "0000:3b:00.0",
            2,
            0,
            "replace-card",
            id="card-moved-to-another-node-keeps-history",
        ),
        pytest.param(
            "seed-data-with-notes.yaml",
            CARD_A,
            "gpu-node-a",
            "0000:03:00.0",
            1,
            1,
            "inspect-card",
            id="bare-data-mapping-second-incident-inspect",
        ),
        pytest.param(
            "seed-data-with-notes.yaml",
            NEW_CARD,
            "gpu-node-x",
            "0000:01:00.0",
            0,
            0,
            "first",
            id="never-seen-first",
        ),
    ],
)
def test_counts_and_next_history(
    ledger_file: str, uuid: str, node: str, pci: str, card: int, slot: int, next_history: str
) -> None:
    out = count_json(uuid, node, pci, ledger_file)
    assert (out["same_card"], out["same_slot"], out["next_history"]) == (card, slot, next_history)


def test_manual_lines_count_and_unparsed_lines_are_reported_not_dropped() -> None:
    out = count_json(CARD_B, "gpu-node-b", "0000:99:00.0", "seed-data-with-notes.yaml")
    assert (out["same_card"], out["parsed_lines"]) == (2, 3)
    assert out["unparsed"] == [
        {"node": "gpu-node-b", "line": "power cycled by infra 9/15, ip_vs fixed by hand"}
    ]
    assert out["last_card_incident"] == "2026-09-21T05:52:44Z"


def test_a_list_counts_the_archives_as_the_guard_does() -> None:
    """The ledger, its archive (a line in both counted once), not the unlabelled look-alike: the
    count the guard's own snapshot of the same file makes."""
    out = count_json(CARD_B, "gpu-node-b", "0000:99:00.0", "with-archives.yaml")
    assert (out["same_card"], out["same_slot"], out["parsed_lines"]) == (4, 4, 4)
    assert out["archives"] == ["gpu-fault-ledger-archive-1"]
    assert out["last_card_incident"] == "2026-09-21T05:52:44Z"
    s = Settings(prometheus_url="http://127.0.0.1:9")
    snap = build_snapshot(NOW, load_cluster_file(LEDGERS / "with-archives.yaml", s), PromView(), s)
    guard = ledger_count(snap.ledger, CARD_B, "gpu-node-b", "0000:99:00.0")
    assert (guard.same_card, guard.same_slot) == (out["same_card"], out["same_slot"])
    code, text = count(
        "--uuid",
        CARD_B,
        "--node",
        "gpu-node-b",
        "--pci",
        "0000:99:00.0",
        "--ledger",
        str(LEDGERS / "with-archives.yaml"),
    )
    assert code == 0
    assert text.splitlines()[-1] == "archives counted with the ledger: gpu-fault-ledger-archive-1"


def test_text_output() -> None:
    code, output = count(
        "--uuid",
        CARD_B,
        "--node",
        "gpu-node-b",
        "--pci",
        "0000:99:00.0",
        "--ledger",
        str(LEDGERS / "seed-data-with-notes.yaml"),
    )
    assert code == 0
    lines = output.splitlines()
    assert lines[0] == f"same card {CARD_B}: 2 incident(s), any node (last 2026-09-21T05:52:44Z)"
    assert lines[1] == "same slot gpu-node-b 0000:99:00.0: 2 incident(s)"
    assert lines[2].startswith("next incident (replace-card): This is incident #3 on this card")
    assert lines[3] == "lines: 3 parsed, 1 not parsed (kept as they are)"
    assert lines[4] == "  not parsed [gpu-node-b]: power cycled by infra 9/15, ip_vs fixed by hand"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param([], 2, "give exactly one of --ledger FILE and --from-cluster", id="no-source"),
        pytest.param(
            ["--ledger", str(LEDGERS / "seed-configmap.yaml"), "--from-cluster"],
            2,
            "give exactly one of",
            id="two-sources",
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "not-a-mapping.yaml")],
            1,
            "not-a-mapping.yaml: not a ConfigMap or a node: text mapping",
            id="list-not-mapping",
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "value-not-text.yaml")],
            1,
            "node 'gpu-node-b': value is not text",
            id="value-not-text",
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "broken.yaml")],
            1,
            "broken.yaml is not YAML (line 3)",
            id="broken-yaml",
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "missing.yaml")], 2, "does not exist", id="missing-file"
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "with-archives.yaml"), "--configmap", "other"],
            1,
            "with-archives.yaml: a List without ConfigMap other or its archives",
            id="list-without-the-ledger",
        ),
        pytest.param(
            ["--from-cluster", "--namespace", "Bad NS"],
            2,
            "'Bad NS' is not a namespace",
            id="namespace-not-a-label",
        ),
        pytest.param(
            ["--from-cluster", "--configmap", "ledger/../x"],
            2,
            "is not a ConfigMap name",
            id="configmap-name-with-a-slash",
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "seed-configmap.yaml"), "--uuid", "card-7"],
            2,
            "'card-7' is not a GPU UUID",
            id="uuid-that-counts-nothing",
        ),
        pytest.param(
            ["--ledger", str(LEDGERS / "seed-configmap.yaml"), "--node", "Node 7"],
            2,
            "'Node 7' is not a node name",
            id="node-that-counts-nothing",
        ),
    ],
)
def test_bad_ledger_input_is_one_line(args: list[str], code: int, message: str) -> None:
    exit_code, output = count("--uuid", CARD_B, "--node", "n", "--pci", "0000:99:00.0", *args)
    assert exit_code == code
    assert message in output
    assert "Traceback" not in output


def test_bad_pci_is_a_usage_error() -> None:
    code, output = count("--uuid", CARD_B, "--node", "n", "--pci", "slot-3", "--ledger", "x")
    assert code == 2
    assert "not a PCI address" in output


def test_unreachable_cluster_is_one_error_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code, output = count(
        "--uuid",
        CARD_B,
        "--node",
        "n",
        "--pci",
        "0000:99:00.0",
        "--from-cluster",
        "--kubeconfig",
        str(kubeconfig),
    )
    assert code == 1
    assert output.startswith("Error: get configmap gpu-node-guard/gpu-fault-ledger: cannot reach")
    assert len(output.splitlines()) == 1


def test_missing_kubeconfig_is_one_error_line(tmp_path: Path) -> None:
    code, output = count(
        "--uuid",
        CARD_B,
        "--node",
        "n",
        "--pci",
        "0000:99:00.0",
        "--from-cluster",
        "--kubeconfig",
        str(tmp_path / "none"),
    )
    assert code == 1
    assert output.startswith(f"Error: cannot load Kubernetes config from {tmp_path / 'none'}: ")
    assert len(output.splitlines()) == 1


def test_a_configmap_without_data_is_an_empty_ledger() -> None:
    assert data_of({"kind": "ConfigMap", "data": None}, "f") == {}
    assert data_of({"kind": "ConfigMap", "data": {"gpu-node-b": "x"}}, "f") == {"gpu-node-b": "x"}
