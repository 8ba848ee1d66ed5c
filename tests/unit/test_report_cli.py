"""`gpu-node-guard report`: its text and JSON on the write-up fixture and the bundled example,
and bad input as one line and a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from guard.cli import cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "writeup-episodes.yaml"
EXAMPLE = ROOT / "guard" / "example" / "cluster-snapshot.yaml"
ARGS = ["--at", "2026-10-18T05:22:00Z", "--since", "2026-08-01T00:00:00Z"]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["report", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_gives_the_writeups_gpu_hours() -> None:
    code, out, err = run("--cluster-snapshot", str(FIXTURE), *ARGS, "-o", "json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["schema"] == "gpu-node-guard.report/v1"
    by_start = {(i["node"], i["start"]): i for i in doc["isolations"]}
    first = by_start[("gpu-node-b", "2026-09-10T13:03:59Z")]["gpuHours"]
    second = by_start[("gpu-node-b", "2026-09-21T06:05:10Z")]["gpuHours"]
    node_a = by_start[("gpu-node-a", "2026-09-10T05:22:00Z")]["gpuHours"]
    assert first == {"faulted": 108.75, "healthy": 761.252}  # 4 d 12:45:01 x 1 and x 7
    assert round(second["faulted"] + second["healthy"], 1) == 203.3
    assert node_a == {"faulted": 912.0, "healthy": 2736.0}
    assert doc["overBudget"] == [
        {
            "node": "gpu-node-a",
            "verdict": "reset",
            "ageSeconds": 38 * 86400.0,
            "budgetSeconds": 4 * 3600.0,
        }
    ]
    ep2 = next(i for i in doc["incidents"] if i["at"] == "2026-09-21T05:52:44Z")
    assert ep2["onsetToCordonSeconds"] == 746 and ep2["repairToReturnSeconds"] == 300


def test_text_names_the_parts() -> None:
    code, out, _ = run("--cluster-snapshot", str(FIXTURE), *ARGS, "--budget", "reset=1000h")
    assert code == 0
    assert "GPU-hours out of service: 4750.5 GPU-h (faulted 1075.4, healthy held 3675.1)" in out
    assert "gpu-node-b     node  power-cycle  2026-09-10T13:03:59Z  2026-09-15T01:49:00Z" in out
    assert out.rstrip().endswith("OVER THEIR QUARANTINE BUDGET\n(none)")


def test_the_bundled_example_reports() -> None:
    code, out, err = run("--cluster-snapshot", str(EXAMPLE), "--at", "2026-09-21T05:55:00Z")
    assert code == 0, err
    # Its only incident's node serves again and no record says since when: counted as nothing.
    assert "gpu-node-b     node  power-cycle  2026-09-10T13:03:59Z  (not recorded)" in out


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    notes = tmp_path / "notes.yaml"
    notes.write_text("just text\n")
    for args, code in (
        (["--cluster-snapshot", str(notes)], 1),
        (["--cluster-snapshot", str(FIXTURE), *ARGS, "--html", str(tmp_path / "no" / "x")], 1),
        (["--cluster-snapshot", str(FIXTURE), "--since", "2026-10-19T00:00:00Z", *ARGS[:2]], 2),
        (["--cluster-snapshot", str(FIXTURE), "--budget", "rma=0"], 2),
    ):
        got, _, err = run(*args)
        lines = [ln for ln in err.splitlines() if ln.startswith("Error")]
        assert got == code and len(lines) == 1 and "Traceback" not in err, (args, err)
