"""A sweep of hostile inputs across every subcommand, each run through the real entrypoint
(`guard.cli:cli`, as `gpu-node-guard` is) under a time limit, and its outcome classified:

- ``right``: the outcome the row expects (a decision, a verdict, a WARN and on);
- ``error``: a clear error: exit 1 or 2 and exactly one line on stderr naming the problem
  (click's own `Usage:`/`Try` lines aside);
- ``traceback``: a Python traceback anywhere, or an exception out of the command;
- ``silent``: exit 0 where the row expects a refusal, or output without what it must say;
- ``hang``: no answer within `LIMIT_S`;
- ``crash``: MemoryError, RecursionError or a signal.

Every row asserts its exact class, exit code and the words its line must hold; the bad classes
are asserted empty. `python -m tests.unit.test_hostile_sweep` prints the counts per class
(quoted in docs/security.md#hostile-input-sweep).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from guard import files
from guard.cli import cli
from tests.builders import ALL_NAMESPACES
from tests.numpy_backend import cpu

LIMIT_S = 20.0
INFO = re.compile(r"^\S+ INFO ")  # a run's own log lines before its abort line
LAYOUT = re.compile(r"^\S+ WARN layout ")  # a layout setting off the manifests': said, then run
TRACEBACK = re.compile(r"Traceback \(most recent|^\s+File \"", re.M)
BAD_CLASSES = ("traceback", "silent", "hang", "crash")  # and "unclear": not one line, exit 1/2
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
NOWHERE = "http://127.0.0.1:1"  # nothing listens: a run that gets this far aborts, exit 1


class Hang(Exception):
    pass


@dataclass(frozen=True)
class Want:
    cls: str  # "right" or "error"
    code: int
    needle: str = ""  # in the one error line (error) or in stdout+stderr (right)
    also: tuple[str, ...] = ()  # other needles the error line may hold instead


@dataclass(frozen=True)
class Row:
    id: str
    args: tuple[str, ...]
    want: Want
    env: dict[str, str] = field(default_factory=dict)
    kind: str = ""  # the hostile file `{bad}` stands for (FILE_KINDS)


@dataclass(frozen=True)
class Seen:
    cls: str
    code: int
    text: str
    lines: tuple[str, ...]


# ---- hostile files ------------------------------------------------------------------------------


def _write(data: bytes) -> Callable[[Path], Path]:
    def make(p: Path) -> Path:
        p.write_bytes(data)
        return p

    return make


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _dir(p: Path) -> Path:
    p.mkdir()
    return p


def _sparse(p: Path) -> Path:
    with open(p, "wb") as fh:
        fh.truncate(files.KERNEL_LOG_MAX_BYTES + 1)  # over every cap
    return p


def _loop(p: Path) -> Path:
    p.symlink_to(p)
    return p


def _alias_bomb() -> bytes:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return ("\n".join(lines) + "\n").encode()


FILE_KINDS: dict[str, Callable[[Path], Path]] = {
    "missing": lambda p: p,
    "directory": _dir,
    "fifo": _fifo,
    "dev-zero": lambda p: Path("/dev/zero"),
    "dev-null": lambda p: Path("/dev/null"),
    "symlink-loop": _loop,
    "empty": _write(b""),
    "nul-bytes": _write(b"kind: List\x00\nitems: []\n"),
    "not-utf8": _write(b"kind: List\nitems: [\xff\xfe]\n"),
    "utf16": _write("kind: List\nitems: []\n".encode("utf-16")),
    "deep-json": _write(b"[" * 100_000 + b"]" * 100_000),
    "alias-bomb": _write(_alias_bomb()),
    "one-long-line": _write(b"x" * 3_000_000),
    "oversized": _sparse,
}
# Kinds every reader refuses; `empty` and `one-long-line` depend on what the file is.
REFUSED = (
    "missing",
    "directory",
    "fifo",
    "dev-zero",
    "dev-null",
    "symlink-loop",
    "nul-bytes",
    "not-utf8",
    "utf16",
    "deep-json",
    "alias-bomb",
    "oversized",
)


def snapshot_text() -> str:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-a", "uid": "u-1", "resourceVersion": "1"},
        "spec": {},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "nodeInfo": {"bootID": "b-1"},
        },
    }
    # A whole snapshot (`kubectl get … -A`): one that lacks the guard's namespaces is a WARN.
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [node, *ALL_NAMESPACES]})


def kubeconfig_text() -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        }
    )


KERNEL_LOG = (
    "Sep 21 05:00:00 n kernel: NVRM: Xid (PCI:0000:58:00): 79, GPU has fallen off the bus.\n"
)


def prepare(tmp: Path, row: Row) -> dict[str, str]:
    """The paths `{…}` in a row's args stand for."""
    (tmp / "snap.json").write_text(snapshot_text())
    (tmp / "kubeconfig").write_text(kubeconfig_text())
    (tmp / "kernel.log").write_text(KERNEL_LOG)
    (tmp / "root").mkdir()
    (tmp / "token").write_text("t0ken\n")
    paths = {
        "snap": tmp / "snap.json",
        "kc": tmp / "kubeconfig",
        "klog": tmp / "kernel.log",
        "root": tmp / "root",
        "token": tmp / "token",
        "tmp": tmp,
    }
    if row.kind:
        paths["bad"] = FILE_KINDS[row.kind](tmp / f"bad-{row.kind}")
    return {k: str(v) for k, v in paths.items()}


# ---- running and classifying ------------------------------------------------------------------


@contextmanager
def limit(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def fill(text: str, paths: dict[str, str]) -> str:
    """`{name}` → its path (not str.format: PromQL braces are values here)."""
    for name, path in paths.items():
        text = text.replace("{" + name + "}", path)
    return text


def run_row(row: Row, tmp: Path) -> Seen:
    paths = prepare(tmp, row)
    args = [fill(a, paths) for a in row.args]
    # A refused connection is retried until the cycle's deadline: 1 s here, not 200.
    env = {"GUARD_CYCLE_DEADLINE_S": "1", **{k: fill(v, paths) for k, v in row.env.items()}}
    try:
        with limit(LIMIT_S):
            result = CliRunner().invoke(cli, args, env=env, prog_name="gpu-node-guard", obj=cpu(1))
    except Hang as exc:
        return Seen("hang", -1, str(exc), ())
    text = result.stdout + result.stderr
    lines = tuple(
        line
        for line in result.stderr.splitlines()
        if line.strip()
        and not line.startswith(("Usage:", "Try ", "WARN unknown"))
        and not INFO.match(line)
        and not LAYOUT.match(line)
    )
    exc = result.exception
    if isinstance(exc, Hang):
        return Seen("hang", -1, text, lines)
    if isinstance(exc, MemoryError | RecursionError):
        return Seen("crash", -1, f"{exc!r}", lines)
    if (exc is not None and not isinstance(exc, SystemExit)) or TRACEBACK.search(text):
        return Seen("traceback", result.exit_code, f"{exc!r} {text[-2000:]}", lines)
    code = result.exit_code
    if row.want.cls == "error":
        needles = (row.want.needle, *row.want.also)
        if code in (1, 2) and len(lines) == 1 and any(n in lines[0] for n in needles):
            return Seen("error", code, text, lines)
        if code == 0:
            return Seen("silent", code, text, lines)
        return Seen("unclear", code, text, lines)
    if code == row.want.code and row.want.needle in text:
        return Seen("right", code, text, lines)
    return Seen("silent" if code == 0 else "unclear", code, text, lines)


# ---- the table ----------------------------------------------------------------------------------


def err(needle: str = "", code: int = 1) -> Want:
    return Want("error", code, needle)


def ok(needle: str = "", code: int = 0) -> Want:
    return Want("right", code, needle)


RUN = ("run", "--prometheus-url", NOWHERE, "--prometheus-limits", "timeout=2")
SNAP_RUN = (*RUN, "--cluster-snapshot", "{snap}")
STATUS = ("status", "--prometheus-url", NOWHERE, "--prometheus-limits", "timeout=2")
CLASSIFY = ("evidence", "classify", "--kernel-log", "{klog}")
COUNT = ("ledger", "count", "--uuid", UUID, "--node", "gpu-a", "--pci", "0000:58:00.0")
AGENT = ("agent", "--root", "{root}", "--node", "gpu-a", "--once")
CONFORMANCE = ("conformance", "--root", "{root}", "--termination-log", "")
# The load test runs on one simulated GPU (tests/numpy_backend.py, handed in as the click obj).
LOADTEST = (
    "loadtest",
    "run",
    "--expected-gpus",
    "1",
    "--duration-s",
    "0.05",
    "--size",
    "16",
    "--no-allreduce",
    "--termination-log",
    "",
)
ABORT = "cannot reach"  # a run that passed every check and met the absent Prometheus
# ... or, on a loaded machine, whose 1 s cycle deadline passed before its first query.
LATE = ("deadline has passed",)
ABORTED = Want("error", 1, ABORT, LATE)
KC = "Kubernetes config"  # in the line of a kubeconfig refused

# Where a hostile file goes: (id, args with {bad}, exit code of a refusal, a word of its line,
# what an empty file means, what one 3 MB line means).
FILE_TARGETS: list[tuple[str, tuple[str, ...], int, str, Want, Want]] = [
    (
        "run-snapshot",
        (*RUN, "--cluster-snapshot", "{bad}"),
        1,
        "cluster snapshot",
        err("cluster snapshot"),
        err("cluster snapshot"),
    ),
    (
        "status-snapshot",
        (*STATUS, "--cluster-snapshot", "{bad}"),
        1,
        "cluster snapshot",
        err("cluster snapshot"),
        err("cluster snapshot"),
    ),
    ("run-kubeconfig", (*RUN, "--kubeconfig", "{bad}"), 1, KC, err(KC), err("not a kubeconfig")),
    (
        "status-kubeconfig",
        (*STATUS, "--kubeconfig", "{bad}"),
        1,
        KC,
        err(KC),
        err("not a kubeconfig"),
    ),
    ("ledger-file", (*COUNT, "--ledger", "{bad}"), 1, "ledger", err("ledger"), err("ledger")),
    (
        "ledger-kubeconfig",
        (*COUNT, "--from-cluster", "--kubeconfig", "{bad}"),
        1,
        KC,
        err(KC),
        err("not a kubeconfig"),
    ),
    (
        "token-file",
        (*SNAP_RUN, "--prometheus-bearer-token-file", "{bad}"),
        2,
        "token",
        err("token", 2),
        err("token", 2),
    ),
    (
        "password-file",
        (
            *SNAP_RUN,
            "--prometheus-basic-auth-user",
            "u",
            "--prometheus-basic-auth-password-file",
            "{bad}",
        ),
        2,
        "password",
        err("password", 2),
        err("password", 2),
    ),
    ("ca-file", (*SNAP_RUN, "--prometheus-tls", "ca={bad}"), 2, "ca", err("ca", 2), err("ca", 2)),
    ("kernel-log", ("evidence", "classify", "--kernel-log", "{bad}"), 2, "kernel", ok(), ok()),
    ("lspci", (*CLASSIFY, "--lspci", "{bad}"), 2, "lspci", ok(), ok()),
    ("aer", (*CLASSIFY, "--aer", "{bad}"), 2, "aer", ok(), ok()),
    ("nvidia-smi-q", (*CLASSIFY, "--nvidia-smi-q", "{bad}"), 2, "nvidia-smi", ok(), ok()),
    (
        "xid-classes",
        (*CLASSIFY, "--xid-classes", "{bad}"),
        1,
        "bad-",
        err("no header line"),
        err("header lacks column"),
    ),
]


def value_rows() -> list[Row]:
    """Odd values on the command line of every subcommand."""
    s, e2 = SNAP_RUN, (lambda n="": err(n, 2))
    table: list[tuple[str, tuple[str, ...], Want]] = [
        # top level
        ("top-unknown-command", ("frobnicate",), e2("No such command")),
        ("top-unknown-option", ("--frob",), e2("No such option")),
        ("top-version", ("--version",), ok("gpu-node-guard, version")),
        ("top-help", ("-h",), ok("Commands:")),
        # run
        ("run-no-url", ("run", "--cluster-snapshot", "{snap}"), e2("--prometheus-url")),
        ("run-at-garbage", (*s, "--at", "yesterday"), e2("--at")),
        ("run-at-month-13", (*s, "--at", "2026-13-01T00:00:00Z"), e2("--at")),
        ("run-at-no-zone", (*s, "--at", "2026-09-21T05:00:00"), e2("--at")),
        ("run-at-year-0", (*s, "--at", "0000-01-01T00:00:00Z"), e2("--at")),
        ("run-at-newline", (*s, "--at", "2026-09-21T05:00:00Z\n"), e2("--at")),
        ("run-url-ftp", (*s, "--prometheus-url", "ftp://x"), e2("prometheus")),
        ("run-url-empty-host", (*s, "--prometheus-url", "http://"), e2("prometheus")),
        ("run-url-space", (*s, "--prometheus-url", "http://a b:9090"), e2("prometheus")),
        ("run-url-newline", (*s, "--prometheus-url", "http://a\n:9090"), e2("prometheus")),
        ("run-timeout-negative", (*s, "--prometheus-limits", "timeout=-1"), e2("timeout")),
        ("run-timeout-nan", (*s, "--prometheus-limits", "timeout=nan"), e2("timeout")),
        ("run-timeout-inf", (*s, "--prometheus-limits", "timeout=inf"), e2("timeout")),
        ("run-timeout-1e309", (*s, "--prometheus-limits", "timeout=1e309"), e2("timeout")),
        ("run-timeout-above-deadline", (*s, "--prometheus-limits", "timeout=601"), e2("timeout")),
        ("run-hold-negative", (*s, "--hold-window-s", "-5"), e2("hold")),
        ("run-hold-huge", (*s, "--hold-window-s", "9" * 30), e2("hold")),
        ("run-selector-open-brace", (*s, "--dcgm-selector", "a{"), e2("dcgm")),
        ("run-selector-injection", (*s, "--dcgm-selector", 'job="x"}) or vector(1'), e2("dcgm")),
        ("run-node-labels-name", (*s, "--dcgm-node-labels", "__name__"), e2("node-labels")),
        ("run-node-labels-empty", (*s, "--dcgm-node-labels", ""), e2("node-labels")),
        ("run-headers-no-equals", (*s, "--prometheus-headers", "noequals"), e2("headers")),
        ("run-headers-newline", (*s, "--prometheus-headers", "X-A=b\r\nX-B=c"), e2("headers")),
        ("run-output-xml", (*s, "--output", "xml"), e2("--output")),
        ("run-log-format-xml", (*s, "--log-format", "xml"), e2("--log-format")),
        ("run-max-series-zero", (*s, "--prometheus-limits", "series=0"), e2("series=")),
        (
            "run-max-bytes-huge",
            (*s, "--prometheus-limits", "answer-bytes=" + "9" * 25),
            e2("bytes"),
        ),
        ("run-basic-user-no-password", (*s, "--prometheus-basic-auth-user", "u"), e2("password")),
        ("run-cert-without-key", (*s, "--prometheus-tls", "cert={token}"), e2("key")),
        (
            "run-token-and-basic",
            (
                *s,
                "--prometheus-bearer-token-file",
                "{token}",
                "--prometheus-basic-auth-user",
                "u",
                "--prometheus-basic-auth-password-file",
                "{token}",
            ),
            e2("bearer"),
        ),
        ("run-snapshot-reaches-prometheus", s, ABORTED),
        # status
        ("status-output-xml", ("status", "-o", "xml"), e2("--output")),
        (
            "status-at-garbage",
            (*STATUS, "--cluster-snapshot", "{snap}", "--at", "soon"),
            e2("--at"),
        ),
        (
            "status-context-unknown",
            (*STATUS, "--kubeconfig", "{kc}", "--context", "nope"),
            err("nope"),
        ),
        (
            "status-snapshot-reaches-prometheus",
            (*STATUS, "--cluster-snapshot", "{snap}"),
            ok("shown as without Prometheus", 1),
        ),
        # render
        ("render-kind-unknown", ("render", "--node", "n", "backup"), e2("backup")),
        ("render-node-upper", ("render", "--node", "GPU-A", "evidence"), e2("--node")),
        ("render-node-empty", ("render", "--node", "", "evidence"), e2("--node")),
        ("render-node-300", ("render", "--node", "n" * 300, "evidence"), e2("--node")),
        ("render-node-newline", ("render", "--node", "n\n", "evidence"), e2("--node")),
        ("render-pci-garbage", ("render", "--node", "n", "--pci", "zz", "evidence"), e2("--pci")),
        ("render-xid-zero", ("render", "--node", "n", "--xid", "0", "evidence"), e2("--xid")),
        ("render-xid-huge", ("render", "--node", "n", "--xid", "9" * 30, "evidence"), e2("--xid")),
        (
            "render-gpus-negative",
            ("render", "--node", "n", "--gpus", "-1", "loadtest"),
            e2("--gpus"),
        ),
        ("render-ok", ("render", "--node", "gpu-a", "evidence"), ok("kind: Job")),
        # evidence
        ("classify-pci-garbage", (*CLASSIFY, "--pci", "zz"), e2("--pci")),
        ("classify-root-port-garbage", (*CLASSIFY, "--root-port", "zz"), e2("--root-port")),
        ("classify-output-xml", (*CLASSIFY, "--output", "xml"), e2("--output")),
        ("classify-ok", CLASSIFY, ok("79")),
        (
            "collect-node-bad",
            ("evidence", "collect", "--node", "A_B", "--pci", "0000:58:00.0"),
            e2("--node"),
        ),
        ("collect-pci-bad", ("evidence", "collect", "--node", "n", "--pci", "58"), e2("--pci")),
        (
            "collect-uuid-bad",
            ("evidence", "collect", "--node", "n", "--pci", "0000:58:00.0", "--uuid", "GPU-x"),
            e2("--uuid"),
        ),
        (
            "collect-xid-negative",
            ("evidence", "collect", "--node", "n", "--pci", "0000:58:00.0", "--xid", "-1"),
            e2("--xid"),
        ),
        (
            "collect-host-root-missing",
            (
                "evidence",
                "collect",
                "--node",
                "n",
                "--pci",
                "0000:58:00.0",
                "--host-root",
                "/nonexistent",
            ),
            ok("Could not be read"),
        ),  # partial evidence, each unread source named
        (
            "collect-timeout-zero",
            ("evidence", "collect", "--node", "n", "--pci", "0000:58:00.0", "--timeout-s", "0"),
            e2("--timeout-s"),
        ),
        # ledger
        (
            "ledger-uuid-bad",
            (
                "ledger",
                "count",
                "--uuid",
                "x",
                "--node",
                "n",
                "--pci",
                "0000:58:00.0",
                "--ledger",
                "{token}",
            ),
            e2("--uuid"),
        ),
        (
            "ledger-node-bad",
            (
                "ledger",
                "count",
                "--uuid",
                UUID,
                "--node",
                "N!",
                "--pci",
                "0000:58:00.0",
                "--ledger",
                "{token}",
            ),
            e2("--node"),
        ),
        (
            "ledger-pci-bad",
            ("ledger", "count", "--uuid", UUID, "--node", "n", "--pci", "x", "--ledger", "{token}"),
            e2("--pci"),
        ),
        ("ledger-no-source", COUNT, e2("--ledger")),
        # loadtest
        ("loadtest-expected-zero", (*LOADTEST[:2], "--expected-gpus", "0"), e2("expected")),
        ("loadtest-size-zero", (*LOADTEST, "--size", "0"), e2("--size")),
        ("loadtest-min-ratio-2", (*LOADTEST, "--min-ratio", "2"), e2("--min-ratio")),
        ("loadtest-duration-nan", (*LOADTEST, "--duration-s", "nan"), e2("--duration-s")),
        ("loadtest-link-garbage", (*LOADTEST, "--expect-link", "garbage"), e2("--expect-link")),
        (
            "loadtest-memory-xids-words",
            (*LOADTEST, "--memory-class-xids", "a,b"),
            e2("memory-class-xids"),
        ),
        (
            "loadtest-test-pci-garbage",
            (*LOADTEST, "--memory-test-pci", "zz"),
            e2("memory-test-pci"),
        ),
        ("loadtest-backend-cuda", (*LOADTEST, "--backend", "cuda"), e2("--backend")),
        ("loadtest-passes", LOADTEST, ok("verdict=pass")),
        ("loadtest-termlog-full", (*LOADTEST[:-1], "/dev/full"), ok("the verdict and exit code")),
        ("loadtest-termlog-directory", (*LOADTEST[:-1], "{root}"), ok("the verdict and exit code")),
        # conformance
        ("conformance-root-missing", ("conformance", "--root", "/nonexistent"), e2("--root")),
        ("conformance-root-file", ("conformance", "--root", "{token}"), e2("--root")),
        (
            "conformance-version-garbage",
            (*CONFORMANCE, "--control-plane-version", "latest"),
            e2("--control-plane-version"),
        ),
        (
            "conformance-dns-bad-cidr",
            (*CONFORMANCE, "--allowed-dns", "999.1.1.1/99"),
            e2("--allowed-dns"),
        ),
        (
            "conformance-dns-empty-item",
            (*CONFORMANCE, "--allowed-dns", "10.0.0.0/8,,"),
            ok("skip="),
        ),  # empty items are no items
        ("conformance-timeout-zero", (*CONFORMANCE, "--timeout-s", "0"), e2("--timeout-s")),
        ("conformance-timeout-nan", (*CONFORMANCE, "--timeout-s", "nan"), e2("--timeout-s")),
        ("conformance-role-odd", (*CONFORMANCE, "--role", "boss"), e2("--role")),
        ("conformance-empty-root", CONFORMANCE, ok("skip=")),
        (
            "conformance-termlog-full",
            (*CONFORMANCE[:-1], "/dev/full"),
            ok("the verdict and exit code"),
        ),
        (
            "conformance-termlog-directory",
            (*CONFORMANCE[:-1], "{root}"),
            ok("the verdict and exit code"),
        ),
        # agent
        ("agent-node-empty", ("agent", "--root", "{root}", "--node", "", "--once"), e2("--node")),
        (
            "agent-node-upper",
            ("agent", "--root", "{root}", "--node", "GPU", "--once"),
            e2("--node"),
        ),
        ("agent-listen-no-port", (*AGENT, "--listen", "host"), e2("--listen")),
        ("agent-listen-port-99999", (*AGENT, "--listen", ":99999"), e2("--listen")),
        ("agent-interval-zero", (*AGENT, "--interval-s", "0"), e2("--interval-s")),
        ("agent-interval-nan", (*AGENT, "--interval-s", "nan"), e2("--interval-s")),
        ("agent-dns-bad", (*AGENT, "--allowed-dns", "x"), e2("--allowed-dns")),
        ("agent-root-file", ("agent", "--root", "{token}", "--node", "n", "--once"), e2("--root")),
        ("agent-platform-odd", (*AGENT, "--platform", "k3s"), e2("--platform")),
        ("agent-once", AGENT, ok("gpu_node_guard_agent_check_status")),
    ]
    return [Row(f"arg-{i}", a, w) for i, a, w in table]


# Settings as a settings.env line becomes them (the CronJob's envFrom), on `run` with a
# snapshot: a refused value is one usage line naming the variable; an accepted one reaches
# the (absent) Prometheus. And the node-side commands' own variables.
ENV_BAD: list[tuple[str, str, str]] = [
    ("GUARD_HOLD_WINDOW_S", "ten", "hold"),
    ("GUARD_HOLD_WINDOW_S", "-1", "hold"),
    ("GUARD_HOLD_WINDOW_S", "1e999", "hold"),
    ("GUARD_CADENCE_S", "0", "CADENCE"),
    ("GUARD_CADENCE_S", "'300'", "CADENCE"),
    ("GUARD_PROMETHEUS_LIMITS", "timeout=nan", "timeout"),
    ("GUARD_PROMETHEUS_LIMITS", "timeout=600", "timeout"),
    ("GUARD_PROMETHEUS_URL", "prometheus:9090", "prometheus"),
    ("GUARD_PROMETHEUS_URL", '"http://p:9090"', "prometheus"),
    ("GUARD_PROMETHEUS_HEADERS", "X-Api-Key", "headers"),
    ("GUARD_PROMETHEUS_LIMITS", "series=many", "series"),
    ("GUARD_DCGM_SELECTOR", 'job=~"a{1001}"', "dcgm"),
    ("GUARD_DCGM_SELECTOR", 'job=~"a++"', "dcgm"),
    ("GUARD_KSM_SELECTOR", "job=", "ksm"),
    ("GUARD_DCGM_NODE_LABELS", "Host name", "node-labels"),
    ("GUARD_BOOT_CHECK", "maybe", "boot"),
    ("GUARD_BOOT_CHECK", "yes please", "boot"),
    ("GUARD_USER_CODE_XIDS", "13,abc", "user"),
    ("GUARD_FAST_PATH_XIDS", "-79", "fast"),
    ("GUARD_MEMORY_CLASS_XIDS", "1000000", "memory"),
    ("GUARD_ONBOARDING_TAINT", "no effect", "onboarding"),
    ("GUARD_ONBOARDING_TAINT", "a=b:Sometimes", "onboarding"),
    ("GUARD_IMAGE", "not an image", "image"),
    ("GUARD_NAMESPACE", "Bad_NS", "NAMESPACE"),
    ("GUARD_BREAKER_MAX_FRACTION", "2", "fraction"),
    ("GUARD_SERVICE_NETWORK_KUBE_PROXY_PODS", "a{1001}", "kube"),
    ("GUARD_SERVICE_NETWORK_CNI_DAEMONSETS", "(", "cni"),
    ("GUARD_LEASE_DURATION_S", "1", "LEASE"),
    ("GUARD_SCRAPE_INTERVAL_S", "0", "scrape"),
    ("GUARD_LOG_FORMAT", "xml", "log-format"),
]
ENV_ACCEPTED: list[tuple[str, str]] = [
    ("GUARD_HOLD_WINDOW", "300"),
    ("guard_hold_window_s", "300"),
    ("GUARD_HOLD_WINDOW_S", "600 "),
    ("GUARD_USER_CODE_XIDS", "13,,31"),
    ("GUARD_HOLD_WINDOW_S ", "300"),
    ("export GUARD_HOLD_WINDOW_S", "300"),
    ("GUARD_ONBOARDING_TAINT", ""),
    ("GUARD_USER_CODE_XIDS", ""),
    ("GUARD_PROMETHEUS_HEADERS", "X-Scope-OrgID=team-a"),
    ("GUARD_PROMETHEUS_HEADERS", "X-Api-Key=s3cr3t"),
    ("GUARD_HOLD_WINDOW_S", ""),
    ("GUARD_AGENT_NODE", "ignored-by-run"),
    ("GUARD_ZZZ", "1"),
    # accepted at start (a fixed value with a `WARN unknown setting` line: ignored); what the
    # guard then makes the policies refuse, one ERROR line a cycle
    ("GUARD_IMAGE", "ghcr.io/x/y:latest"),
    ("GUARD_ANNOTATION_PREFIX", "evil/"),
    ("GUARD_LEDGER_CONFIGMAP", "other-ledger"),
]
ENV_NODE_SIDE: list[tuple[str, tuple[str, ...], dict[str, str], Want]] = [
    ("agent-interval-env-zero", AGENT, {"GUARD_AGENT_INTERVAL_S": "0"}, err("interval", 2)),
    ("agent-listen-env-bad", AGENT, {"GUARD_AGENT_LISTEN": "nowhere"}, err("listen", 2)),
    (
        "agent-node-env-misspelt",
        ("agent", "--root", "{root}", "--once"),
        {"GUARD_AGENT_NODES": "gpu-a"},
        err("--node", 2),
    ),
    (
        "agent-misspelt-warns",
        AGENT,
        {"GUARD_AGENT_INTERVAL": "5"},
        ok("did you mean GUARD_AGENT_INTERVAL_S"),
    ),
    (
        "conformance-timeout-env-negative",
        CONFORMANCE,
        {"GUARD_CONFORMANCE_TIMEOUT_S": "-1"},
        err("timeout", 2),
    ),
    (
        "conformance-fix-env-ignored",
        CONFORMANCE,
        {"GUARD_CONFORMANCE_FIX": "1"},
        ok("--fix is read from the command line only"),
    ),
    (
        "conformance-dns-env-bad",
        CONFORMANCE,
        {"GUARD_CONFORMANCE_ALLOWED_DNS": "x/y"},
        err("allowed-dns", 2),
    ),
    (
        "classify-xid-classes-env-fifo",
        CLASSIFY,
        {"GUARD_XID_CLASSES": "/dev/zero"},
        err("/dev/zero is not a regular file"),
    ),
    (
        "ledger-kubeconfig-env",
        (*COUNT, "--from-cluster"),
        {"GUARD_KUBECONFIG": "/dev/zero"},
        err("Kubernetes config"),
    ),
]


ENV_RUN = ("run", "--cluster-snapshot", "{snap}")  # every setting from the environment
ENV_BASE = {
    "GUARD_PROMETHEUS_URL": NOWHERE,
    "GUARD_PROMETHEUS_LIMITS": "timeout=2",
    "GUARD_CYCLE_DEADLINE_S": "1",
}


def env_rows() -> list[Row]:
    rows = [
        Row(f"env-{n}={v!r}", ENV_RUN, err(w, 2), env={**ENV_BASE, n: v}) for n, v, w in ENV_BAD
    ]
    rows += [
        Row(f"env-accepted-{n!r}={v!r}", ENV_RUN, ABORTED, env={**ENV_BASE, n: v})
        for n, v in ENV_ACCEPTED
    ]
    rows += [Row(f"env-{i}", a, w, env=e) for i, a, e, w in ENV_NODE_SIDE]
    return rows


# Options declared click.Path(exists=True): a path that is not there is click's usage error.
CLICK_PATHS = (
    "run-snapshot",
    "status-snapshot",
    "ledger-file",
    "kernel-log",
    "lspci",
    "aer",
    "nvidia-smi-q",
    "xid-classes",
)
NOT_THERE = ("missing", "symlink-loop")


def file_rows() -> list[Row]:
    rows = []
    for target, args, code, word, empty, long_line in FILE_TARGETS:
        for kind in FILE_KINDS:
            want = {"empty": empty, "one-long-line": long_line}.get(kind, err(word, code))
            if target in CLICK_PATHS and (kind in NOT_THERE or kind == "directory"):
                want = err("Invalid value", 2)
            want = FILE_OVERRIDES.get((target, kind), want)
            rows.append(Row(f"file-{target}-{kind}", args, want, kind=kind))
    return rows


# What a kind of file means to one reader where it is not a refusal, or refused otherwise.
TEXT_LOGS = ("kernel-log", "lspci", "aer", "nvidia-smi-q")  # text as hosts print it: read as is
FILE_OVERRIDES: dict[tuple[str, str], Want] = {
    **{(t, k): ok() for t in TEXT_LOGS for k in ("not-utf8", "deep-json", "alias-bomb")},
    ("ledger-file", "empty"): err("not a ConfigMap"),
    ("ledger-file", "one-long-line"): err("not a ConfigMap"),
    **{("xid-classes", k): err("header lacks column") for k in ("deep-json", "alias-bomb")},
    **{("xid-classes", k): err("/dev/") for k in ("dev-zero", "dev-null")},
}

ROWS: list[Row] = file_rows() + value_rows() + env_rows()


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
def test_hostile_input(row: Row, tmp_path: Path) -> None:
    seen = run_row(row, tmp_path)
    assert seen.cls not in BAD_CLASSES, (seen.cls, seen.text[-3000:])
    assert (seen.cls, seen.code) == (row.want.cls, row.want.code), (seen.lines, seen.text[-2000:])


def test_the_sweep_covers_every_subcommand_with_300_inputs() -> None:
    assert len(ROWS) >= 300 and len({r.id for r in ROWS}) == len(ROWS)
    commands = {" ".join(a for a in r.args[:2] if not a.startswith("-")) for r in ROWS}
    top = {c.split(" ")[0] for c in commands}
    assert top >= {
        "run",
        "status",
        "evidence",
        "ledger",
        "loadtest",
        "conformance",
        "agent",
        "render",
    }, top


def counts(tmp: Path) -> Counter[str]:
    """Run every row; the number of outcomes per class."""
    seen: Counter[str] = Counter()
    for i, row in enumerate(ROWS):
        where = tmp / f"r{i}"
        where.mkdir()
        started = time.monotonic()
        got = run_row(row, where)
        if time.monotonic() - started > 3:
            print(f"SLOW {row.id}: {time.monotonic() - started:.0f} s", file=sys.stderr)
        seen[got.cls] += 1
        if got.cls != row.want.cls or got.code != row.want.code:
            shown = [line[:200] for line in got.lines[:2]]
            print(f"MISMATCH {row.id}: {got.cls} {got.code} {shown}", file=sys.stderr)
    return seen


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        total = counts(Path(tmp))
    classes = ("right", "error", *BAD_CLASSES, "unclear")
    print(f"{len(ROWS)} hostile inputs: " + ", ".join(f"{c} {total[c]}" for c in classes))
