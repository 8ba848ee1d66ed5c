"""Executors, the only code that writes: `KubeExecutor` applies, `PrintExecutor` prints (the CLI
picks one: no `dry_run` flag below it). One log line per action, from its outcome (docs/writes.md);
a node patch that did not land stops every later write on that node in this cycle."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

import yaml

from guard.actions import (
    Action,
    Annotate,
    AppendLedgerLine,
    Cordon,
    CreateClaim,
    CreateJob,
    EmitEvent,
    Skip,
    TaintDevice,
    UntaintDevice,
)
from guard.apply import events, node_patch
from guard.apply.outcome import Outcome
from guard.codec.check_records import fence_jobs_value
from guard.doors import ledger_store
from guard.doors.kube import Conflict, Kube, KubeError, NotFound
from guard.doors.kube_errors import Refused
from guard.jobs import spec_digest
from guard.log import Level, Log, Value
from guard.model import Snapshot
from guard.names import APP_LABEL, APP_NAME, Annotations
from guard.plan.check_jobs import UID
from guard.plan.common import LEDGER_ARCHIVED
from guard.settings import Settings
from guard.states import Decision

NodePatch = node_patch.NodePatch
# Outcome.reason of a write the API refused for good (4xx but 409, 429; 404): not retried, and
# for a cordon the isolation check's next candidate is tried (refused_cordons).
REFUSED = "refused"


def refused_cordons(outcomes: Sequence[Outcome]) -> frozenset[str]:
    """Nodes whose cordon the API refused in this cycle."""
    return frozenset(
        o.action.node
        for o in outcomes
        if isinstance(o.action, Cordon) and o.status == "failed" and o.reason == REFUSED
    )


def cordon_landed(outcomes: Sequence[Outcome]) -> bool:
    """A cordon or a device taint landed (or was found landed) in this cycle: no other isolation
    may follow it."""
    landed = ("applied", "already-done", "would-apply")
    return any(isinstance(o.action, Cordon | TaintDevice) and o.status in landed for o in outcomes)


@dataclass
class PrintExecutor:
    """Dry run: the same lines the real run logs, as ``dry-run would …``; writes nothing."""

    log: Log
    show_manifests: bool = True
    outcomes: list[Outcome] = field(default_factory=list)

    def apply(self, action: Action) -> Outcome:
        outcome = Outcome(action, "noted" if isinstance(action, Skip) else "would-apply")
        _log(self.log, outcome)
        if isinstance(action, CreateJob) and self.show_manifests:
            manifest = yaml.safe_dump(action.manifest, sort_keys=False, width=100)
            self.log.stream.write("".join(f"    {row}\n" for row in manifest.splitlines()))
        self.outcomes.append(outcome)
        return outcome


@dataclass
class KubeExecutor:
    kube: Kube
    log: Log
    s: Settings
    snap: Snapshot  # the nodes as read (uid, resourceVersion for Events); `now` for Event times
    instance: str = ""  # Events' reportingInstance: the guard pod's name
    outcomes: list[Outcome] = field(default_factory=list)
    _blocked: dict[str, str] = field(default_factory=dict, repr=False)
    _refs: dict[str, events.NodeRef] = field(default_factory=dict, repr=False)
    _archived: dict[str, str] = field(default_factory=dict, repr=False)  # node → what moved
    _fence_uids: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.keys = Annotations(self.s.annotation_prefix)
        for n in self.snap.nodes:
            self._refs[n.name] = events.NodeRef(n.name, n.uid, n.resource_version)
            self._fence_uids[n.name] = n.fence_jobs

    def apply(self, action: Action) -> Outcome:
        outcome = self._outcome(action)
        _log(self.log, outcome)
        self.outcomes.append(outcome)
        if isinstance(action, AppendLedgerLine) and outcome.detail.startswith("moved"):
            self._archived[action.node] = outcome.detail
        return outcome

    def _outcome(self, action: Action) -> Outcome:
        if isinstance(action, Skip):
            return Outcome(action, "noted")
        if action.node in self._blocked:
            return Outcome(action, "skipped", "earlier-write-failed", self._blocked[action.node])
        try:
            outcome = self._write(action)
        except (Refused, NotFound) as exc:  # for good, for this object: another one may go on
            outcome = Outcome(action, "failed", REFUSED, str(exc))
        except KubeError as exc:
            outcome = Outcome(action, "failed", detail=str(exc))
        # A device taint's rule or a load-test claim that did not land stops the node's later
        # writes, as a node patch does (no record, no Job on a claim that is not the guard's).
        blocking = isinstance(action, NodePatch | TaintDevice | UntaintDevice | CreateClaim)
        if blocking and outcome.status in ("failed", "skipped"):
            word = outcome.type_word
            self._blocked[action.node] = f"{word} of this node did not land: {outcome.detail}"
        return outcome

    def _write(self, action: Action) -> Outcome:
        if isinstance(action, NodePatch):
            patched = node_patch.patch(self.kube, self.keys, action)
            if patched.node is not None:
                self._remember(patched.node)
            return patched.outcome
        match action:
            case CreateJob():
                return self._create_job(action)
            case TaintDevice():
                return self._taint_device(action)
            case UntaintDevice():
                return self._untaint_device(action)
            case CreateClaim():
                return self._create_claim(action)
            case AppendLedgerLine():
                return self._append_ledger(action)
            case EmitEvent() if (
                action.reason == LEDGER_ARCHIVED and action.node not in self._archived
            ):
                why = "the ledger append moved no lines (the ledger changed since the read)"
                return Outcome(action, "skipped", "changed-under-us", why)
            case EmitEvent():
                return self._event(action)
            case Skip():
                return Outcome(action, "noted")
            case _:
                assert_never(action)

    def _remember(self, node: dict[str, Any]) -> None:
        """The node's uid and version for the Events about it (after a patch: the new one)."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        if name:
            self._refs[name] = events.NodeRef(
                name, str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
            )

    def _create_job(self, action: CreateJob) -> Outcome:
        try:
            made = self.kube.create_job(action.namespace, action.manifest)
        except Conflict:  # a retried create whose first try landed, or another guard run
            return self._existing_job(action)
        return self._made(action, made, f"job/{action.name}")

    def _made(self, action: CreateJob | CreateClaim, made: dict[str, Any], what: str) -> Outcome:
        """The create landed: its uid recorded on the node where the action says so."""
        if not action.record:
            return Outcome(action, "applied")
        return self._record(action, _uid(made), what)

    def _existing_job(self, action: CreateJob) -> Outcome:
        """A Job of this name exists: exactly what the guard rendered (a retried create) and not
        recorded yet, it is recorded now; else left alone (the next cycle names it)."""
        exists = Outcome(action, "already-done", "job-exists", f"job/{action.name} exists")
        if not action.record:
            return exists
        found = self.kube.job(action.namespace, action.name)
        node = self.snap.node(action.node)
        recorded = node.job_record(action.job_kind) if node else None
        if (
            found is None
            or spec_digest(found) != spec_digest(action.manifest)
            or (recorded is not None and recorded.name == action.name)
        ):
            return exists
        done = self._record(action, _uid(found), f"job/{action.name}")
        if done.status == "failed":
            return done
        return Outcome(action, "already-done", "job-exists", f"{exists.detail}; {done.detail}")

    def _create_claim(self, action: CreateClaim) -> Outcome:
        """Create the claim and record its uid. One already there counts only when the node's
        record names it; any other fails the create (and the Job after it) and is deleted."""
        try:
            made = self.kube.create_resource_claim(action.namespace, action.manifest)
        except Conflict:
            uid = _uid(self.kube.resource_claim(action.namespace, action.name))
            node = self.snap.node(action.node)
            rec = node.claim_record if node else None
            if rec is not None and (rec.name, rec.uid) == (action.name, uid):
                return Outcome(action, "already-done", "claim-exists", f"{action.name} exists")
            why = (
                f"resourceclaim {action.namespace}/{action.name} exists (uid {uid or 'none'}) but "
                "is not the claim the guard recorded for this node"
            )
            try:
                if uid:  # none: it is gone already
                    self.kube.delete_resource_claim(action.namespace, action.name, uid)
            except KubeError as exc:
                why += f"; not deleted ({exc}): delete it and the guard creates its own"
            else:
                why += "; deleted it, the guard creates its own next cycle"
            return Outcome(action, "failed", REFUSED, why)
        return self._made(action, made, f"resourceclaim/{action.name}")

    def _record(self, action: CreateJob | CreateClaim, uid: str, what: str) -> Outcome:
        """Record the uid of what the guard made on the node (one resourceVersion-guarded patch):
        a later cycle trusts only this uid; without the record the next cycle names the object."""
        key, value = action.record
        ref = self._refs.get(action.node)
        notes: tuple[tuple[str, str], ...] = ((key, value.replace(UID, uid)),)
        fence_uids = self._fence_uids.get(action.node, ())
        if isinstance(action, CreateJob) and action.job_kind == "fence":
            # The guard's fence Jobs by uid, for the audit (guard.plan.fence_audit).
            fence_uids = tuple(fence_jobs_value(fence_uids, uid).split(" "))
            notes += ((self.keys.fence_jobs, " ".join(fence_uids)),)
        version = ref.resource_version if ref else ""
        note = Annotate(action.node, Decision.JOB_RECORDED, version, notes, "")
        try:
            patched = node_patch.patch(self.kube, self.keys, note)
            if patched.outcome.status == "skipped":
                raise KubeError(patched.outcome.detail)
        except KubeError as exc:
            why = f"{what} created, its record {key} not written: {exc}"
            return Outcome(action, "failed", detail=why)
        if patched.node is not None:
            self._remember(patched.node)
        if len(notes) > 1:
            self._fence_uids[action.node] = fence_uids
        return Outcome(action, "applied", detail=f"recorded uid {uid} in {key}")

    def _taint_device(self, action: TaintDevice) -> Outcome:
        """Create the rule; one of that name already there counts only when it is the guard's
        and selects the same device (a retried create): a person's rule is left alone."""
        try:
            self.kube.create_device_taint_rule(action.manifest)
        except Conflict:
            found = self.kube.device_taint_rule(action.name) or {}
            labels = (found.get("metadata") or {}).get("labels") or {}
            same = (found.get("spec") or {}).get("deviceSelector") == action.manifest["spec"][
                "deviceSelector"
            ]
            if labels.get(APP_LABEL) == APP_NAME and same:
                return Outcome(action, "already-done", "rule-exists", f"{action.name} exists")
            why = f"devicetaintrule {action.name} exists, not the guard's rule for {action.device}"
            return Outcome(action, "failed", REFUSED, why)
        return Outcome(action, "applied")

    def _untaint_device(self, action: UntaintDevice) -> Outcome:
        try:
            self.kube.delete_device_taint_rule(action.name, action.uid)
        except NotFound:
            return Outcome(action, "already-done", "rule-gone", f"{action.name} is gone")
        if action.claim:
            with contextlib.suppress(NotFound):  # already gone: nothing of it is allocated
                self.kube.delete_resource_claim(action.claim_namespace, action.claim)
        return Outcome(action, "applied")

    def _append_ledger(self, action: AppendLedgerLine) -> Outcome:
        target = ledger_store.LedgerTarget(
            self.s.namespace, action.configmap, self.s.ledger_archive_bytes
        )
        done = ledger_store.append(self.kube, target, action.node, action.line)
        if done.already:
            return Outcome(action, "already-done", "line-present", "the ledger has this line")
        detail = ""
        if done.archive:
            detail = f"moved {done.moved_lines} oldest lines to configmap/{done.archive}"
        return Outcome(action, "applied", detail=detail)

    def _event(self, action: EmitEvent) -> Outcome:
        reporter = events.Reporter(self.instance, self.snap.now)
        if action.pod is not None:
            try:
                told = events.emit_once(self.kube, action, reporter)
            except NotFound:  # its namespace is gone, and so is the pod
                gone = f"namespace {action.pod.namespace} not found: the pod is gone"
                return Outcome(action, "skipped", "pod-gone", gone)
            if told.already:
                return Outcome(action, "already-done", "event-exists", "the pod was told")
            return Outcome(action, "applied")
        ref = self._refs.get(action.node)
        if ref is None or not ref.uid:
            try:
                found = self.kube.node(action.node)
            except NotFound:
                found = {"metadata": {"name": action.node}}  # still recorded, by name only
            self._remember(found)
            ref = self._refs.get(action.node) or events.NodeRef(action.node, "", "")
        done = events.emit(self.kube, action, ref, reporter)
        if done.already:
            return Outcome(action, "already-done", "event-counted", "this observation is counted")
        return Outcome(action, "applied", detail="" if done.count == 1 else f"seen {done.count}x")


def _log(log: Log, o: Outcome) -> None:
    """One line per outcome."""
    a = o.action
    match o.status:
        case "noted":
            assert isinstance(a, Skip)
            log.decision(*a.log_line(), a.level)
        case "applied":
            event, fields = a.log_line()
            log.emit(event, {**fields, "result": o.detail} if o.detail else fields)
        case "already-done" | "skipped":
            level: Level = "WARN" if o.reason == "earlier-write-failed" else "INFO"
            detail = f"{o.type_word}: {o.detail}"
            log.emit("skip", _skip_fields(a, o.reason, detail), level)
        case "failed":
            log.emit("write-failed", _failed_fields(o), "ERROR")
        case "would-apply":
            log.emit(*a.log_line(), dry_run=True)
        case _:
            assert_never(o.status)


def _skip_fields(action: Action, why: str, detail: str) -> dict[str, Value]:
    nexts = {
        "earlier-write-failed": "next cycle re-reads the node and plans again",
        "changed-under-us": "next cycle re-reads the node",
    }
    planned = action.log_line()[1].get("next")  # already done: what the write itself pointed to
    return {
        "node": action.node,
        "reason": why,
        "detail": detail,
        "next": nexts.get(why) or planned or "nothing to do",
    }


def _failed_fields(o: Outcome) -> dict[str, Value]:
    later = "later writes on this node are skipped; " if isinstance(o.action, NodePatch) else ""
    return {
        "node": o.action.node,
        "action": o.type_word,
        "reason": o.action.reason,
        "error": o.detail,
        "next": f"{later}the run exits 1; the next cycle reads the cluster again",
    }


def _uid(obj: dict[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid", ""))
