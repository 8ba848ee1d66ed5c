"""`gpu-node-guard fence set|lift` end to end on a fake host: a temp sysfs tree, and fake
nsenter, lspci and nvidia-smi on PATH (nvidia-smi keeps the compute mode in a file, as the
driver keeps it on the device)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from guard.fence.cli import fence
from guard.wire import parse_fence_summary
from tests.unit.test_evidence_collect import FIXTURES, host_tree

GPU = "0000:99:00.0"
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
OTHER = "GPU-99999999-5e6f-7a8b-9c0d-1e2f3a4b5c6d"

# The fake nvidia-smi: `-c` writes the mode to $SMI_STATE unless $SMI_IGNORE_SET (a driver that
# says yes and does nothing); the query prints `<bus id>, <uuid>, <mode>` from $SMI_READ_UUID;
# $SMI_GONE makes every call the lost-GPU answer. Every call is appended to $SMI_LOG.
NVIDIA_SMI = r"""
echo "$*" >> "$SMI_LOG"
if [ -n "$SMI_GONE" ]; then echo "No devices were found"; exit 6; fi
case "$*" in
  "-i "*" -c PROHIBITED") [ -n "$SMI_IGNORE_SET" ] || echo Prohibited > "$SMI_STATE"
      echo "Compute mode is set to PROHIBITED for GPU 00000000:99:00.0." ;;
  "-i "*" -c DEFAULT") [ -n "$SMI_IGNORE_SET" ] || echo Default > "$SMI_STATE"
      echo "Compute mode is set to DEFAULT for GPU 00000000:99:00.0." ;;
  "--query-gpu=pci.bus_id,uuid,compute_mode --format=csv,noheader -i "*)
      echo "00000000:99:00.0, ${SMI_READ_UUID}, $(cat "$SMI_STATE")" ;;
  "drain -p "*) [ -z "$SMI_DRAIN_FAILS" ] || { echo "Not supported" >&2; exit 3; } ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host root, with the fake commands on PATH; the GPU starts in compute mode Default."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "nsenter", 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"')
    normal = FIXTURES / "lspci" / "gpu-normal.txt"
    _script(bin_dir / "lspci", f'cat "${{FAKE_LSPCI:-{normal}}}"')
    _script(bin_dir / "nvidia-smi", NVIDIA_SMI)
    state = tmp_path / "mode"
    state.write_text("Default\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SMI_STATE", str(state))
    monkeypatch.setenv("SMI_LOG", str(tmp_path / "calls"))
    monkeypatch.setenv("SMI_READ_UUID", UUID)
    (tmp_path / "calls").write_text("")
    return host_tree(tmp_path / "root")


def _fence(host: Path, *args: str, **env: str) -> tuple[int, str, dict[str, str]]:
    log = host.parent / "termination-log"
    log.write_text("")  # kubelet creates it; the program only writes into it
    argv = [
        *args,
        "--pci",
        "00000000:99:00.0",
        "--uuid",
        UUID,
        "--host-root",
        str(host),
        "--timeout-s",
        "5",
        "--termination-log",
        str(log),
    ]
    result = CliRunner().invoke(fence, argv, env=env)
    text = log.read_text()
    return result.exit_code, result.output, json.loads(text) if text else {}


def _calls(host: Path) -> list[str]:
    return (host.parent / "calls").read_text().splitlines()


def _mode(host: Path) -> str:
    return (host.parent / "mode").read_text().strip()


def test_set_fences_the_gpu_and_reads_the_mode_back(host: Path) -> None:
    code, out, summary = _fence(host, "set")
    assert code == 0
    assert _mode(host) == "Prohibited"
    assert _calls(host) == [
        f"-i {UUID} -c PROHIBITED",
        f"--query-gpu=pci.bus_id,uuid,compute_mode --format=csv,noheader -i {UUID}",
    ]
    assert (summary["outcome"], summary["compute_mode"], summary["drain"]) == (
        "fenced",
        "Prohibited",
        "off",
    )
    assert parse_fence_summary(json.dumps(summary)).passed
    assert f"fence set gpu={GPU} uuid={UUID} outcome=fenced compute_mode=Prohibited" in out


def test_lift_sets_default_and_reads_it_back(host: Path) -> None:
    assert _fence(host, "set")[0] == 0
    code, _, summary = _fence(host, "lift")
    assert (code, summary["outcome"], summary["compute_mode"]) == (0, "lifted", "Default")
    assert _mode(host) == "Default"


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"SMI_IGNORE_SET": "1"}, "compute mode reads 'Default', not 'Prohibited'"),
        ({"SMI_READ_UUID": OTHER}, f"read-back names {GPU} {OTHER}"),
    ],
    ids=["mode-not-changed", "another-gpu"],
)
def test_no_success_when_the_read_back_differs(host: Path, env: dict[str, str], why: str) -> None:
    code, out, summary = _fence(host, "set", **env)
    assert code == 1
    assert summary["outcome"] == "mismatch" and why in summary["why"]
    assert not parse_fence_summary(json.dumps(summary)).passed
    assert "outcome=mismatch" in out


def test_a_lift_not_read_back_is_no_lift(host: Path) -> None:
    (host.parent / "mode").write_text("Prohibited\n")
    code, _, summary = _fence(host, "lift", SMI_IGNORE_SET="1")
    assert (code, summary["outcome"], summary["compute_mode"]) == (1, "mismatch", "Prohibited")


def test_a_gpu_gone_from_sysfs_is_absent_and_nvidia_smi_is_not_asked(host: Path) -> None:
    (host / "sys" / "bus" / "pci" / "devices" / GPU).unlink()
    code, _, summary = _fence(host, "set")
    assert (code, summary["outcome"]) == (1, "gpu-absent")
    assert "fallen off the bus" in summary["why"]
    assert _calls(host) == []


def test_a_gpu_reading_rev_ff_is_absent(host: Path) -> None:
    code, _, summary = _fence(host, "set", FAKE_LSPCI=str(FIXTURES / "lspci" / "gpu-all-ff.txt"))
    assert (code, summary["outcome"]) == (1, "gpu-absent")
    assert "rev ff" in summary["why"]
    assert _calls(host) == []


def test_a_gpu_nvml_cannot_find_is_absent(host: Path) -> None:
    code, _, summary = _fence(host, "set", SMI_GONE="1")
    assert (code, summary["outcome"]) == (1, "gpu-absent")
    assert "No devices were found" in summary["why"]


def test_a_missing_nvidia_smi_is_an_error_never_an_absent_gpu(host: Path) -> None:
    (host.parent / "bin" / "nvidia-smi").unlink()
    code, _, summary = _fence(host, "set")
    assert (code, summary["outcome"]) == (1, "error")


def test_drain_after_the_read_back_and_undone_before_the_lift(host: Path) -> None:
    assert _fence(host, "set", "--drain")[2]["drain"] == "done"
    assert _calls(host)[-1] == f"drain -p {GPU} -m 1"
    code, _, summary = _fence(host, "lift", "--drain")
    assert (code, summary["drain"]) == (0, "undone")
    assert _calls(host)[3:5] == [f"drain -p {GPU} -m 0", f"-i {UUID} -c DEFAULT"]


def test_a_failed_drain_is_reported_and_the_fence_stands(host: Path) -> None:
    code, _, summary = _fence(host, "set", "--drain", SMI_DRAIN_FAILS="1")
    assert (code, summary["outcome"], summary["drain"]) == (0, "fenced", "failed")
    assert "Not supported" in summary["why"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "--pci", "nope", "--uuid", UUID], "not a PCI address"),
        (["set", "--pci", GPU, "--uuid", "unknown"], "the fence needs the GPU's UUID"),
        (["lift", "--pci", GPU], "Missing option '--uuid'"),
    ],
    ids=["bad-pci", "unknown-uuid", "no-uuid"],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(fence, args)
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output


def test_a_host_root_it_cannot_read_is_an_error_never_an_absent_gpu(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    args = [
        "set",
        "--pci",
        GPU,
        "--uuid",
        UUID,
        "--host-root",
        str(tmp_path / "nothing"),
        "--termination-log",
        str(log),
    ]
    result = CliRunner().invoke(fence, args)
    summary = json.loads(log.read_text())
    assert (result.exit_code, summary["outcome"]) == (1, "error")
    assert "the host's /sys is not visible" in summary["why"]


def test_a_sys_the_kernel_refuses_is_the_error_outcome(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where /sys is unreadable (a confined pod: EACCES on stat, which root in the tests never
    meets) the fence ends in its documented `error` outcome, not a traceback."""
    real = Path.stat

    def refused(path: Path, *args: object, **kwargs: object) -> os.stat_result:
        if "/sys/bus/pci/devices" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "stat", refused)
    code, out, summary = _fence(host, "set")
    assert (code, summary["outcome"]) == (1, "error"), out
    assert summary["why"].startswith("cannot read the host ")
    assert "Permission denied" in summary["why"] and "Traceback" not in out
    assert _calls(host) == []  # nvidia-smi never asked
