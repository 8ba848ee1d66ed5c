"""`gpu-node-guard status` as a command: output formats, bad input as one line, the plugin."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from guard.cli import cli
from tests.builders import ALL_NAMESPACES, CORDON_AT, KEYS, PCI, UUID

ARGS = ["status", "--at", "2026-09-21T05:55:00Z"]


def cluster_file(tmp_path: Path) -> Path:
    """A guard-cordoned node still in the boot of its cordon, and a healthy one."""

    def node(name: str, annotations: dict[str, str], unschedulable: bool) -> dict[str, object]:
        return {
            "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"bootID": "boot-1"},
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": "7"},
            },
        }

    cordon = {
        KEYS.reason: "xid-79",
        KEYS.at: CORDON_AT,
        KEYS.boot_id: "boot-1",
        KEYS.gpu_capacity: "8",
        KEYS.gpu: f"{PCI} {UUID}",
    }
    items = [node("gpu-node-a", cordon, True), node("gpu-node-c", {}, False), *ALL_NAMESPACES]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_without_prometheus_the_report_says_what_it_could_not_see(tmp_path):
    result = CliRunner().invoke(cli, [*ARGS, "--cluster-snapshot", str(cluster_file(tmp_path))])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:3] == [
        "prometheus: none (no --prometheus-url): Xid, GPU loss, row remap and GPU pods not seen",
        "breaker: closed, 1 of 5 isolations (nodes cordoned + devices tainted)"
        " (4 more isolations allowed)",
        "pending candidates: unknown (no --prometheus-url)",
    ]
    assert lines[5].startswith("gpu-node-a  isolated-waiting-for-power-cycle  xid-79  55m  ")
    assert "gpu-node-c" not in result.output


def test_json_output_is_one_document(tmp_path):
    args = [*ARGS, "--cluster-snapshot", str(cluster_file(tmp_path)), "-o", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["candidates"], [n["node"] for n in doc["nodes"]]) == (None, ["gpu-node-a"])
    assert doc["prometheus"] == {"url": "", "seen": False, "error": ""}


def test_a_failing_prometheus_still_prints_the_report_and_exits_1(tmp_path):
    args = [
        *ARGS,
        "--cluster-snapshot",
        str(cluster_file(tmp_path)),
        "--prometheus-url",
        "http://127.0.0.1:9",
        "--prometheus-limits",
        "timeout=2",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    first = result.output.splitlines()[0]
    assert first.startswith("prometheus: query ") and "cannot reach http://127.0.0.1:9" in first
    assert first.endswith("; shown as without Prometheus")
    assert "pending candidates: unknown (Prometheus failed)" in result.output
    assert "gpu-node-a  isolated-waiting-for-power-cycle" in result.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["-o", "yaml"], 2, "Invalid value for '-o' / '--output'", id="bad-output"),
        pytest.param(["--breaker-max-nodes", "0"], 2, "--breaker-max-nodes", id="bad-setting"),
        pytest.param(
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            1,
            "Error: cannot load Kubernetes config from /nonexistent/kubeconfig: ",
            id="unreadable-kubeconfig",
        ),
        pytest.param(
            ["--kubeconfig", "KUBECONFIG", "--context", "nope"],
            1,
            "Error: cannot load Kubernetes config from KUBECONFIG: ",
            id="unknown-context",
        ),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, code, message):
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []}
        )
    )
    args = [str(config) if a == "KUBECONFIG" else a for a in args]
    result = CliRunner().invoke(cli, [*ARGS, *args])
    assert result.exit_code == code
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert message.replace("KUBECONFIG", str(config)) in error
    assert "Traceback" not in result.output


def test_the_kubectl_plugin_is_the_status_command(tmp_path):
    plugin = shutil.which("kubectl-gpu_guard", path=str(Path(sys.executable).parent))
    assert plugin, "pip install -e . puts kubectl-gpu_guard beside the interpreter"
    proc = subprocess.run(
        [plugin, "--cluster-snapshot", str(cluster_file(tmp_path)), *ARGS[1:], "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [n["state"] for n in json.loads(proc.stdout)["nodes"]] == [
        "isolated-waiting-for-power-cycle"
    ]
    usage = subprocess.run([plugin, "--help"], capture_output=True, text=True, timeout=60)
    assert usage.stdout.startswith("Usage: kubectl gpu-guard [OPTIONS]")


@pytest.mark.parametrize(
    ("left_out", "lacks"),
    [
        pytest.param(("Pod",), ["Pods (the guard's Job results)"], id="no-pods"),
        pytest.param(
            ("ConfigMap", "Pod"),
            [
                "Pods (the guard's Job results)",
                "anything from namespace gpu-node-guard (the ledger)",
                "anything from namespace gpu-node-guard-jobs (the guard's Jobs)",
            ],
            id="one-namespace-without-A",
        ),
    ],
)
def test_a_snapshot_that_lacks_what_the_report_needs_is_one_warning(
    tmp_path: Path, left_out: tuple[str, ...], lacks: list[str]
) -> None:
    """docs/status.md's old command had no -A: 0 incidents and "the next cycle creates job/…"
    for a Job already running, without a word. Now one line says what is missing and how."""
    path = cluster_file(tmp_path)
    listed = yaml.safe_load(path.read_text())
    listed["items"] = [i for i in listed["items"] if i["kind"] not in left_out]
    path.write_text(yaml.safe_dump(listed))
    result = CliRunner().invoke(cli, [*ARGS, "--cluster-snapshot", str(path)])
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("WARN")]
    assert warning == (
        f"WARN cluster snapshot {path} lacks {'; '.join(lacks)}: the report may miss incidents "
        "and Jobs; take it with `kubectl get nodes,jobs,configmaps,events,pods -A -o yaml > "
        "cluster.yaml`"
    )


def test_a_whole_snapshot_says_nothing_more(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [*ARGS, "--cluster-snapshot", str(cluster_file(tmp_path))])
    assert result.exit_code == 0 and "WARN" not in result.stderr, result.stderr
