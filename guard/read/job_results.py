"""Job results: the summary each finished Pod of the guard's Jobs left in its termination
message, parsed once into a `JobResult` (read, rejected by the kubelet, unreadable, or `foreign`:
not the Job's own Pod). The case list: docs/lifecycle.md, "Job results"."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from guard.codec.check_records import is_item
from guard.files import first_line
from guard.jobs import run_digest
from guard.model import Finding, JobInfo, JobResult, RecordedLink
from guard.names import JOB_NAME_LABELS
from guard.read.objects import mapping
from guard.wire import (
    WHY_MAX_CHARS,
    SummaryError,
    parse_evidence_summary,
    parse_fence_summary,
    parse_loadtest_summary,
    parse_summary,
)

# Finished Pods only (two != are ANDed): Running and Pending Pods have no result yet.
FINISHED = "status.phase!=Pending,status.phase!=Running"
# The kubelet's admission refusal (pkg/kubelet rejectPod): phase Failed, this message prefix, a
# reason such as OutOfcpu, and no container status (no container was ever created).
REJECTED_PREFIX = "Pod was rejected"
_ADMISSION_REASONS = re.compile(
    r"^(OutOf.+|NodeAffinity|NodeName|UnexpectedAdmissionError|InvalidNodeInfo|"
    r"PodOSNotSupported|PodOSSelectorNodeLabelDoesNotMatch|SysctlForbidden|NodeShutdown)$"
)


def slim_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a result needs of a Pod (~8 kB whole): its phase and termination, where it ran, what
    its containers run and its controller's uid (whose Pod it is).

    >>> slim_pod({"metadata": {"name": "p", "labels": {"job-name": "j"}}, "spec": {"x": 1}})
    {'kind': 'Pod', 'metadata': {'name': 'p', 'creationTimestamp': '', 'labels': {'job-name': \
'j'}, 'ownerReferences': []}, 'spec': {'nodeName': '', 'containers': []}, 'status': {'phase': \
'', 'reason': '', 'message': '', 'containerStatuses': []}}
    """
    meta, status = mapping(obj.get("metadata")), mapping(obj.get("status"))
    labels = mapping(meta.get("labels"))
    statuses = status.get("containerStatuses")
    owners = meta.get("ownerReferences")
    spec = mapping(obj.get("spec"))
    containers = spec.get("containers")
    return {
        "kind": "Pod",
        "metadata": {
            "name": meta.get("name", ""),
            "creationTimestamp": meta.get("creationTimestamp", ""),
            "labels": {k: v for k, v in labels.items() if k in JOB_NAME_LABELS},
            "ownerReferences": [
                {"controller": True, "uid": mapping(o).get("uid")}
                for o in (owners if isinstance(owners, list) else [])
                if mapping(o).get("controller") is True
            ],
        },
        "spec": {
            "nodeName": spec.get("nodeName", ""),
            "containers": [
                {f: mapping(c).get(f) for f in ("name", "image", "command", "args")}
                for c in (containers if isinstance(containers, list) else [])
            ],
        },
        "status": {
            "phase": status.get("phase", ""),
            "reason": status.get("reason", ""),
            "message": status.get("message", ""),
            "containerStatuses": [
                {
                    "name": mapping(c).get("name"),
                    "state": {"terminated": mapping(mapping(c).get("state")).get("terminated")},
                }
                for c in (statuses if isinstance(statuses, list) else [])
            ],
        },
    }


def _job_of(pod: Mapping[str, Any]) -> str:
    labels = mapping(mapping(pod.get("metadata")).get("labels"))
    return next((str(labels[k]) for k in JOB_NAME_LABELS if isinstance(labels.get(k), str)), "")


def attach(jobs: Iterable[JobInfo], pods: Iterable[Mapping[str, Any]]) -> tuple[JobInfo, ...]:
    """Each Job with the result of its newest finished Pod (None when there is none)."""
    newest: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        job = _job_of(pod) if isinstance(pod, Mapping) else ""
        if job and _phase(pod) in ("Succeeded", "Failed"):
            seen = newest.get(job)
            if seen is None or _age_key(pod) > _age_key(seen):
                newest[job] = pod
    return tuple(
        replace(j, result=_checked(j, _owned(j, newest[j.name]) or result(j.kind, newest[j.name])))
        if j.name in newest
        else j
        for j in jobs
    )


def _owned(job: JobInfo, pod: Mapping[str, Any]) -> JobResult | None:
    """Why the Pod's summary is not the Job's (a label is not trust), or None when the Job
    controls it and it ran on the Job's node what the Job's template runs."""
    meta = mapping(pod.get("metadata"))
    name = str(meta.get("name", "")) or "(no name)"
    owners = meta.get("ownerReferences")
    controllers = [
        str(mapping(o).get("uid", ""))
        for o in (owners if isinstance(owners, list) else [])
        if mapping(o).get("controller") is True
    ]
    if not job.uid or controllers != [job.uid]:
        shown = ",".join(controllers) or "none"
        return _foreign(
            f"pod {name} is not controlled by job/{job.name} "
            f"(uid {job.uid or 'unknown'}; its controller: {shown})"
        )
    spec = mapping(pod.get("spec"))
    ran_on = str(spec.get("nodeName") or "")
    if ran_on != job.node:
        return _foreign(
            f"pod {name} ran on node {ran_on or '(none)'}, not on job/{job.name}'s "
            f"node {job.node or '(none)'}"
        )
    if run_digest(spec) != job.run:
        return _foreign(f"pod {name} runs other containers than job/{job.name}")
    return None


def _foreign(problem: str) -> JobResult:
    return JobResult("unreadable", problem, foreign=True)


def _phase(pod: Mapping[str, Any]) -> str:
    return str(mapping(pod.get("status")).get("phase", ""))


def _age_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = mapping(pod.get("metadata"))
    return str(meta.get("creationTimestamp", "")), str(meta.get("name", ""))


def _checked(job: JobInfo, found: JobResult) -> JobResult:
    """A result whose verdict contradicts the Job's own status is not trusted."""
    if found.state != "read" or job.kind == "evidence" or job.status not in ("succeeded", "failed"):
        return found
    if (job.status == "succeeded") != found.passed:
        said = "passed" if found.passed else "failed"
        return JobResult("unreadable", f"job {job.status} but its summary says it {said}")
    return found


def result(kind: str, pod: Mapping[str, Any]) -> JobResult:
    """The result of one finished Pod of a Job of `kind`; never raises."""
    name = str(mapping(pod.get("metadata")).get("name", "")) or "(no name)"
    status = mapping(pod.get("status"))
    statuses = status.get("containerStatuses")
    mine = [
        mapping(c)
        for c in (statuses if isinstance(statuses, list) else [])
        if mapping(c).get("name") == kind
    ]
    ended = mapping(mapping(mine[0].get("state")).get("terminated")) if mine else {}
    why = ": ".join(str(v) for v in (status.get("reason"), status.get("message")) if v)
    if rejected(pod):
        return JobResult("rejected", f"pod {name} was rejected by the node's kubelet ({why})")
    if not ended:
        return JobResult(
            "unreadable",
            f"pod {name} {_phase(pod) or 'finished'} before its {kind} container ended"
            + (f" ({why})" if why else ""),
        )
    message = ended.get("message", "")
    if not isinstance(message, str):
        return JobResult("unreadable", f"pod {name}: termination message is not text")
    try:
        return _PARSERS.get(kind, _unknown_kind)(message)
    except ValueError as exc:  # SummaryError; never raises
        return JobResult("unreadable", f"pod {name}: {first_line(exc)}")


def rejected(pod: Mapping[str, Any]) -> bool:
    """The node's kubelet refused to run the Pod: Failed before any container was created.

    >>> rejected({"status": {"phase": "Failed", "reason": "OutOfcpu", "message":
    ...     "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, "
    ...     "capacity: 2000"}})
    True
    >>> rejected({"status": {"phase": "Failed", "reason": "DeadlineExceeded", "message": "x"}})
    False
    """
    status = mapping(pod.get("status"))
    if _phase(pod) != "Failed" or status.get("containerStatuses"):
        return False
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    return message.startswith(REJECTED_PREFIX) or bool(_ADMISSION_REASONS.match(reason))


def _conformance(message: str) -> JobResult:
    summary = parse_summary(message)
    bad = [f.item for f in summary.failed if not is_item(f.item)]
    if bad:
        raise SummaryError(f"conformance summary names a failed item that is no word: {bad[0]!r}")
    found = tuple(Finding(f.item, f.why) for f in summary.failed)
    return JobResult("read", passed=summary.ok, failed=found)


def _evidence(message: str) -> JobResult:
    summary = parse_evidence_summary(message)
    return JobResult("read", links=tuple(RecordedLink(pci, link) for pci, link in summary.links))


def _loadtest(message: str) -> JobResult:
    """Each reason `word key=value…` is a finding named by its word."""
    summary = parse_loadtest_summary(message)
    words = [r.split(" ", 1)[0] for r in summary.reasons]
    bad = [r for r, w in zip(summary.reasons, words, strict=True) if not is_item(w)]
    if bad:
        raise SummaryError(f"load-test summary reason {bad[0]!r} does not start with a word")
    pairs = zip(words, summary.reasons, strict=True)
    found = tuple(Finding(w, r[:WHY_MAX_CHARS]) for w, r in pairs)
    return JobResult("read", passed=summary.passed, failed=found, gpus=summary.gpus)


def _fence(message: str) -> JobResult:
    """Passed: the asked mode was read back; else one finding named by the outcome, its why."""
    summary = parse_fence_summary(message)
    failed = () if summary.passed else (Finding(summary.outcome, summary.why),)
    return JobResult("read", passed=summary.passed, failed=failed)


def _unknown_kind(message: str) -> JobResult:
    raise SummaryError("no summary is read for this kind of Job")


_PARSERS = {
    "conformance": _conformance,
    "evidence": _evidence,
    "loadtest": _loadtest,
    "fence": _fence,
}
