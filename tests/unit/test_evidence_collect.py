"""`evidence collect` against a fake host: a temp sysfs tree and fake host commands."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click
import jinja2
import pytest
from click.testing import CliRunner

from guard.doors.hostexec import CommandResult, HostRunner
from guard.evidence import request
from guard.evidence.assess import Inputs, assess, offline_inputs
from guard.evidence.cli import JSON_MARK, Target, emit_collected, evidence, ledger
from guard.evidence.collect import PREVIOUS_BOOT, Host, gather, upstream_ports
from guard.evidence.report import Tables
from guard.xid_tables import load_catalog, load_classes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "kernel-log" / "scenarios"
GPU = "0000:99:00.0"
ROOT_PORT = "0000:97:01.0"
JOURNAL_0 = "journalctl -k -b 0 --no-pager -o short-iso-precise"
SMI = f"nvidia-smi -q -i {GPU}"
JOURNAL_1 = "journalctl -k -b -1 --no-pager -o short-iso-precise"
TIMEOUT = "timeout"
CLASSES = load_classes()
COUNTS_FIRST = ("--card-incidents", "1", "--slot-incidents", "1")


def _fixture(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text(encoding="utf-8")


@dataclass
class FakeRunner:
    """Answers host commands by their argv (the runner's prefix is not part of it); unknown ones
    fail; TIMEOUT answers as `guard.doors.hostexec` words a command past `timeout_s`."""

    answers: Mapping[str, str | tuple[str, str]]  # stdout, or (stdout, stderr); exit 0
    timeout_s: float = 20.0
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, argv: tuple[str, ...]) -> CommandResult:
        self.calls.append(argv)
        key = " ".join(argv)
        answer = self.answers.get(key)
        if answer is None:
            return CommandResult(argv, 1, "", f"no answer for {key}\n")
        if answer == TIMEOUT:
            return CommandResult(argv, None, "", "", f"timed out after {self.timeout_s:g}s")
        if isinstance(answer, tuple):
            return CommandResult(argv, 0, *answer)
        return CommandResult(argv, 0, answer)

    @property
    def commands(self) -> list[str]:
        return [" ".join(a) for a in self.calls]


def host_tree(root: Path, chain: Sequence[str] = (ROOT_PORT,), gpu: str = GPU) -> Path:
    """A sysfs tree: devices/pci0000:97/<bridges…>/<gpu> and bus/pci/devices links to each."""
    here = root / "sys" / "devices" / "pci0000:97"
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    for address in (*chain, gpu):
        here = here / address
        here.mkdir(parents=True)
        (bus / address).symlink_to(os.path.relpath(here, bus))
    for name in ("aer_dev_fatal", "aer_dev_correctable", "aer_dev_nonfatal"):
        (bus / chain[0] / name).write_text(_fixture("aer", name))
    return root


def incident_answers(**changes: str) -> dict[str, str]:
    answers = {
        JOURNAL_0: _fixture("kernel-log", "scenarios", "incident-gpu-node-b.log"),
        f"lspci -vvv -xxx -s {GPU}": _fixture("lspci", "gpu-all-ff.txt"),
        f"lspci -vvv -s {ROOT_PORT}": _fixture("lspci", "rootport-sdes-new.txt"),
        SMI: _fixture("nvidia-smi", "clean-h100.txt"),
    }
    answers.update(changes)
    return answers


def test_incident_on_fake_host_reads_everything_once(tmp_path: Path) -> None:
    runner = FakeRunner(incident_answers())
    host = Host(runner=runner, root=host_tree(tmp_path))
    found = assess(gather(host, GPU, 79), GPU, CLASSES)
    assert found.verdict.value == "power-cycle"
    assert found.uuid == "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
    assert found.root_port == ROOT_PORT
    assert found.surprise_down is True
    assert found.ports[0].counters["aer_dev_fatal"]["SDES"] == 1
    assert found.unknowns == ()
    assert runner.commands == [
        JOURNAL_0,
        f"lspci -vvv -xxx -s {GPU}",
        f"lspci -vvv -s {ROOT_PORT}",
        SMI,
    ]


def test_a_command_that_times_out_is_unknown_and_the_rest_is_still_read(tmp_path: Path) -> None:
    runner = FakeRunner(incident_answers(**{f"lspci -vvv -s {ROOT_PORT}": TIMEOUT}), timeout_s=5)
    host = Host(runner=runner, root=host_tree(tmp_path))
    found = assess(gather(host, GPU, 79), GPU, CLASSES)
    assert [(u.what, u.why) for u in found.unknowns] == [
        (f"lspci -vvv -s {ROOT_PORT}", "timed out after 5s")
    ]
    assert found.verdict.value == "power-cycle"
    assert found.ports[0].status is None
    assert found.config is not None and found.config.all_ff is True


def test_previous_boot_is_read_when_the_current_has_no_record(tmp_path: Path) -> None:
    runner = FakeRunner(
        incident_answers(
            **{
                JOURNAL_0: _fixture("kernel-log", "scenarios", "no-gpu-records.log"),
                JOURNAL_1: _fixture("kernel-log", "scenarios", "incident-gpu-node-b.log"),
                f"lspci -vvv -xxx -s {GPU}": _fixture("lspci", "gpu-normal.txt"),
            }
        )
    )
    found = assess(gather(Host(runner=runner, root=host_tree(tmp_path)), GPU, 79), GPU, CLASSES)
    assert found.kernel_log_source == PREVIOUS_BOOT
    assert [x.code for x in found.xids] == [79, 154]
    assert found.config is not None and found.config.all_ff is False
    assert found.verdict.value == "power-cycle"


def test_a_dead_gpu_record_of_the_current_boot_keeps_the_current_boot(tmp_path: Path) -> None:
    """After a power cycle the GPU may fail to initialise: that record, not the previous boot's
    Xid, is the news."""
    failed = _fixture("kernel-log", "scenarios", "rminit-failed.log").replace("98:00", "99:00")
    runner = FakeRunner(
        incident_answers(
            **{
                JOURNAL_0: failed,
                JOURNAL_1: _fixture("kernel-log", "scenarios", "incident-gpu-node-b.log"),
            }
        )
    )
    found = assess(gather(Host(runner=runner, root=host_tree(tmp_path)), GPU, None), GPU, CLASSES)
    assert found.kernel_log_source == JOURNAL_0
    assert [d.kind for d in found.dead] == ["init-failed"]
    assert found.verdict.value == "power-cycle"


def test_no_kernel_log_at_all_falls_back_to_the_reported_xid(tmp_path: Path) -> None:
    runner = FakeRunner(
        {f"lspci -vvv -xxx -s {GPU}": _fixture("lspci", "gpu-normal.txt"), JOURNAL_0: TIMEOUT}
    )
    found = assess(gather(Host(runner=runner, root=host_tree(tmp_path)), GPU, 48), GPU, CLASSES)
    assert found.kernel_log_source == "unknown (no kernel log could be read)"
    assert [u.what for u in found.unknowns] == [
        "journalctl -k -b 0",
        "dmesg --time-format iso",
        "journalctl -k -b -1",
        f"lspci -vvv -s {ROOT_PORT}",
        SMI,
    ]
    assert (found.verdict.value, found.reasons) == ("reset", ("Xid 48",))


def test_dmesg_is_read_when_journalctl_fails(tmp_path: Path) -> None:
    runner = FakeRunner(
        {"dmesg --time-format iso": _fixture("kernel-log", "scenarios", "xid143-fsp.log")}
    )
    found = assess(
        gather(Host(runner=runner, root=tmp_path), "0000:41:00.0", None), "0000:41:00.0", CLASSES
    )
    assert found.kernel_log_source == "dmesg --time-format iso"
    assert found.verdict.value == "rma"
    assert ("sysfs 0000:41:00.0", "no /sys/bus/pci/devices entry (GPU removed?)") in [
        (u.what, u.why) for u in found.unknowns
    ]


NO_JOURNAL = "No journal files were found.\n"


@pytest.mark.parametrize(
    "empty",
    [
        pytest.param(("", NO_JOURNAL), id="no-journal-on-stderr"),
        pytest.param((NO_JOURNAL, ""), id="no-journal-on-stdout"),
        pytest.param(("-- No entries --\n", ""), id="no-entries"),
    ],
)
def test_an_empty_journal_is_no_journal_and_dmesg_is_read(
    tmp_path: Path, empty: tuple[str, str]
) -> None:
    """Where journald keeps no journal, journalctl exits 0 with nothing (or its one line): that
    is no kernel log, so dmesg is read, and then the previous boot, whose journal is empty too."""
    runner = FakeRunner(
        incident_answers(
            **{
                JOURNAL_0: empty,
                JOURNAL_1: empty,
                "dmesg --time-format iso": _fixture(
                    "kernel-log", "scenarios", "incident-gpu-node-b.log"
                ),
            }
        )
    )
    found = assess(gather(Host(runner=runner, root=host_tree(tmp_path)), GPU, 79), GPU, CLASSES)
    assert found.kernel_log_source == "dmesg --time-format iso"
    why = "no kernel lines in the journal" if "No entries" in empty[0] else "no journal"
    assert [(u.what, u.why.split(" (")[0]) for u in found.unknowns] == [("journalctl -k -b 0", why)]
    assert [x.code for x in found.xids] == [79, 154]
    assert found.verdict.value == "power-cycle"
    assert runner.commands[:2] == [JOURNAL_0, "dmesg --time-format iso"]


def test_an_empty_journal_and_no_dmesg_read_the_previous_boot(tmp_path: Path) -> None:
    runner = FakeRunner(
        incident_answers(
            **{
                JOURNAL_0: ("", NO_JOURNAL),
                JOURNAL_1: _fixture("kernel-log", "scenarios", "incident-gpu-node-b.log"),
            }
        )
    )
    found = assess(gather(Host(runner=runner, root=host_tree(tmp_path)), GPU, 79), GPU, CLASSES)
    assert found.kernel_log_source == PREVIOUS_BOOT
    assert [str(u) for u in found.unknowns][:2] == [
        "journalctl -k -b 0: no journal (No journal files were found.)",
        "dmesg --time-format iso: exit 1: no answer for dmesg --time-format iso",
    ]


def test_unreadable_sysfs_is_unknown_with_the_reason(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "root-is-a-file"
    not_a_dir.write_text("")
    inputs = gather(Host(runner=FakeRunner({}), root=not_a_dir), GPU, None)
    path = not_a_dir / "sys" / "bus" / "pci" / "devices" / GPU
    assert (f"sysfs {GPU}", f"cannot read {path}: Not a directory") in [
        (u.what, u.why) for u in inputs.unknowns
    ]


@pytest.mark.parametrize(
    ("chain", "roles"),
    [
        pytest.param((ROOT_PORT,), [(ROOT_PORT, "root port, parent bridge")], id="direct"),
        pytest.param(
            (ROOT_PORT, "0000:98:00.0", "0000:98:10.0"),
            [(ROOT_PORT, "root port"), ("0000:98:10.0", "parent bridge")],
            id="behind-a-pcie-switch",
        ),
    ],
)
def test_upstream_ports_come_from_the_sysfs_link(
    tmp_path: Path, chain: tuple[str, ...], roles: list[tuple[str, str]]
) -> None:
    root = host_tree(tmp_path, chain)
    runner = FakeRunner({})
    assert upstream_ports(Host(runner=runner, root=root), GPU) == chain
    inputs = gather(Host(runner=runner, root=root), GPU, None)
    assert [(p.address, p.role) for p in inputs.ports] == roles


def test_collect_writes_nothing_on_the_host(tmp_path: Path) -> None:
    root = host_tree(tmp_path)
    before = sorted((str(p), p.lstat().st_mtime_ns) for p in root.rglob("*"))
    os.chmod(root, stat.S_IRUSR | stat.S_IXUSR)
    try:
        gather(Host(runner=FakeRunner(incident_answers()), root=root), GPU, 79)
    finally:
        os.chmod(root, stat.S_IRWXU)
    assert sorted((str(p), p.lstat().st_mtime_ns) for p in root.rglob("*")) == before


@pytest.mark.parametrize(
    ("argv", "ok", "why"),
    [
        pytest.param(["sleep", "30"], False, "timed out after 0.3s", id="hanging-command"),
        pytest.param(
            ["sh", "-c", "echo partial; echo 'lspci: cannot open' >&2; exit 3"],
            False,
            "exit 3: lspci: cannot open",
            id="failing-command",
        ),
        pytest.param(
            ["/nonexistent/journalctl"],
            False,
            "cannot start /nonexistent/journalctl: No such file or directory",
            id="missing-binary",
        ),
        pytest.param(["sh", "-c", "echo fine"], True, "", id="working-command"),
    ],
)
def test_run_command_words_each_outcome_in_one_line(argv: list[str], ok: bool, why: str) -> None:
    result = HostRunner(0.3).run(tuple(argv))
    assert (result.ok, result.why) == (ok, why)


def test_the_host_runs_real_commands_with_its_prefix_and_timeout(tmp_path: Path) -> None:
    # The prefix turns every command into a real `sleep` that outlives the timeout.
    host = Host(root=tmp_path, timeout_s=0.2, prefix=("sh", "-c", "exec sleep 30", "sh"))
    result = host.run("journalctl", "-k")
    assert (result.argv, result.why) == (("journalctl", "-k"), "timed out after 0.2s")
    echo = Host(root=tmp_path, prefix=("env", "WHERE=host")).run("sh", "-c", "echo $WHERE")
    assert (echo.ok, echo.stdout, echo.argv) == (True, "host\n", ("sh", "-c", "echo $WHERE"))


# --- the command line, end to end: fake nsenter, journalctl and lspci on PATH -------------


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """nsenter drops its options and runs the command; the commands answer from fixtures."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "nsenter", 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"')
    journal = LOGS / "incident-gpu-node-b.log"
    _script(
        bin_dir / "journalctl",
        f'case "$*" in *"-b 0"*) cat {journal} ;; *) echo "no such boot" >&2; exit 1 ;; esac',
    )
    _script(
        bin_dir / "lspci",
        f'case "$*" in "-vvv -xxx -s {GPU}") cat {FIXTURES / "lspci" / "gpu-all-ff.txt"} ;;'
        f' "-vvv -s {ROOT_PORT}") exec sleep 30 ;; esac',
    )
    # nvidia-smi of a lost GPU: its one line and a non-zero exit are the evidence.
    lost = FIXTURES / "nvidia-smi" / "gpu-is-lost.txt"
    _script(bin_dir / "nvidia-smi", f"sed s/0000:02:00.0/{GPU}/ {lost}; exit 15")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def _collect(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    root = tmp_path / "host"
    if not root.exists():
        host_tree(root)
    args = [
        "collect",
        "--node",
        "gpu-node-b",
        "--pci",
        "00000000:99:00.0",
        "--xid",
        "79",
        "--host-root",
        str(root),
        "--timeout-s",
        "0.5",
        *extra,
    ]
    result = CliRunner().invoke(evidence, args, env=env)
    return result.exit_code, result.output


def test_collect_prints_report_request_and_one_json_line(tmp_path: Path, fake_bin: Path) -> None:
    code, output = _collect(tmp_path, *COUNTS_FIRST)
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] == f"== gpu-node-guard evidence: node gpu-node-b, GPU {GPU} =="
    assert lines[1].startswith("verdict: power-cycle (")
    assert f"  lspci -vvv -s {ROOT_PORT}: timed out after 0.5s" in lines
    assert "-- request draft --" in lines
    assert "History: First recorded incident for this card and slot." in lines
    assert lines[-1].startswith(JSON_MARK)
    assert sum(line.startswith(JSON_MARK) for line in lines) == 1
    record = json.loads(lines[-1].removeprefix(JSON_MARK))
    assert (record["node"], record["pci"], record["verdict"]) == ("gpu-node-b", GPU, "power-cycle")
    assert record["unknown"] == [
        {"what": f"lspci -vvv -s {ROOT_PORT}", "why": "timed out after 0.5s"}
    ]
    assert record["request"].startswith("Subject: gpu-node-b: GPU 0000:99:00.0 needs cold power")
    assert record["nvidia_smi"]["no_handle"].startswith("GPU is lost.")
    assert "nvidia-smi: GPU is lost." in " ".join(record["reasons"])


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(("--request-template", "/proc/self/cmdline"), id="option-is-gone"),
        pytest.param(("--history", "{{ 7*7 }}"), id="free-text-history-is-gone"),
    ],
)
def test_no_argument_can_name_or_carry_a_template(tmp_path: Path, extra: tuple[str, ...]) -> None:
    code, output = _collect(tmp_path, *extra)
    assert code == 2
    assert f"No such option '{extra[0]}'" in output


def test_the_environment_cannot_choose_the_template(tmp_path: Path, fake_bin: Path) -> None:
    ours = tmp_path / "ours.j2"
    ours.write_text("{{ cycler.__init__.__globals__.os.popen('id').read() }}\n")
    code, output = _collect(tmp_path, env={"GUARD_REQUEST_TEMPLATE": str(ours)})
    assert code == 0, output
    assert "Subject: gpu-node-b: GPU 0000:99:00.0 needs cold power cycle" in output.splitlines()


def _emit(tmp_path: Path, template: object, capsys: pytest.CaptureFixture[str]) -> list[str]:
    host_tree(tmp_path / "host")
    runner = FakeRunner(incident_answers())
    inputs = gather(Host(root=tmp_path / "host", runner=runner), GPU, 79)
    tables = Tables(CLASSES, load_catalog())
    target = Target("gpu-node-b", GPU, None, None)
    with pytest.raises(click.ClickException) as failed:
        emit_collected(inputs, tables, template, target)  # type: ignore[arg-type]
    return [*capsys.readouterr().out.splitlines(), failed.value.message]


def test_undefined_name_in_template_fails_after_the_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = request.load_template(jinja2.DictLoader({"request.md.j2": "{{ nodename }}\n"}))
    lines = _emit(tmp_path, template, capsys)
    assert lines[1].startswith("verdict: power-cycle")
    assert any(line.startswith(JSON_MARK) for line in lines)
    assert lines[-1] == "request template: 'nodename' is undefined"


def test_the_template_runs_sandboxed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Even a hostile template (a broken image) cannot reach Python: the sandbox refuses."""
    source = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    template = request.load_template(jinja2.DictLoader({"request.md.j2": source}))
    lines = _emit(tmp_path, template, capsys)
    assert lines[-1].startswith("request template: access to attribute '__init__'")
    assert lines[-1].endswith("is unsafe.")


def test_kernel_log_text_is_quoted_never_evaluated() -> None:
    """A template-looking Xid message (a workload can influence the kernel log) stays text."""
    draft = request.render(request.load_template(), _context_with_message("{{ 7*7 }} {% raw %}"))
    assert "{{ 7*7 }} {% raw %}" in draft


def _context_with_message(message: str) -> dict[str, object]:
    files = Inputs(
        kernel_log=(
            "2026-09-21T05:52:44.100224+0000 gpu-node-b kernel: NVRM: Xid (PCI:0000:99:00): 79, "
            f"pid=1, name=x, {message}\n"
        ),
        kernel_log_source="test",
        gpu_lspci=None,
        aer_text="",
    )
    tables = Tables(CLASSES, load_catalog())
    found = assess(offline_inputs(files, GPU, None), GPU, CLASSES)
    return request.context(found, tables, "gpu-node-b", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--pci", "gpu0"], "not a PCI address", id="bad-pci"),
        pytest.param(["--timeout-s", "0"], "--timeout-s", id="zero-timeout"),
        pytest.param(["--timeout-s", "nan"], "not a finite number", id="nan-timeout"),
        pytest.param(["--xid", "-1"], "--xid", id="negative-xid"),
        pytest.param(["--uuid", "GPU-{{7*7}}"], "is not a GPU UUID", id="bad-uuid"),
        pytest.param(["--node", "n;id"], "is not a node name", id="bad-node"),
        pytest.param(["--card-incidents", "2"], "give both --card-incidents and", id="half-counts"),
        pytest.param(
            ["--card-incidents", "x", "--slot-incidents", "1"],
            "--card-incidents",
            id="count-not-a-number",
        ),
    ],
)
def test_collect_bad_arguments_exit_non_zero(tmp_path: Path, args: list[str], message: str) -> None:
    base = ["collect", "--node", "n", "--pci", GPU, "--host-root", str(tmp_path)]
    result = CliRunner().invoke(evidence, [*base, *args])
    assert result.exit_code == 2
    assert message in result.output


# --- done when: the write-up's ledger changes the request's history sentence ------------------

CARD_B = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
NEW_CARD = "GPU-0badcafe-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("uuid", "asked", "phrases"),
    [
        pytest.param(
            CARD_B,
            "replace-card",
            ("This is incident #3 on this card", "please replace the card"),
            id="same-card-third-xid79-asks-for-replacement",
        ),
        pytest.param(
            NEW_CARD,
            "check-slot",
            ("slot 0000:99:00.0 on gpu-node-b has had 3 incidents", "riser, the slot and"),
            id="new-card-in-the-same-slot-asks-for-riser-slot-power",
        ),
    ],
)
def test_seed_ledger_history_reaches_the_request(
    tmp_path: Path, fake_bin: Path, uuid: str, asked: str, phrases: tuple[str, str]
) -> None:
    ledger_file = FIXTURES / "ledger" / "seed-configmap.yaml"
    counted = CliRunner().invoke(
        ledger,
        [
            "count",
            "--uuid",
            uuid,
            "--node",
            "gpu-node-b",
            "--pci",
            "0000:99:00",
            "--ledger",
            str(ledger_file),
            "--output",
            "json",
        ],
    )
    assert counted.exit_code == 0, counted.output
    summary = json.loads(counted.output)
    history = summary["next_sentence"]
    assert summary["next_history"] == asked
    assert all(phrase in history for phrase in phrases)
    counts = (
        "--card-incidents",
        str(summary["same_card"] + 1),
        "--slot-incidents",
        str(summary["same_slot"] + 1),
    )
    code, output = _collect(tmp_path, "--uuid", uuid, *counts)
    assert code == 0, output
    record = json.loads(output.splitlines()[-1].removeprefix(JSON_MARK))
    assert f"History: {history}\n" in record["request"]
    assert record["history"] == history
