"""Blast radius, on a real kube-apiserver and a real Prometheus: one bad thing on ANOTHER node or
in another node's series, beside one really faulted node, costs only itself.

`zz-victim` has Xid 79 and a lost GPU held past the hold window; in every row it must be cordoned,
with its reason, in that very cycle (`gpu-node-guard run`, as the CronJob runs it, with the
guard's own ServiceAccount token). Each row adds one bad thing whose name sorts before the
victim's, so a guard that let it stop or take the cycle would miss the victim:

- NODE rows (`a-…`): a Node object out of shape (no status, GPU capacity 0, no nvidia.com/gpu,
  odd labels and annotations, unreadable guard annotations, huge values, a site's own policy
  that refuses the patch, …). Most are faulted in Prometheus too, so they compete for the
  cycle's one cordon; those the guard may rightly cordon (nothing wrong with them but their
  shape) are healthy there, so a row tests that their shape stops nothing.
- SERIES rows (`b-…`): a normal GPU Node whose series are bad (NaN, ±Inf, values outside the
  catalogue, duplicates from a second exporter, odd labels, stale series, …).
- STRUCTURAL rows: what is wrong with Prometheus's answers as a whole aborts the cycle: the row
  asserts the abort line and exit 1, and that nothing was written.

One Prometheus per module holds every row's series (one TSDB: the scenario's families with each
row's edited series merged in); each row creates its Nodes, runs one cycle, and deletes them with
the guard's Jobs, ledger and Events. `ROWS` is the table; `pytest -rA` names each row.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.cli import cli
from guard.example.promserver import LocalPrometheus, free_port, openmetrics_file
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    LEDGER,
    NS,
    ONSET_S,
    T0,
    faulted,
    forget_guard_state,
    healthy,
    ledger_text,
    node_status,
)
from tests.apiserver.kube import MERGE_PATCH, create
from tests.apiserver.kube import guard_job as job_template
from tests.engines import load_openmetrics, serve
from tests.scenario_build import (
    KSM_POD,
    XID,
    NodeTimeline,
    Scenario,
    write_openmetrics,
)
from tests.tiers import require_engine

pytestmark = pytest.mark.apiserver

VICTIM = "zz-victim"
DURATION_S = 90 * 60
TRACEBACK = re.compile(r"Traceback|^\s+File \"", re.M)
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
CORDON = {
    KEYS.reason: "xid-79",
    KEYS.at: "2026-09-21T05:00:00Z",
    KEYS.boot_id: "boot-0",
    KEYS.gpu_capacity: "8",
    KEYS.gpu: f"0000:58:00.0 {UUID}",
}


@dataclass
class Ctx:
    """What a row's setup gets: the admin's core client, its bad node's name, and where to put
    what must be undone after the row."""

    core: client.CoreV1Api
    admin: client.ApiClient
    name: str
    undo: list[Callable[[], None]] = field(default_factory=list)


Setup = Callable[[Ctx], None]
Edit = Callable[[list[str]], list[str]]


@dataclass(frozen=True)
class Row:
    id: str
    kind: str  # "node", "series" or "structural"
    setup: Setup | None = None  # creates the bad node (node and series rows)
    prom: str = "faulted"  # its series in Prometheus: faulted, healthy or none
    edit: Edit | None = None  # series rows: how its series are made bad
    args: tuple[str, ...] = ()  # structural rows: the flags that make the answers bad
    rc: int = 0
    abort: str = ""  # structural rows: the abort line's reason contains this

    @property
    def node(self) -> str:
        return f"{'a' if self.kind == 'node' else 'b'}-{self.id}"


# ---- node rows ----------------------------------------------------------------------------------


def gpu_node(
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool | None = None,
    status: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda s: s,
    spec: dict[str, Any] | None = None,
    boot: str = "boot-1",
) -> Setup:
    """A GPU node as `guard_run.make_gpu_node` makes it (cordoned when annotated), with its
    status passed through `status` (None: no status at all)."""

    def setup(ctx: Ctx) -> None:
        notes = annotations or {}
        body = {
            "metadata": {"name": ctx.name, "annotations": notes, "labels": labels or {}},
            "spec": {
                "unschedulable": bool(notes) if unschedulable is None else unschedulable,
                **(spec or {}),
            },
        }
        ctx.core.create_node(body)
        made = status(node_status(boot=boot, allocatable=7))
        if made is not None:
            ctx.core.patch_node_status(ctx.name, {"status": made}, _content_type=MERGE_PATCH)

    return setup


def cordoned(**changes: str) -> Setup:
    """A node the guard cordoned, with some of its annotations changed (`reason="xid-79\\n"`)."""
    notes = dict(CORDON)
    for attr, value in changes.items():
        notes[getattr(KEYS, attr)] = value
    return gpu_node(annotations=notes)


def annotated(notes: dict[str, str], unschedulable: bool = False) -> Setup:
    return gpu_node(annotations=notes, unschedulable=unschedulable)


def resources(**gpu: str | None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Set (or, with None, remove) nvidia.com/gpu in capacity and allocatable."""

    def change(status: dict[str, Any]) -> dict[str, Any]:
        for where, value in gpu.items():
            if value is None:
                status[where].pop("nvidia.com/gpu")
            else:
                status[where]["nvidia.com/gpu"] = value
        return status

    return change


def without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(status: dict[str, Any]) -> dict[str, Any]:
        status.pop(key)
        return status

    return change


def ready(value: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(status: dict[str, Any]) -> dict[str, Any]:
        status["conditions"][0]["status"] = value
        return status

    return change


def boot_id(value: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(status: dict[str, Any]) -> dict[str, Any]:
        status["nodeInfo"]["bootID"] = value
        return status

    return change


def deleting(ctx: Ctx) -> None:
    """A node on its way out: a finalizer holds it, its deletionTimestamp is set."""
    gpu_node(spec={})(ctx)
    ctx.core.patch_node(ctx.name, {"metadata": {"finalizers": ["example.com/hold"]}})
    ctx.core.delete_node(ctx.name)
    ctx.undo.append(lambda: _unfinalize(ctx.core, ctx.name))


def _unfinalize(core: client.CoreV1Api, name: str) -> None:
    try:
        core.patch_node(name, {"metadata": {"finalizers": None}}, _content_type=MERGE_PATCH)
    except ApiException as exc:
        if exc.status != 404:
            raise


def site_policy(ctx: Ctx) -> None:
    """A site's own ValidatingAdmissionPolicy: nobody changes this node."""
    gpu_node()(ctx)
    api = client.AdmissionregistrationV1Api(ctx.admin)
    name = f"site-protects-{ctx.name}"
    api.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["nodes"],
                        }
                    ]
                },
                "matchConditions": [
                    {"name": "one", "expression": f"object.metadata.name == '{ctx.name}'"}
                ],
                "validations": [{"expression": "false", "message": "protected by the site"}],
            },
        }
    )
    api.create_validating_admission_policy_binding(
        {"metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
    )
    ctx.undo.append(lambda: api.delete_validating_admission_policy_binding(name))
    ctx.undo.append(lambda: api.delete_validating_admission_policy(name))
    deadline = time.monotonic() + 30  # policies reach admission by informer
    while time.monotonic() < deadline:
        try:
            ctx.core.patch_node(ctx.name, {"metadata": {"labels": {"p": "x"}}}, dry_run="All")
        except ApiException as exc:
            if exc.status in (403, 422):
                return
        time.sleep(0.2)
    raise RuntimeError("the site policy was not enforced after 30 s")


def ledger(text: str, setup: Setup | None = None) -> Setup:
    """The bad node's ledger entry is `text` (the node itself made by `setup`)."""

    def make(ctx: Ctx) -> None:
        (setup or gpu_node())(ctx)
        ctx.core.create_namespaced_config_map(
            NS, {"metadata": {"name": LEDGER}, "data": {ctx.name: text}}
        )

    return make


def stray_job(ctx: Ctx) -> None:
    """A cordoned node with an evidence Job for it that the guard did not make (another key)."""
    cordoned()(ctx)
    create(ctx.admin, job_template("evidence", ctx.name, "stray"))


H, HX = "healthy", "healthy-xid"  # the bad node's series: no fault / Xid 79 but no GPU lost
LINE = f"2026-09-20T05:00:00Z xid-79 0000:58:00.0 {UUID} manual\n"
BIG = "x" * 200_000
MANY_LABELS = {f"example.com/l{i}": f"v{i}" for i in range(200)}
MANY_NOTES = {f"example.com/a{i}": "v" * 500 for i in range(300)}
NODE_ROWS = [
    # the Node's status
    Row("no-status", "node", gpu_node(status=lambda s: None)),
    Row("capacity-zero", "node", gpu_node(status=resources(capacity="0", allocatable="0"))),
    Row("no-gpu-resource", "node", gpu_node(status=resources(capacity=None, allocatable=None))),
    Row("allocatable-missing", "node", gpu_node(status=resources(allocatable=None)), prom=H),
    Row("capacity-missing", "node", gpu_node(status=resources(capacity=None))),
    Row("capacity-huge", "node", gpu_node(status=resources(capacity="1000000"))),
    Row("capacity-suffix", "node", gpu_node(status=resources(capacity="8k"))),
    Row("capacity-exponent", "node", gpu_node(status=resources(capacity="8e0"))),
    Row("allocatable-above-capacity", "node", gpu_node(status=resources(allocatable="64")), prom=H),
    Row("no-conditions", "node", gpu_node(status=without("conditions")), prom=H),
    Row("no-node-info", "node", gpu_node(status=without("nodeInfo")), prom=H),
    Row("not-ready", "node", gpu_node(status=ready("False")), prom=H),
    Row("ready-unknown", "node", gpu_node(status=ready("Unknown")), prom=H),
    Row("ready-odd", "node", gpu_node(status=ready("Maybe")), prom=H),
    Row("boot-id-empty", "node", gpu_node(status=boot_id("")), prom=H),
    # refused by the node-scope policy (a boot id is written into an annotation): fallback
    Row("boot-id-newline", "node", gpu_node(status=boot_id("boot-1\n")), rc=1),
    Row("boot-id-huge", "node", gpu_node(status=boot_id("b" * 20_000)), rc=1),
    Row("boot-id-spaces", "node", gpu_node(status=boot_id("boot 1 of 2")), prom=H),
    # the Node's spec and metadata
    Row("human-cordon", "node", gpu_node(unschedulable=True)),
    Row(
        "noexecute-taint",
        "node",
        gpu_node(spec={"taints": [{"key": "example.com/broken", "effect": "NoExecute"}]}),
        prom=H,
    ),
    Row(
        "many-taints",
        "node",
        gpu_node(
            spec={
                "taints": [
                    {"key": f"example.com/t{i}", "value": "v", "effect": "NoSchedule"}
                    for i in range(100)
                ]
            }
        ),
        prom=H,
    ),
    Row("deleting", "node", deleting, prom=H),
    Row("site-policy-refuses", "node", site_policy, rc=1),
    Row("many-labels", "node", gpu_node(labels=MANY_LABELS), prom=H),
    Row("label-long-value", "node", gpu_node(labels={"example.com/x": "v" * 63}), prom=H),
    Row("gpu-present-false", "node", gpu_node(labels={"nvidia.com/gpu.present": "false"}), prom=H),
    Row("many-annotations", "node", annotated(MANY_NOTES), prom=H),
    Row("annotation-200kb", "node", annotated({"example.com/big": BIG}), prom=H),
    Row(
        "annotation-unicode",
        "node",
        annotated({"example.com/u": "ノード\u202e\u0000\ufeff"}),
        prom=H,
    ),
    Row(
        "foreign-prefix-lookalike",
        "node",
        annotated({"gpu-node-guard.io.evil/auto-cordon-reason": "xid-79"}),
        prom=H,
    ),
    Row("no-series-at-all", "node", gpu_node(), prom="none"),
    Row("long-name-253", "node", gpu_node(), prom=H),
    # the guard's own annotations, unreadable
    Row("reason-newline", "node", cordoned(reason="xid-79\n")),
    Row("reason-empty", "node", cordoned(reason="")),
    Row("reason-upper", "node", cordoned(reason="XID-79")),
    Row("reason-no-number", "node", cordoned(reason="xid-")),
    Row("reason-huge-number", "node", cordoned(reason="xid-" + "9" * 5000)),
    Row("reason-superscript", "node", cordoned(reason="xid-²")),
    Row("reason-unknown-word", "node", cordoned(reason="gremlins")),
    Row("reason-trailing-space", "node", cordoned(reason="xid-79 ")),
    Row("reason-200kb", "node", cordoned(reason=BIG)),
    Row("at-garbage", "node", cordoned(at="yesterday")),
    Row("at-empty", "node", cordoned(at="")),
    Row("at-year-9999", "node", cordoned(at="9999-12-31T23:59:59-23:59")),
    Row("at-year-0001", "node", cordoned(at="0001-01-01T00:00:00+01:00")),
    Row("at-future", "node", cordoned(at="2030-01-01T00:00:00Z")),
    Row("at-newline", "node", cordoned(at="2026-09-21T05:00:00Z\n")),
    Row("at-no-zone", "node", cordoned(at="2026-09-21T05:00:00")),
    Row("boot-annotation-empty", "node", cordoned(boot_id="")),
    Row("boot-annotation-newline", "node", cordoned(boot_id="boot-0\n")),
    Row("capacity-annotation-zero", "node", cordoned(gpu_capacity="0")),
    Row("capacity-annotation-negative", "node", cordoned(gpu_capacity="-8")),
    Row("capacity-annotation-newline", "node", cordoned(gpu_capacity="8\n")),
    Row("capacity-annotation-huge", "node", cordoned(gpu_capacity="9" * 400)),
    Row("capacity-annotation-not-int", "node", cordoned(gpu_capacity="8x")),
    Row("gpu-annotation-one-field", "node", cordoned(gpu="0000:58:00.0")),
    Row("gpu-annotation-three-fields", "node", cordoned(gpu=f"0000:58:00.0 {UUID} extra")),
    Row("gpu-annotation-bad-pci", "node", cordoned(gpu=f"zz:58:00.0 {UUID}")),
    Row("gpu-annotation-bad-uuid", "node", cordoned(gpu="0000:58:00.0 GPU-nothex")),
    Row("gpu-annotation-newline", "node", cordoned(gpu=f"0000:58:00.0 {UUID}\n")),
    Row("cancelled-garbage", "node", annotated({KEYS.cancelled: "alice said so"})),
    Row(
        "cancelled-newline",
        "node",
        annotated({KEYS.cancelled: f"boot-1 {UUID} xid-79 2026-09-21T05:00:00Z\n"}),
    ),
    Row("returned-garbage", "node", annotated({KEYS.returned: "soon"})),
    Row("checked-boot-garbage", "node", annotated({KEYS.checked_boot: "\x00\x01"})),
    Row("hold-200kb", "node", annotated({KEYS.hold: BIG}, unschedulable=True)),
    Row("hold-empty", "node", annotated({KEYS.hold: ""}, unschedulable=True)),
    Row("loadtest-result-garbage", "node", cordoned(loadtest_result="{not json")),
    Row("conformance-failed-garbage", "node", annotated({KEYS.conformance_failed: "ﬁ" * 1000})),
    Row("reset-done-garbage", "node", cordoned(reset_done="maybe")),
    Row("cordon-annotations-but-schedulable", "node", annotated(dict(CORDON))),
    # the ledger and the Jobs beside the bad node
    Row("ledger-garbage-line", "node", ledger("garbage\n"), prom=H),
    Row("ledger-no-newline", "node", ledger(LINE.rstrip("\n")), prom=H),
    Row("ledger-year-0001", "node", ledger(LINE.replace("2026-09-20", "0001-01-01")), prom=H),
    Row("ledger-2000-lines", "node", ledger(LINE * 2000), prom=H),
    Row("ledger-binary", "node", ledger("\x00\x01\x02\ufffd\n"), prom=H),
    Row("stray-evidence-job", "node", stray_job),
]


# ---- series rows --------------------------------------------------------------------------------


def _split(line: str) -> tuple[str, str, str, str]:
    """`name{labels} value stamp` → its four parts (labels may hold spaces)."""
    head, _, rest = line.rpartition("} ")
    name, _, labels = head.partition("{")
    value, _, stamp = rest.partition(" ")
    return name, labels, value, stamp


def _offset(stamp: str) -> float:
    return float(stamp) - T0.timestamp()


def values(metric: str, value: str, *, gpu: str | None = "4", since_s: int = ONSET_S) -> Edit:
    """`metric`'s samples (of GPU `gpu`; None: every series) from `since_s` on are `value`."""

    def edit(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if not line.startswith(metric + "{"):
                out.append(line)
                continue
            name, labels, old, stamp = _split(line)
            hit = gpu is None or f'gpu="{gpu}"' in labels
            if hit and _offset(stamp) >= since_s:
                old = value
            out.append(f"{name}{{{labels}}} {old} {stamp}")
        return out

    return edit


def labels(metric: str, old: str, new: str, *, gpu: str | None = "4") -> Edit:
    """`old` replaced by `new` in the labels of `metric`'s series (of GPU `gpu`)."""

    def edit(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if line.startswith(metric + "{"):
                name, labs, value, stamp = _split(line)
                if gpu is None or f'gpu="{gpu}"' in labs:
                    labs = labs.replace(old, new)
                line = f"{name}{{{labs}}} {value} {stamp}"
            out.append(line)
        return out

    return edit


def twice(metric: str, extra: str, value: str | None = None, *, gpu: str | None = "4") -> Edit:
    """A second series of `metric` (of GPU `gpu`) with the label `extra` added (another
    exporter, another scrape), its samples `value` (None: the same as the first)."""

    def edit(lines: list[str]) -> list[str]:
        out, copies = [], []
        for line in lines:
            out.append(line)
            if line.startswith(metric + "{"):
                name, labs, old, stamp = _split(line)
                if gpu is None or f'gpu="{gpu}"' in labs:
                    v = old if value is None or _offset(stamp) < ONSET_S else value
                    copies.append(f"{name}{{{labs},{extra}}} {v} {stamp}")
                continue
            if copies:  # the first line after the family's samples
                out[-1:-1] = copies
                copies = []
        return out

    return edit


def stops(metric: str, at_s: int, *, gpu: str | None = None) -> Edit:
    """`metric`'s samples end at `at_s` (the exporter went away; the series is stale)."""

    def edit(lines: list[str]) -> list[str]:
        return [
            line
            for line in lines
            if not (
                line.startswith(metric + "{")
                and _offset(_split(line)[3]) > at_s
                and (gpu is None or f'gpu="{gpu}"' in _split(line)[1])
            )
        ]

    return edit


def added(family: str, *series: str, value: str = "1") -> Edit:
    """A family of its own for the node: `series` are label sets (`@NODE@` stands for the bad
    node's name), `value` at every scrape."""

    def edit(lines: list[str]) -> list[str]:
        new = [f"# TYPE {family} gauge"]
        for labs in series:
            for offset in range(0, DURATION_S + 1, 15):
                stamp = T0.timestamp() + offset
                new.append(f"{family}{{{labs}}} {value} {stamp:.3f}")
        return [*lines[:-1], *new, lines[-1]]  # before "# EOF"

    return edit


def both(*edits: Edit) -> Edit:
    def edit(lines: list[str]) -> list[str]:
        for one in edits:
            lines = one(lines)
        return lines

    return edit


ALLOC = "kube_node_status_allocatable"
CAP = "kube_node_status_capacity"
UNSCHED = "kube_node_spec_unschedulable"
PHASE = "kube_pod_status_phase"
AGENT_OK = "gpu_node_guard_agent_check_ok"
COUNT = "DCGM_EXP_XID_ERRORS_COUNT"


def series(id_: str, edit: Edit, prom: str = "faulted") -> Row:
    return Row(id_, "series", gpu_node(), prom, edit)


# The GPU loss is capacity - allocatable computed in PromQL (guard.codec.queries.gpu_loss): the
# guard never sees the raw allocatable, so an impossible one (negative, a fraction) reads as a loss
# and its node, faulted, takes the cycle's cordon.
SERIES_ROWS = [
    # the Xid gauge's values
    series("xid-nan", values(XID, "NaN")),
    series("xid-plus-inf", values(XID, "+Inf")),
    series("xid-minus-inf", values(XID, "-Inf")),
    series("xid-1e308", values(XID, "1e308")),
    series("xid-negative", values(XID, "-79")),
    series("xid-fraction", values(XID, "79.5")),
    series("xid-tiny", values(XID, "1e-300")),
    series("xid-outside-catalogue", values(XID, "999999999")),
    series("xid-nan-every-gpu", values(XID, "NaN", gpu=None, since_s=0)),
    # the Xid gauge's labels
    series("uuid-space", labels(XID, 'UUID="GPU-', 'UUID="GPU- ')),
    series("uuid-newline", labels(XID, 'UUID="GPU-', 'UUID="GPU-\\n')),
    series("uuid-empty", labels(XID, 'UUID="GPU-', 'UUID="",x="GPU-'), prom=H),
    series("uuid-missing", labels(XID, "UUID=", "uuid_was="), prom=H),
    series("pci-garbage", labels(XID, 'pci_bus_id="0000', 'pci_bus_id="zz",was="')),
    series("pci-missing", labels(XID, "pci_bus_id=", "pci_was="), prom=H),
    series("gpu-label-word", labels(XID, 'gpu="4"', 'gpu="four"')),
    series("gpu-label-negative", labels(XID, 'gpu="4"', 'gpu="-4"')),
    series("gpu-label-huge", labels(XID, 'gpu="4"', 'gpu="99999999999999999999"')),
    series(
        "hostname-unicode",
        labels(XID, 'Hostname="b-hostname-unicode"', 'Hostname="b-hostname-unicodé"', gpu=None),
    ),
    series(
        "hostname-newline",
        labels(XID, 'Hostname="b-hostname-newline"', 'Hostname="b-hostname-newline\\n"', gpu=None),
    ),
    series(
        "hostname-upper",
        labels(XID, 'Hostname="b-hostname-upper"', 'Hostname="B-HOSTNAME-UPPER"', gpu=None),
    ),
    series(
        "hostname-300",
        labels(XID, 'Hostname="b-hostname-300"', f'Hostname="{"h" * 300}"', gpu=None),
    ),
    series("hostname-empty", labels(XID, 'Hostname="b-hostname-empty"', 'Hostname=""', gpu=None)),
    series(
        "hostname-two-labels-disagree",
        labels(
            XID,
            'Hostname="b-hostname-two-labels-disagree"',
            'Hostname="b-hostname-two-labels-disagree",hostname="someone-else"',
            gpu=None,
        ),
        prom=H,
    ),
    series(
        "hostname-names-victim",
        labels(XID, 'Hostname="b-hostname-names-victim"', f'Hostname="{VICTIM}"', gpu="4"),
    ),
    series(
        "node-label-unknown-node",
        labels(
            XID,
            'Hostname="b-node-label-unknown-node"',
            'Hostname="b-node-label-unknown-node",node="not-a-node"',
            gpu=None,
        ),
        prom=H,
    ),
    series(
        "label-value-10k", labels(XID, 'modelName="', f'junk="{"j" * 10_000}",modelName="'), prom=H
    ),
    series(
        "label-quotes-backslashes",
        labels(XID, 'modelName="', 'junk="\\"\\\\\\"",modelName="'),
        prom=H,
    ),
    # two exporters for one GPU
    series("xid-twice-same", twice(XID, 'instance="second"'), prom=HX),
    series("xid-twice-disagree", twice(XID, 'instance="second"', "48")),
    series("xid-twice-nan", twice(XID, 'instance="second"', "NaN"), prom=HX),
    series("allocatable-twice-disagree", twice(ALLOC, 'instance="second"', "8", gpu=None)),
    series("capacity-twice-disagree", twice(CAP, 'instance="second"', "16", gpu=None), prom=H),
    series("unschedulable-twice", twice(UNSCHED, 'instance="second"', "1", gpu=None)),
    # kube-state-metrics' values
    series("allocatable-nan", values(ALLOC, "NaN", gpu=None)),
    series("allocatable-negative", values(ALLOC, "-7", gpu=None)),
    series("allocatable-inf", values(ALLOC, "+Inf", gpu=None)),
    series("allocatable-fraction", values(ALLOC, "6.5", gpu=None)),
    series("capacity-nan", values(CAP, "NaN", gpu=None)),
    series("capacity-zero", values(CAP, "0", gpu=None, since_s=0)),
    series("unschedulable-nan", values(UNSCHED, "NaN", gpu=None), prom=H),
    series("unschedulable-two", values(UNSCHED, "2", gpu=None)),
    # stale and missing series
    series("xid-stale", stops(XID, ONSET_S - 400)),  # past the 5-minute lookback
    series("xid-stopped-long-ago", stops(XID, 600)),
    series("allocatable-stale", stops(ALLOC, ONSET_S - 400)),
    series("allocatable-just-stopped", stops(ALLOC, ONSET_S + 60), prom=H),
    series("ksm-gone", both(stops(ALLOC, 0), stops(CAP, 0), stops(UNSCHED, 0))),
    # windowed Xid counts
    series(
        "count-xid-superscript",
        added(
            COUNT,
            'Hostname="@NODE@",gpu="4",UUID="' + UUID + '",xid="²",window_size_in_ms="300000"',
        ),
    ),
    series(
        "count-xid-word",
        added(
            COUNT, 'Hostname="@NODE@",gpu="4",UUID="' + UUID + '",xid="abc",window_size_in_ms="1"'
        ),
    ),
    series(
        "count-xid-huge",
        added(COUNT, 'Hostname="@NODE@",gpu="4",UUID="' + UUID + '",xid="' + "9" * 40 + '"'),
    ),
    # the agent and the pods
    series("agent-nan", added(AGENT_OK, 'node="@NODE@",check="nvidia-match"', value="NaN"), prom=H),
    series(
        "agent-inf", added(AGENT_OK, 'node="@NODE@",check="nvidia-match"', value="+Inf"), prom=H
    ),
    series(
        "agent-odd-check",
        added(
            "gpu_node_guard_agent_check_info",
            'node="@NODE@",check="nvidia-match",status="MAYBE",detail="' + "d" * 5000 + '"',
        ),
        prom=H,
    ),
    series(
        "pod-phase-odd", added(PHASE, 'namespace="x",pod="p\\n",uid="u",phase="Sideways"'), prom=H
    ),
    series(
        "pod-requests-on-node",
        added(
            "kube_pod_container_resource_requests",
            'namespace="n",pod="p",uid="u",container="c",node="@NODE@",resource="nvidia_com_gpu"',
            'namespace="n",pod="p",uid="u",container="c",node="@NODE@",resource="nvidia_com_gpu",'
            'unit="integer"',
        ),
        prom=H,
    ),
    series(
        "pod-requests-nan",
        added(
            "kube_pod_container_resource_requests",
            'namespace="n",pod="q",uid="u",container="c",node="@NODE@",resource="nvidia_com_gpu",'
            'unit="integer"',
            value="NaN",
        ),
        prom=H,
    ),
]


# ---- structural rows ----------------------------------------------------------------------------

STRUCTURAL_ROWS = [
    Row(
        "input-metric-no-series",
        "structural",
        args=("--dcgm-selector", 'job="nobody"'),
        rc=1,
        abort="DCGM_FI_DEV_XID_ERRORS",
    ),
    Row(
        "ksm-no-series",
        "structural",
        args=("--ksm-selector", 'job="nobody"'),
        rc=1,
        abort="kube_node_spec_unschedulable",
    ),
    Row(
        "too-many-series",
        "structural",
        args=("--prometheus-limits", "series=100"),
        rc=1,
        abort="series",
    ),
    Row(
        "not-prometheus-tls",
        "structural",
        args=("--prometheus-url", "{apiserver}"),
        rc=1,
        abort="query input-",
    ),
    Row(
        "http-404-path", "structural", args=("--prometheus-url", "{url}/nowhere"), rc=1, abort="404"
    ),
    Row(
        "nothing-listening",
        "structural",
        args=("--prometheus-url", "http://127.0.0.1:{free}"),
        rc=1,
        abort="127.0.0.1",
    ),
]

ROWS = [*NODE_ROWS, *SERIES_ROWS, *STRUCTURAL_ROWS]
# Not a row: a faulted GPU whose exporter gives no pci_bus_id, cordoned on its own (below).
NO_PCI = series("no-pci-faulted", labels(XID, "pci_bus_id=", "pci_was="))


def _names(row: Row) -> str:
    if row.id == "long-name-253":
        return ("a-long-name-" + "n" * 250)[:253]
    return row.node


# ---- the module's Prometheus --------------------------------------------------------------------


def _timeline(row: Row) -> NodeTimeline:
    name = _names(row)
    if row.prom == "healthy-xid":  # the same Xid 79 twice, no GPU lost: nothing to cordon
        return NodeTimeline(name, gpus=8, xids=((ONSET_S, 4, 79),))
    return healthy(name) if row.prom == "healthy" else faulted(name)


def _families(text: str) -> list[tuple[str, list[str]]]:
    """OpenMetrics text → [(family, its lines)] in order (the `# EOF` left out)."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line == "# EOF":
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split(" ")[2]
            if not out or out[-1][0] != name:
                out.append((name, []))
        out[-1][1].append(line)
    return out


def _openmetrics(scenario: Scenario) -> str:
    buf = io.StringIO()
    write_openmetrics(scenario, buf)
    return buf.getvalue()


def merged_openmetrics() -> str:
    """The victim's and every plain row's series, then each series row's edited series, merged
    family by family (promtool reads each family once)."""
    plain = tuple(_timeline(r) for r in ROWS if r.kind == "node" and r.prom != "none")
    main = Scenario(
        start=T0, duration_s=DURATION_S, nodes=(faulted(VICTIM), *plain), pods=(KSM_POD,)
    )
    families: dict[str, list[str]] = {}
    for name, lines in _families(_openmetrics(main)):
        families.setdefault(name, []).extend(lines)
    for row in (*(r for r in ROWS if r.kind == "series"), NO_PCI):
        mini = Scenario(start=T0, duration_s=DURATION_S, nodes=(_timeline(row),), pods=())
        text = _openmetrics(mini).splitlines()
        assert row.edit is not None
        edited = [line.replace("@NODE@", row.node) for line in row.edit(text)]
        for name, lines in _families("\n".join(edited)):
            samples = [line for line in lines if not line.startswith("#")]
            if name in families:
                families[name].extend(samples)
            else:
                families[name] = lines
    return "\n".join(line for lines in families.values() for line in lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    require_engine("prometheus2")
    data_dir = tmp_path_factory.mktemp("blast-prom")
    openmetrics_file(data_dir).write_text(merged_openmetrics(), encoding="utf-8")
    load_openmetrics(data_dir, "prometheus2")
    with serve(data_dir, ready_at=T0 + timedelta(seconds=DURATION_S)) as server:
        yield server


# ---- one row ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cycle:
    rc: int
    plan: dict[str, Any]
    log: list[dict[str, Any]]
    text: str


def run_cycle(
    prom: LocalPrometheus, kubeconfig: str, *extra: str, at: datetime = ISOLATE_AT
) -> Cycle:
    """`gpu-node-guard run` in this process, as the CronJob runs it (JSON plan and log)."""
    args = [
        "run",
        "--prometheus-url",
        prom.url,
        "--kubeconfig",
        kubeconfig,
        "--at",
        at.isoformat(),
        "--output",
        "json",
        "--log-format",
        "json",
        "--prometheus-limits",
        "timeout=5",
        *extra,
    ]
    result = CliRunner().invoke(cli, args, prog_name="gpu-node-guard")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"uncaught {result.exception!r}") from result.exception
    log = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    plan = dict(json.loads(result.stdout)) if result.stdout.strip() else {}
    return Cycle(result.exit_code, plan, log, result.stdout + result.stderr)


def ledger_of(core: client.CoreV1Api, node: str) -> str:
    """`node`'s ledger text; "" when there is no ledger at all."""
    try:
        return ledger_text(core, node)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return ""


def _actions(plan: dict[str, Any], node: str) -> list[tuple[str, str, str]]:
    return [
        (a["type"], a["reason"], a["outcome"]["status"])
        for a in plan.get("actions", [])
        if a["node"] == node
    ]


@pytest.fixture
def clean(admin: client.ApiClient) -> Iterator[list[Ctx]]:
    """Each row's contexts; afterwards its undo steps, its Nodes, the guard's state."""
    core, made = client.CoreV1Api(admin), []
    yield made
    for ctx in made:
        for step in reversed(ctx.undo):
            step()
        try:
            core.delete_node(ctx.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    forget_guard_state(core, admin)


def _param(row: Row) -> Any:
    return pytest.param(row, id=f"{row.kind}-{row.id}")


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_one_bad_thing_costs_only_itself(
    row: Row, prom: LocalPrometheus, guard_kubeconfig, admin, clean, apiserver
):
    core = client.CoreV1Api(admin)
    victim = Ctx(core, admin, VICTIM)
    clean.append(victim)
    gpu_node()(victim)
    extra = tuple(
        a.format(url=prom.url, free=free_port(), apiserver=apiserver.url) for a in row.args
    )
    if row.setup is not None:
        ctx = Ctx(core, admin, _names(row))
        clean.append(ctx)
        row.setup(ctx)

    cycle = run_cycle(prom, str(guard_kubeconfig), *extra)

    bad = _actions(cycle.plan, _names(row))
    aborts = [line for line in cycle.log if line.get("event") == "abort"]
    seen = f"rc={cycle.rc} victim={_actions(cycle.plan, VICTIM)} bad={bad} aborts={aborts}"
    assert not TRACEBACK.search(cycle.text), cycle.text
    errors = [line for line in cycle.log if line["level"] == "ERROR"]
    assert cycle.rc == row.rc, (seen, errors)
    after = core.read_node(VICTIM)
    if row.kind == "structural":
        (abort,) = aborts
        assert row.abort in abort["reason"], abort
        assert not after.spec.unschedulable and not ledger_of(core, VICTIM)
        return
    assert ("cordon", "xid-79", "applied") in _actions(cycle.plan, VICTIM), seen
    assert after.spec.unschedulable and after.metadata.annotations[KEYS.reason] == "xid-79"
    assert "xid-79" in ledger_of(core, VICTIM)
    assert not aborts
    assert ("cordon", "xid-79", "applied") not in bad, seen  # the cycle's one cordon: the victim


def test_the_table_has_80_bad_things_beside_the_victim():
    assert len({(r.kind, r.id) for r in ROWS}) == len(ROWS)
    assert len([r for r in ROWS if r.kind != "structural"]) >= 80


def test_a_gpu_without_a_pci_address_is_cordoned_without_an_evidence_job(
    prom: LocalPrometheus, guard_kubeconfig, admin, clean
):
    """The evidence Job's --pci is an address the policies pin: a faulted GPU whose exporter
    gives no pci_bus_id is cordoned with its ledger line and one WARN, and no Job is tried
    (the API would refuse it, exit 1 every cycle), then or in the next cycle."""
    core = client.CoreV1Api(admin)
    ctx = Ctx(core, admin, NO_PCI.node)
    clean.append(ctx)
    gpu_node()(ctx)

    cycle = run_cycle(prom, str(guard_kubeconfig))

    assert cycle.rc == 0, cycle.text
    got = _actions(cycle.plan, ctx.name)
    assert (
        got[0] == ("cordon", "xid-79", "applied") and ("create-job", "xid-79", "applied") not in got
    )
    (warn,) = [line for line in cycle.log if line.get("reason") == "evidence-no-pci"]
    assert warn["level"] == "WARN" and warn["node"] == ctx.name
    assert core.read_node(ctx.name).metadata.annotations[KEYS.gpu].startswith("unknown GPU-")
    assert " xid-79 unknown GPU-" in ledger_of(core, ctx.name)
    later = run_cycle(prom, str(guard_kubeconfig), at=ISOLATE_AT + timedelta(minutes=5))
    assert later.rc == 0 and not [a for a in _actions(later.plan, ctx.name) if a[0] == "create-job"]
