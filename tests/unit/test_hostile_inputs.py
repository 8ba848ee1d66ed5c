"""Hostile inputs, one row each: the exact outcome (exit code, one line naming the problem on
stderr, no traceback, nothing written) of every command that reads a file, the cluster, the
environment or a termination-log path (issue 22).

Input classes: bounded files (FIFO, device, oversized, binary, not UTF-8, deep JSON/YAML, alias
bombs, huge integers, duplicates), kernel logs (long, repeated, huge numbers), the Kubernetes
door (exec plugins, endless pagination, duplicates, no Nodes), catch-alls, termination logs,
settings (misspelt names, empty values, quoting, redaction, the Prometheus timeout). The agent's
endpoint has its own file (test_agent_hostile.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import responses
import yaml
from click.testing import CliRunner

from guard import files
from guard.cli import cli
from guard.doors import kube_exec
from guard.doors.kube import MAX_PAGES, Kube, KubeError
from guard.doors.retry import Backoff
from guard.read import SnapshotError, read_cluster, require_nodes
from guard.settings import CRONJOB_DEADLINE_S, WATCH_MARGIN_S, Settings
from guard.settings_flags import build_settings, settings_options, unknown_env_lines
from guard.wire import write_termination_message
from tests.builders import ALL_NAMESPACES
from tests.numpy_backend import cpu

REPO = Path(__file__).resolve().parents[2]
CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
TRACEBACK = re.compile(r"Traceback|^\s+File \"", re.M)


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def invoke(args: list[str], env: dict[str, str] | None = None, obj: object = None) -> Outcome:
    result = CliRunner().invoke(cli, args, env=env, prog_name="gpu-node-guard", obj=obj)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"uncaught {result.exception!r}") from result.exception
    return Outcome(result.exit_code, result.stdout, result.stderr)


def assert_one_line(out: Outcome, code: int, *needles: str) -> None:
    """`code`, exactly one stderr line, containing every needle; no traceback anywhere."""
    assert not TRACEBACK.search(out.stderr + out.stdout), out.stderr
    assert out.code == code, (out.code, out.stderr)
    lines = [line for line in out.lines() if not line.startswith(("Usage:", "Try "))]
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# ---- Hostile files ------------------------------------------------------------------------


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _sparse(size: int) -> Callable[[Path], Path]:
    def make(p: Path) -> Path:
        with open(p, "wb") as fh:
            fh.truncate(size)
        return p

    return make


def _bytes(data: bytes) -> Callable[[Path], Path]:
    def make(p: Path) -> Path:
        p.write_bytes(data)
        return p

    return make


def _alias_bomb(levels: int = 9) -> bytes:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*l{i - 1}"] * 9)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


DEEP_JSON = b"[" * 100_000 + b"]" * 100_000
JUST_TOO_DEEP_JSON = b'{"kind": "List", "items": ' + b"[" * 120 + b"]" * 120 + b"}"
DEEP_YAML_FLOW = b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
DEEP_YAML_BLOCK = "".join(f"{'  ' * i}k{i}:\n" for i in range(150)).encode() + b"  " * 150 + b"v\n"
RECURSIVE_ALIAS = b"a: &a [1, *a]\n"
HUGE_INT_JSON = b'{"kind": "List", "items": [' + b"9" * 20_000_000 + b"]}"
HUGE_INT_YAML = b"kind: List\nitems: [" + b"9" * 100_000 + b"]\n"
NUL = b"kind: List\x00\nitems: []\n"
NOT_UTF8 = b"kind: List\nitems: [\xff\xfe]\n"

FILE_KINDS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (_fifo, "is not a regular file"),
    "dev-zero": (lambda p: Path("/dev/zero"), "is not a regular file"),
    "dev-null": (lambda p: Path("/dev/null"), "is not a regular file"),
    "nul-bytes": (_bytes(NUL), "is not a text file"),
    "not-utf8": (_bytes(NOT_UTF8), "is not UTF-8 text"),
    "deep-json": (_bytes(DEEP_JSON), "nested deeper than 100 levels"),
    "just-too-deep-json": (_bytes(JUST_TOO_DEEP_JSON), "nested deeper than 100 levels"),
    "deep-yaml-flow": (_bytes(DEEP_YAML_FLOW), "nested deeper than 100 levels"),
    "deep-yaml-block": (_bytes(DEEP_YAML_BLOCK), "nested deeper than 100 levels"),
    "alias-bomb": (_bytes(_alias_bomb()), "aliases expand to more than"),
    "many-aliases": (
        _bytes(b"a: &a x\nb: [" + b",".join([b"*a"] * 1500) + b"]\n"),
        "more than 1000 YAML aliases",
    ),
    "recursive-alias": (_bytes(RECURSIVE_ALIAS), "refers to a node that contains it"),
    "huge-int-json": (_bytes(HUGE_INT_JSON), "a value cannot be read"),
    "huge-int-yaml": (_bytes(HUGE_INT_YAML), "a value cannot be read"),
}
TEXT_ONLY = ("fifo", "dev-zero", "dev-null", "nul-bytes", "not-utf8")


def _prepare(tmp_path: Path, kind: str) -> tuple[Path, str]:
    make, message = FILE_KINDS[kind]
    return make(tmp_path / f"input-{kind}"), message


@pytest.mark.parametrize("kind", [*FILE_KINDS, "oversized"])
def test_status_cluster_snapshot(tmp_path: Path, kind: str) -> None:
    if kind == "oversized":
        path, message = _sparse(files.SNAPSHOT_MAX_BYTES + 1)(tmp_path / "big"), "larger than"
    else:
        path, message = _prepare(tmp_path, kind)
    out = invoke(["status", "--cluster-snapshot", str(path)])
    assert_one_line(out, 1, "Error: ", "cluster snapshot", message)
    assert out.stdout == ""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep-json", "alias-bomb", "huge-int-json"])
def test_run_cluster_snapshot_aborts_before_any_query(tmp_path: Path, kind: str) -> None:
    path, message = _prepare(tmp_path, kind)
    out = invoke(["run", "--cluster-snapshot", str(path), "--prometheus-url", "http://127.0.0.1:9"])
    assert out.code == 1 and not TRACEBACK.search(out.stderr)
    problem = [line for line in out.lines() if message in line]
    assert len(problem) == 1 and " ERROR abort " in problem[0], out.stderr
    assert [line for line in out.lines() if " ERROR " in line] == problem


@pytest.mark.parametrize("kind", [*FILE_KINDS, "oversized"])
def test_ledger_count_file(tmp_path: Path, kind: str) -> None:
    if kind == "oversized":
        path, message = _sparse(files.LEDGER_FILE_MAX_BYTES + 1)(tmp_path / "big"), "larger than"
    else:
        path, message = _prepare(tmp_path, kind)
    if kind == "just-too-deep-json":
        message = "nested deeper"
    if kind == "huge-int-json":  # 20 MB: over the ledger file's own limit first
        message = "larger than the limit of 16 MiB"
    args = ["ledger", "count", "--uuid", CARD, "--node", "n", "--pci", "0000:99:00.0"]
    out = invoke([*args, "--ledger", str(path)])
    assert_one_line(out, 1, "Error: ", "ledger file", message)


KUBECONFIG_KINDS = [
    "fifo",
    "dev-zero",
    "nul-bytes",
    "deep-yaml-flow",
    "deep-yaml-block",
    "alias-bomb",
    "many-aliases",
    "recursive-alias",
    "huge-int-yaml",
]


@pytest.mark.parametrize("kind", [*KUBECONFIG_KINDS, "oversized"])
def test_status_kubeconfig(tmp_path: Path, kind: str) -> None:
    if kind == "oversized":
        path, message = _sparse(files.KUBECONFIG_MAX_BYTES + 1)(tmp_path / "big"), "larger than"
    else:
        path, message = _prepare(tmp_path, kind)
    out = invoke(["status", "--kubeconfig", str(path)])
    assert_one_line(out, 1, "Error: cannot load Kubernetes config from", message)


@pytest.mark.parametrize("kind", ["fifo", "alias-bomb", "deep-yaml-flow"])
def test_ledger_count_from_cluster_kubeconfig(tmp_path: Path, kind: str) -> None:
    path, message = _prepare(tmp_path, kind)
    args = ["ledger", "count", "--uuid", CARD, "--node", "n", "--pci", "0000:99:00.0"]
    out = invoke([*args, "--from-cluster", "--kubeconfig", str(path)])
    assert_one_line(out, 1, "Error: cannot load Kubernetes config", message)


@pytest.mark.parametrize(
    ("option", "kind"),
    [(o, k) for o in ("--kernel-log", "--lspci", "--aer") for k in ("fifo", "dev-zero", "dev-null")]
    + [("--kernel-log", "nul-bytes"), ("--lspci", "nul-bytes"), ("--aer", "nul-bytes")],
)
def test_classify_files(tmp_path: Path, option: str, kind: str) -> None:
    path, message = _prepare(tmp_path, kind)
    log = tmp_path / "kern.log"
    log.write_text("nothing\n")
    args = ["evidence", "classify", "--kernel-log", str(log), option, str(path)]
    out = invoke(args)
    assert_one_line(out, 2, f"Invalid value for {option}", message)


@pytest.mark.parametrize(
    ("option", "limit"),
    [
        ("--kernel-log", files.KERNEL_LOG_MAX_BYTES),
        ("--lspci", files.SMALL_TEXT_MAX_BYTES),
        ("--aer", files.SMALL_TEXT_MAX_BYTES),
    ],
)
def test_classify_oversized_files_are_refused_before_reading(
    tmp_path: Path, option: str, limit: int
) -> None:
    big = _sparse(limit + 1)(tmp_path / "big")
    log = tmp_path / "kern.log"
    log.write_text("nothing\n")
    out = invoke(["evidence", "classify", "--kernel-log", str(log), option, str(big)])
    assert_one_line(out, 2, f"Invalid value for {option}", "larger than the limit")


# ---- The bounded reader itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("a: [1, 2", "is not YAML", id="unclosed"),
        pytest.param("a: b: c", "is not YAML", id="scanner"),
        pytest.param("- " * 101 + "x", "nested deeper", id="deep-block-sequence"),
        pytest.param("{" * 101 + "}" * 101, "nested deeper", id="deep-flow-mapping"),
        pytest.param("a: !!python/object:os.system x", "is not YAML", id="python-tag"),
        pytest.param("a: 1\n---\nb: 2\n", "2 YAML documents", id="two-documents"),
    ],
)
def test_load_yaml_refuses(text: str, problem: str) -> None:
    with pytest.raises(files.FileInputError, match=problem):
        files.load_yaml(text, "input")


@pytest.mark.parametrize(
    ("text", "doc"),
    [
        pytest.param("- " * 99 + "x", None, id="99-deep-is-fine"),
        pytest.param("a: &a [1, 2]\nb: *a\n", {"a": [1, 2], "b": [1, 2]}, id="one-alias"),
        pytest.param("", None, id="empty"),
    ],
)
def test_load_yaml_accepts(text: str, doc: object) -> None:
    got = files.load_yaml(text, "input")
    if doc is not None:
        assert got == doc


def test_read_bounded_reads_a_file_that_grows_no_further_than_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert files.read_bounded(path, 100, "file") == b"x" * 100
    with pytest.raises(files.FileInputError, match="larger than the limit"):
        files.read_bounded(path, 99, "file")


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(files.FileInputError, match="No such file"):
        files.read_bounded(tmp_path / "none", 10, "token file")


def test_a_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(files.FileInputError, match=r"is not a regular file|Is a directory"):
        files.read_bounded(tmp_path, 10, "token file")


def _child_maxrss_kib(code: str) -> int:
    """Peak RSS of a fresh interpreter running `code` (ru_maxrss of its only child)."""
    wrapper = (
        "import resource, subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {code!r}], check=False,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", wrapper],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return int(done.stdout.strip())


def test_peak_rss_of_an_alias_bomb_snapshot_stays_small(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_bytes(_alias_bomb(12))
    code = (
        "import sys\nfrom guard.cli import main\n"
        f"sys.argv = ['gpu-node-guard', 'status', '--cluster-snapshot', {str(path)!r}]\nmain()"
    )
    assert _child_maxrss_kib(code) < 150 * 1024


def test_peak_rss_of_a_60_mb_kernel_log_stays_small(tmp_path: Path) -> None:
    # Read whole, this log is 60 MB of bytes plus its text and a list of its 400,000 lines;
    # streamed, one line at a time. The 100 MB measurement is in docs/evidence.md.
    path = tmp_path / "kern.log"
    line = b"[1.0] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=p, Graphics Exception\n"
    with open(path, "wb") as fh:
        fh.write(b"x" * (30 * 1024 * 1024) + b"\n")  # one 30 MB line
        fh.write(line * (30 * 1024 * 1024 // len(line)))
    code = (
        "import sys\nfrom guard.cli import main\n"
        f"sys.argv = ['gpu-node-guard', 'evidence', 'classify', '--kernel-log', {str(path)!r}]\n"
        "main()"
    )
    assert _child_maxrss_kib(code) < 100 * 1024


# ---- Kernel log contents --------------------------------------------------------------------


def _classify(tmp_path: Path, text: str, *extra: str) -> Outcome:
    log = tmp_path / "kern.log"
    log.write_text(text)
    return invoke(["evidence", "classify", "--kernel-log", str(log), *extra])


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): " + "7" * 20_000_000 + ", x",
            "none",
            id="xid-of-20-million-digits",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): 79, pid=" + "1" * 100_000 + ", name=a, b",
            "power-cycle",
            id="pid-of-100k-digits",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x"
            + "f" * 100_000
            + " (x) to 0x1 (y)",
            "human",
            id="recovery-hex-of-100k",
        ),
        pytest.param(
            "NVRM: Xid (PCI:" + "0" * 100_000 + "): 79, x", "none", id="address-of-100k-zeros"
        ),
        pytest.param(
            "pcieport 0000:97:01.0: AER: [" + "5" * 10_000 + "] Surprise Down",
            "none",
            id="aer-bit-of-10k-digits",
        ),
        pytest.param(
            "\u202e NVRM: Xid (PCI:0000:01:00): 79, \x1b[31mred",
            "power-cycle",
            id="control-characters",
        ),
    ],
)
def test_kernel_log_lines_with_huge_numbers(tmp_path: Path, line: str, verdict: str) -> None:
    out = _classify(tmp_path, line + "\n", "--output", "json")
    assert out.code == 0 and out.stderr == "", out.stderr[-500:]
    import json

    doc = json.loads(out.stdout)
    if verdict != "none":
        assert doc["verdict"] == verdict


def test_1500_repeated_xids_are_one_summary_line_in_the_draft() -> None:
    from guard.evidence import request
    from guard.evidence.assess import Inputs, assess
    from guard.evidence.report import Tables
    from guard.xid_tables import load_catalog, load_classes

    lines = [
        f"[{1000 + i}.5] NVRM: Xid (PCI:0000:01:00): 13, pid={i}, name=p, Graphics"
        for i in range(1500)
    ]
    lines.append("[9.0] NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=a, GPU has fallen off the bus.")
    tables = Tables(load_classes(), load_catalog())
    found = assess(Inputs("\n".join(lines), "f"), None, tables.classes)
    draft = request.render(request.load_template(), request.context(found, tables, "node-1", None))
    xid_lines = [line for line in draft.splitlines() if "Xid 13" in line]
    assert len(xid_lines) == 1
    assert "×1,500 (first 1000.5, last 2499.5)" in xid_lines[0]
    assert len(draft.splitlines()) < 40
    assert found.verdict.value == "power-cycle"


def test_a_draft_with_many_codes_is_bounded() -> None:
    from guard.evidence import request
    from guard.evidence.assess import Inputs, assess
    from guard.evidence.report import Tables
    from guard.xid_tables import load_catalog, load_classes

    lines = [f"NVRM: Xid (PCI:0000:01:00): {code}, " + "m" * 400 for code in range(1, 200)]
    tables = Tables(load_classes(), load_catalog())
    found = assess(Inputs("\n".join(lines), "f"), None, tables.classes)
    draft = request.render(request.load_template(), request.context(found, tables, "node-1", None))
    assert len(draft) <= request.MAX_DRAFT_CHARS + 200
    assert "more Xid codes" in draft or "draft cut at" in draft


def test_the_text_report_says_how_many_records_it_left_out(tmp_path: Path) -> None:
    text = "".join(f"NVRM: Xid (PCI:0000:01:00): 13, pid={i}, name=p, G\n" for i in range(1000))
    out = _classify(tmp_path, text)
    assert out.code == 0
    assert "800 more records not listed; counted: Xid 13 ×1,000" in out.stdout
    assert out.stdout.count("  Xid 13  ") <= 200


# ---- The Kubernetes door --------------------------------------------------------------------


def _kubeconfig(tmp_path: Path, user: dict[str, object]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _exec_user(script: str) -> dict[str, object]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "/bin/sh",
            "args": ["-c", script],
            "interactiveMode": "Never",
        }
    }


@pytest.mark.parametrize(
    ("script", "message"),
    [
        pytest.param("sleep 30", "did not answer within 1 s", id="never-answers"),
        pytest.param(
            "echo 'token expired' >&2; exit 3", "exited 3: token expired", id="fails-with-stderr"
        ),
        pytest.param("echo not-json", "printed no ExecCredential JSON", id="not-json"),
        pytest.param(
            'echo \'{"apiVersion": "v0", "kind": "ExecCredential", "status": {}}\'',
            "answered apiVersion 'v0'",
            id="wrong-version",
        ),
        pytest.param("echo '[]'", "no status in its answer", id="not-an-object"),
        pytest.param("exec yes", "printed over 1 MiB", id="prints-without-end"),
        pytest.param("exec /nonexistent/plugin", "exited 127", id="plugin-missing"),
    ],
)
def test_exec_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, message: str
) -> None:
    monkeypatch.setattr(kube_exec, "EXEC_TIMEOUT_S", 1.0)
    path = _kubeconfig(tmp_path, _exec_user(script))
    out = invoke(["status", "--kubeconfig", str(path)])
    assert_one_line(out, 1, "Error: cannot load Kubernetes config from", message)
    assert "ERROR:root:" not in out.stderr


def _kube() -> Kube:
    import requests

    return Kube(requests.Session(), "https://api.test", Backoff.for_seconds(5.0))


NODES = "https://api.test/api/v1/nodes"


@responses.activate
def test_a_continue_token_chain_is_bounded() -> None:
    for i in range(MAX_PAGES + 5):
        responses.add(responses.GET, NODES, json={"items": [], "metadata": {"continue": f"t{i}"}})
    with pytest.raises(KubeError, match=f"more than {MAX_PAGES} pages"):
        list(_kube().nodes())
    assert len(responses.calls) == MAX_PAGES


@responses.activate
def test_a_repeated_continue_token_stops_the_list() -> None:
    responses.add(responses.GET, NODES, json={"items": [], "metadata": {"continue": "same"}})
    with pytest.raises(KubeError, match="repeated a continue token"):
        list(_kube().nodes())
    assert len(responses.calls) == 2


@responses.activate
def test_items_that_are_not_a_list_are_one_error() -> None:
    responses.add(responses.GET, NODES, json={"items": {"a": 1}})
    with pytest.raises(KubeError, match="items are not a list"):
        list(_kube().nodes())


def _cluster_answers(nodes: list[dict[str, object]]) -> None:
    responses.add(responses.GET, NODES, json={"items": nodes})
    empty: dict[str, list[object]] = {"items": []}
    for path in (
        "/apis/batch/v1/namespaces/gpu-node-guard-jobs/jobs",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "/api/v1/namespaces/gpu-node-guard-jobs/pods",
        "/api/v1/namespaces/gpu-node-guard/configmaps",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/devicetaintrules",
        "/apis/resource.k8s.io/v1/namespaces/gpu-node-guard-jobs/resourceclaims",
    ):
        responses.add(responses.GET, "https://api.test" + path, json=empty)
    responses.add(
        responses.GET,
        "https://api.test/api/v1/namespaces/gpu-node-guard/configmaps/gpu-fault-ledger",
        status=404,
        json={},
    )


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        pytest.param([], "the API server listed no Nodes", id="zero-nodes"),
        pytest.param(
            [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}],
            "lists a Node more than once: 'a'",
            id="node-twice",
        ),
        pytest.param(
            [{"metadata": {"name": "a", "uid": "u1"}}, {"metadata": {"name": "b", "uid": "u1"}}],
            "lists a Node more than once: uid 'u1'",
            id="uid-twice",
        ),
    ],
)
@responses.activate
def test_what_the_api_lists_is_checked(nodes: list[dict[str, object]], message: str) -> None:
    _cluster_answers(nodes)
    with pytest.raises(SnapshotError, match=re.escape(message)):
        require_nodes(read_cluster(_kube(), Settings()))


def test_a_snapshot_file_with_a_node_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text(
        '{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "a"}},'
        ' {"kind": "Node", "metadata": {"name": "a"}}]}'
    )
    out = invoke(["status", "--cluster-snapshot", str(path)])
    assert_one_line(out, 1, "lists a Node more than once: 'a'")


# ---- Catch-alls -------------------------------------------------------------------------------


def _boom(*_: object, **__: object) -> None:
    raise RuntimeError("something nobody foresaw\nsecond line")


@pytest.mark.parametrize("prog", ["gpu-node-guard", "kubectl gpu-guard"])
def test_status_has_a_catch_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prog: str) -> None:
    import guard.status.cli as status_cli

    monkeypatch.setattr(status_cli, "report", _boom)
    snap = tmp_path / "snap.json"
    items = [{"kind": "Node", "metadata": {"name": "a"}}, *ALL_NAMESPACES]
    snap.write_text(json.dumps({"kind": "List", "items": items}))
    if prog == "gpu-node-guard":
        out = invoke(["status", "--cluster-snapshot", str(snap)])
    else:
        result = CliRunner().invoke(
            status_cli.status, ["--cluster-snapshot", str(snap)], prog_name=prog
        )
        out = Outcome(result.exit_code, result.stdout, result.stderr)
    assert_one_line(out, 1, "unexpected RuntimeError at", "something nobody foresaw")
    assert "second line" not in out.stderr


def test_render_has_a_catch_all(monkeypatch: pytest.MonkeyPatch) -> None:
    import guard.cli as guard_cli

    monkeypatch.setattr(guard_cli, "render_example_job", _boom)
    out = invoke(["render", "evidence", "--node", "n"])
    assert_one_line(out, 1, "Error: gpu-node-guard render: unexpected RuntimeError")


def test_ledger_count_has_a_catch_all(monkeypatch: pytest.MonkeyPatch) -> None:
    import guard.evidence.ledger_cli as ledger_cli

    monkeypatch.setattr(ledger_cli, "read_file", _boom)
    ledger_file = REPO / "tests" / "fixtures" / "ledger" / "seed-configmap.yaml"
    args = ["ledger", "count", "--uuid", CARD, "--node", "n", "--pci", "0000:99:00.0"]
    out = invoke([*args, "--ledger", str(ledger_file)])
    assert_one_line(out, 1, "unexpected RuntimeError")


# ---- Termination logs ---------------------------------------------------------------------


TERMINATION_PATHS = {
    "dev-full": ("/dev/full", "No space left on device"),
    "no-directory": ("/nonexistent-dir/termination-log", "No such file or directory"),
    "a-directory": ("/", "Is a directory"),
}


@pytest.mark.parametrize("kind", TERMINATION_PATHS)
def test_write_termination_message_is_one_warn_line(kind: str) -> None:
    path, why = TERMINATION_PATHS[kind]
    note = write_termination_message(path, "{}")
    assert note is not None and note.startswith("WARN ") and why in note and "\n" not in note


def test_a_missing_file_in_an_existing_directory_is_not_a_note(tmp_path: Path) -> None:
    assert write_termination_message(str(tmp_path / "none"), "{}") is None
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("kind", TERMINATION_PATHS)
def test_conformance_verdict_stands_when_the_termination_log_fails(
    tmp_path: Path, kind: str
) -> None:
    from tests.fixtures.hosts.hosttree import ALLOWED_DNS, CONTROL_PLANE, build_host

    root = build_host(tmp_path / "host")
    path, why = TERMINATION_PATHS[kind]
    args = [
        "conformance",
        "--root",
        str(root),
        "--control-plane-version",
        CONTROL_PLANE,
        "--allowed-dns",
        ALLOWED_DNS,
    ]
    good = invoke([*args, "--termination-log", str(tmp_path / "none")])
    out = invoke([*args, "--termination-log", path])
    assert out.code == good.code == 0 and out.stdout == good.stdout
    assert_one_line(out, 0, "WARN termination message not written", why)


@pytest.mark.parametrize("kind", TERMINATION_PATHS)
def test_loadtest_verdict_stands_when_the_termination_log_fails(kind: str) -> None:
    path, why = TERMINATION_PATHS[kind]
    args = [
        "loadtest",
        "run",
        "--size",
        "32",
        "--min-ratio",
        "0.05",
        "--no-allreduce",
        "--expected-gpus",
        "3",
        "--duration-s",
        "0.1",
    ]
    out = invoke([*args, "--termination-log", path], obj=cpu())
    assert out.code == 1  # the numpy backend shows 2 GPUs: fail, as without the log
    warn = [line for line in out.lines() if line.startswith("WARN ")]
    assert len(warn) == 1 and why in warn[0] and not TRACEBACK.search(out.stderr)


def test_evidence_collect_verdict_stands_when_the_termination_log_fails(
    tmp_path: Path,
) -> None:
    from guard.evidence import request
    from guard.evidence.assess import Inputs
    from guard.evidence.cli import Target, emit_collected
    from guard.evidence.report import Tables
    from guard.xid_tables import load_catalog, load_classes

    tables = Tables(load_classes(), load_catalog())
    log = "NVRM: Xid (PCI:0000:99:00): 79, pid=1, name=a, GPU has fallen off the bus.\n"

    @click.command()
    def once() -> None:
        emit_collected(
            Inputs(log, "f"),
            tables,
            request.load_template(),
            Target("n", "0000:99:00.0", None, None),
            ((), "/dev/full"),
        )

    result = CliRunner().invoke(once, [])
    warn = [line for line in result.stderr.splitlines() if line.startswith("WARN ")]
    assert result.exit_code == 0, result.output
    assert len(warn) == 1 and "No space left on device" in warn[0]
    assert "verdict: power-cycle" in result.stdout


# ---- Settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("GUARD_HOLD_WINDOW", "GUARD_HOLD_WINDOW_S"),
        ("GUARD_PROMETHEUS_URI", "GUARD_PROMETHEUS_URL"),
        ("GUARD_ONBOARDING_TAINTS", "GUARD_ONBOARDING_TAINT"),
        ("GUARD_USER_CODE_XID", "GUARD_USER_CODE_XIDS"),
        ("GUARD_NAMESPACES", "GUARD_NAMESPACE"),
        ("GUARD_BREAKER_MAX_NODE", "GUARD_BREAKER_MAX_NODES"),
        ("GUARD_KUBE_CONFIG", "GUARD_KUBECONFIG"),
        ("GUARD_LOG_FROMAT", "GUARD_LOG_FORMAT"),
        ("GUARD_ZZZZZZZZ", None),
    ],
)
def test_an_unknown_guard_variable_is_one_warn_line(name: str, closest: str | None) -> None:
    lines = unknown_env_lines(
        {
            name: "1",
            "GUARD_HOLD_WINDOW_S": "600",
            "HOME": "/root",
            "GUARD_AGENT_NODE": "n",
            "GUARD_CONFORMANCE_PLATFORM": "rke2",
        }
    )
    assert len(lines) == 1 and lines[0].startswith(f"WARN unknown setting {name!r}")
    if closest:
        assert lines[0].endswith(f"(did you mean {closest}?)")
    else:
        assert "did you mean" not in lines[0]


def _settings(env: dict[str, str], *args: str) -> tuple[int, Settings | None, str]:
    got: list[Settings] = []

    @click.command()
    @settings_options
    def show(**options: object) -> None:
        got.append(build_settings(options))

    result = CliRunner().invoke(show, list(args), env=env)
    return result.exit_code, got[0] if got else None, result.stderr


@pytest.mark.parametrize(
    ("variable", "field", "value"),
    [
        ("GUARD_ONBOARDING_TAINT", "onboarding_taint", ""),
        ("GUARD_USER_CODE_XIDS", "user_code_xids", ()),
        ("GUARD_FAST_PATH_XIDS", "fast_path_xids", ()),
        ("GUARD_CONFORMANCE_ALLOWED_DNS", "conformance_allowed_dns", ""),
        ("GUARD_CONFORMANCE_CONTROL_PLANE_VERSION", "conformance_control_plane_version", ""),
        ("GUARD_SERVICE_NETWORK_KUBE_PROXY_PODS", "service_network_kube_proxy_pods", ""),
        ("GUARD_SERVICE_NETWORK_KUBE_PROXY_NAMESPACE", "service_network_kube_proxy_namespace", ""),
    ],
)
def test_an_empty_variable_means_empty(variable: str, field: str, value: object) -> None:
    code, s, err = _settings({variable: ""})
    assert code == 0, err
    assert s is not None and getattr(s, field) == value
    if field == "onboarding_taint":
        assert s.onboarding_gate is None


def test_an_empty_number_keeps_its_default() -> None:
    code, s, _ = _settings({"GUARD_HOLD_WINDOW_S": ""})
    assert code == 0 and s is not None and s.hold_window_s == 600


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        pytest.param(
            {"GUARD_NAMESPACE": " gpu-node-guard"}, "(got ' gpu-node-guard')", id="leading-space"
        ),
        pytest.param({"GUARD_NAMESPACE": "gpu\tguard"}, "(got 'gpu\\tguard')", id="tab"),
        pytest.param({"GUARD_IMAGE": "img:1\n"}, "(got 'img:1\\n')", id="newline"),
        pytest.param({"GUARD_JOB_NAME": "job "}, "(got 'job ')", id="trailing-space"),
        pytest.param(
            {"GUARD_PROMETHEUS_HEADERS": "X-Api-Key=s3cret,Bad"},
            "(got 'X-Api-Key=<redacted>,Bad')",
            id="header-redacted",
        ),
    ],
)
def test_a_bad_setting_shows_its_value_quoted(env: dict[str, str], shown: str) -> None:
    code, _, err = _settings(env)
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("Error: bad setting")]
    assert len(errors) == 1 and shown in errors[0], err
    assert "s3cret" not in err


@pytest.mark.parametrize(
    "header",
    [
        "X-Api-Key=s3cret",
        "Cookie=session=s3cret",
        "Proxy-Authorization=Basic s3cret",
        "X-Auth-Token=s3cret",
        "X-Secret-Thing=s3cret",
        "X-Password=s3cret",
    ],
)
def test_credential_headers_never_reach_the_log(tmp_path: Path, header: str) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "a"}}]}')
    # Prometheus at a closed port: refused is retried until the cycle's deadline, here 1 s.
    env = {
        "GUARD_PROMETHEUS_HEADERS": "X-Scope-OrgID=team-a," + header,
        "GUARD_CYCLE_DEADLINE_S": "1",
    }
    out = invoke(
        [
            "run",
            "--cluster-snapshot",
            str(snap),
            "--prometheus-url",
            "http://127.0.0.1:9",
            "--prometheus-limits",
            "timeout=0.2",
        ],
        env=env,
    )
    assert "s3cret" not in out.stderr + out.stdout, out.stderr
    assert "X-Scope-OrgID=team-a" in out.stderr or out.code == 2


@pytest.mark.parametrize("timeout", [str(CRONJOB_DEADLINE_S), "300", "600"])
def test_the_prometheus_timeout_stays_below_the_cronjob_deadline(timeout: str) -> None:
    code, _, err = _settings({}, "--prometheus-limits", f"timeout={timeout}")
    expected = f"must be below the CronJob's activeDeadlineSeconds ({CRONJOB_DEADLINE_S})"
    assert code == 2 and expected in err


@pytest.mark.parametrize("timeout", ["0.5", str(CRONJOB_DEADLINE_S - 1)])
def test_a_prometheus_timeout_below_the_cronjob_deadline_is_taken(timeout: str) -> None:
    code, s, err = _settings({}, "--prometheus-limits", f"timeout={timeout}")
    assert code == 0 and s is not None and s.prometheus_timeout_s == float(timeout), err


def test_the_cronjob_deadline_matches_the_manifest() -> None:
    docs = list(yaml.safe_load_all((REPO / "manifests/base/cronjob.yaml").read_text()))
    cronjob = next(d for d in docs if d and d.get("kind") == "CronJob")
    assert cronjob["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == CRONJOB_DEADLINE_S
    # the watch's bound and the Lease derive from that one number
    deadline = cronjob["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert Settings().watch_until_s == deadline - WATCH_MARGIN_S > 0
    assert Settings().lease_duration_s < deadline


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GUARD_WATCH_UNTIL_S", str(CRONJOB_DEADLINE_S - WATCH_MARGIN_S + 1)),
        ("GUARD_SCRAPE_INTERVAL_S", "4"),
        ("GUARD_LEASE_DURATION_S", str(CRONJOB_DEADLINE_S + 1)),
        ("GUARD_LEASE_DURATION_S", "29"),
    ],
)
def test_a_watch_past_the_cronjob_deadline_is_refused(variable: str, value: str) -> None:
    code, s, err = _settings({variable: value})
    shown = "--scrape-interval-s " if variable == "GUARD_SCRAPE_INTERVAL_S" else f"{variable} "
    assert code == 2 and s is None and f"bad setting: {shown}" in err, err


def test_unknown_variables_warn_once_on_run(tmp_path: Path) -> None:
    out = invoke(
        ["run", "--cluster-snapshot", str(tmp_path / "none")], env={"GUARD_HOLD_WINDOW": "5"}
    )
    warns = [line for line in out.lines() if line.startswith("WARN unknown setting")]
    # click refuses the missing file before the settings are built: no warning yet, exit 2
    assert out.code == 2 and len(warns) <= 1


# ---- Host commands ------------------------------------------------------------------------


@pytest.mark.parametrize("lines", [10, 10_000])
def test_a_host_command_keeps_the_tail_of_a_long_output(
    monkeypatch: pytest.MonkeyPatch, lines: int
) -> None:
    from guard.doors import hostexec

    monkeypatch.setattr(hostexec, "MAX_OUTPUT_BYTES", 1000)
    got = hostexec.run(("seq", "1", str(lines)), 10.0)
    assert isinstance(got, hostexec.Exited) and got.returncode == 0
    assert got.stdout.endswith(f"\n{lines}\n")
    assert len(got.stdout) <= 1000
    assert (got.dropped > 0) == (lines > 300)
    assert got.stdout.split("\n", 1)[0].isdigit()  # starts at a whole line


@pytest.mark.parametrize(
    ("command", "env", "warning"),
    [
        pytest.param(
            ["agent", "--once"],
            {"GUARD_AGENT_NODES": "n"},
            "'GUARD_AGENT_NODES' in the environment is ignored (did you mean GUARD_AGENT_NODE?)",
            id="agent-misspelt",
        ),
        pytest.param(
            ["agent", "--once"],
            {"GUARD_AGENT_INTERVAL": "5"},
            "(did you mean GUARD_AGENT_INTERVAL_S?)",
            id="agent-no-unit",
        ),
        pytest.param(
            ["conformance"],
            {"GUARD_CONFORMANCE_PLATFROM": "rke2"},
            "(did you mean GUARD_CONFORMANCE_PLATFORM?)",
            id="conformance-misspelt",
        ),
        pytest.param(
            ["conformance"],
            {"GUARD_CONFORMANCE_FIX": "1"},
            "'GUARD_CONFORMANCE_FIX' in the environment is ignored"
            " (--fix is read from the command line only)",
            id="conformance-fix",
        ),
    ],
)
def test_the_node_side_commands_warn_of_their_unknown_variables(
    tmp_path: Path, command: list[str], env: dict[str, str], warning: str
) -> None:
    prefix = "GUARD_AGENT_" if command[0] == "agent" else "GUARD_CONFORMANCE_"
    known = {f"{prefix}ROOT": str(tmp_path), "GUARD_AGENT_NODE": "n1", "GUARD_HOLD_WINDOW_S": "1"}
    args = [*command, "--termination-log", ""] if command[0] == "conformance" else command
    out = invoke(args, env={**known, **env})
    warned = [line for line in out.lines() if line.startswith("WARN unknown setting")]
    assert len(warned) == 1 and warning in warned[0], out.stderr
    assert "fixed=1" not in out.stdout  # nothing was repaired
