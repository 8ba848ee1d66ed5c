"""The lifecycle checks' node annotations (docs/node-annotations.md): formats, parsers and the
values the planners write; as in guard.codec.records, a bad value is an `Unreadable`."""

from __future__ import annotations

import re

from guard.codec.records import JOB_REF, Problems, when
from guard.jobs import DIGEST_CHARS
from guard.model import CheckedBoot, ClaimRecord, FailedCheck, FenceRecord, JobRecord, RecordedLink
from guard.names import PRINTABLE_WORD, Annotations
from guard.pci import link_record

# The most GPUs whose links a node records (and the load-test argv takes as --expect-link).
MAX_LINKS = 16
_ITEM = re.compile(r"^[a-z0-9]([-a-z0-9]{0,49}[a-z0-9])?\Z", re.ASCII)  # fits conformance-<item>
UNCORDON = "uncordon"  # `checked-boot` by a person's uncordon of a conformance cordon


def parse_checked_boot(text: str) -> CheckedBoot | str:
    parts = text.split(" ")
    if len(parts) != 3 or not all(PRINTABLE_WORD.match(p) for p in parts):
        return "not three fields separated by one space"
    boot, at, by = parts
    if by != UNCORDON and not JOB_REF.match(by):
        return f"third field {by!r} is neither job/<name> nor {UNCORDON}"
    found = when(at)
    return found if isinstance(found, str) else CheckedBoot(boot, found, by)


def checked_boot_value(boot_id: str, at: str, by: str) -> str:
    """The `checked-boot` value (inverse of its parser; tests/unit/test_check_records.py)."""
    return f"{boot_id} {at} {by}"


def parse_links(text: str) -> tuple[RecordedLink, ...] | str:
    parts = text.split(" ")
    records = [link_record(p) for p in parts]
    if not all(records):
        return "not <pci>=<speed>GT/s,x<width> (e.g. 0000:18:00.0=16GT/s,x16) separated by spaces"
    if len(parts) > MAX_LINKS:
        return f"more than {MAX_LINKS} links"
    links = tuple(RecordedLink(*r) for r in records if r)
    if len({link.pci for link in links}) != len(links):
        return "a PCI address is given twice"
    return links


def links_value(links: tuple[RecordedLink, ...]) -> str:
    """The `auto-cordon-pcie-links` value, by PCI address."""
    return " ".join(str(link) for link in sorted(links, key=lambda link: link.pci))


def parse_failed_check(text: str) -> FailedCheck | str:
    parts = text.split(" ")
    if len(parts) != 3 or not JOB_REF.match(parts[1]):
        return "not '<time> job/<name> <item>[,<item>…]'"
    items = tuple(parts[2].split(","))
    if not all(_ITEM.match(i) for i in items):
        return f"items {parts[2]!r} are not words of a-z, 0-9 and - separated by commas"
    at = when(parts[0])
    return at if isinstance(at, str) else FailedCheck(at, parts[1], items)


# ``loadtest-result`` / ``conformance-result``: exactly what the guard writes; anything else is
# refused here as the node policy refuses it: a stolen token's value never reaches a decision.
_RESULT = re.compile(r"failed (job/[a-z0-9](?:[-a-z0-9.]{0,61}[a-z0-9])?) at (\S+)", re.ASCII)


def result_record(problems: Problems, key: str) -> str:
    """The `loadtest-result` / `conformance-result` value, or "" (a bad one is unreadable)."""
    found = problems.parsed(key, _result)
    return found[0] if found else ""


def _result(text: str) -> tuple[str] | str:
    found = _RESULT.fullmatch(text)
    if found is None:
        return "not 'failed job/<name> at <RFC 3339 time>'"
    at = when(found.group(2))
    return at if isinstance(at, str) else (text,)


def is_item(word: str) -> bool:
    """A conformance item or load-test reason word, short enough for `conformance-<item>`."""
    return bool(_ITEM.match(word))


def failed_value(at: str, job: str, items: tuple[str, ...]) -> str:
    """The `conformance-failed` / `onboarding-failed` value (inverse of its parser)."""
    return f"{at} job/{job} {','.join(items)}"


# ---- What the guard made: ``job-<kind>`` is `<job name> <uid> <spec digest>`, the whole value
# (re.fullmatch: no trailing newline or second record slips through); a uid is a lower-case UUID.
_UID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_JOB_RECORD = re.compile(
    rf"([a-z0-9](?:[-a-z0-9]{{0,61}}[a-z0-9])?) ({_UID}) ([0-9a-f]{{{DIGEST_CHARS}}})", re.ASCII
)


def job_records(k: Annotations, problems: Problems) -> tuple[JobRecord, ...]:
    """The node's records of the Jobs the guard made, one per kind; a bad one is unreadable."""
    out = []
    for kind in ("conformance", "evidence", "fence", "loadtest"):
        key = k.job_record(kind)
        found = problems.parsed(key, _job_record) if key else None
        if found is not None:
            out.append(JobRecord(kind, *found.groups()))
    return tuple(out)


def _job_record(text: str) -> re.Match[str] | str:
    found = _JOB_RECORD.fullmatch(text)
    return found or f"not '<job name> <uid> <{DIGEST_CHARS} hex digest>'"


def job_record_value(name: str, uid: str, digest: str) -> str:
    """The `job-<kind>` value (inverse of its parser)."""
    return f"{name} {uid} {digest}"


_CLAIM_RECORD = re.compile(rf"([a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?) ({_UID})", re.ASCII)


def parse_claim(text: str) -> ClaimRecord | str:
    """``claim-loadtest``: `<claim name> <uid>`."""
    found = _CLAIM_RECORD.fullmatch(text)
    return ClaimRecord(*found.groups()) if found else "not '<claim name> <uid>'"


def claim_record_value(name: str, uid: str) -> str:
    """The `claim-loadtest` value (inverse of `parse_claim`)."""
    return f"{name} {uid}"


# How many fence Job uids `fence-jobs` keeps: a boot makes at most three fence Jobs of a cordon
# (set, lift, set again after a failed load test), so these cover the last eight boots' Jobs,
# longer than any Job lives (its TTL), in at most 24 × 37 bytes of the 1,024 a value may hold.
FENCE_JOBS_KEPT = 24


def parse_fence_jobs(text: str) -> tuple[str, ...] | str:
    """``fence-jobs``: the uids of the guard's fence Jobs."""
    uids = tuple(text.split(" "))
    if len(uids) > FENCE_JOBS_KEPT or not all(re.fullmatch(_UID, u, re.ASCII) for u in uids):
        return f"not at most {FENCE_JOBS_KEPT} Job uids separated by one space"
    return uids


def fence_jobs_value(kept: tuple[str, ...], uid: str) -> str:
    """`fence-jobs` with `uid` added last (the oldest dropped past `FENCE_JOBS_KEPT`)."""
    uids = kept if not uid or uid in kept else (*kept, uid)
    return " ".join(uids[-FENCE_JOBS_KEPT:])


FENCE_STATES = ("fenced", "gpu-absent", "lifted")


def parse_fence(text: str) -> FenceRecord | str:
    """``gpu-fence``: `<state> <bootID> <RFC3339> job/<name>`."""
    parts = text.split(" ")
    if len(parts) != 4 or parts[0] not in FENCE_STATES:
        return f"not '<{'|'.join(FENCE_STATES)}> <bootID> <RFC 3339 time> job/<name>'"
    if not PRINTABLE_WORD.match(parts[1]) or not JOB_REF.match(parts[3]):
        return "the bootID or the job/<name> is not a word"
    at = when(parts[2])
    return at if isinstance(at, str) else FenceRecord(parts[0], parts[1], at, parts[3])


def fence_value(state: str, boot_id: str, at: str, job: str) -> str:
    """The `gpu-fence` value (inverse of `parse_fence`)."""
    return f"{state} {boot_id} {at} job/{job}"
