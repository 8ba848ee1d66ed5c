"""What the guard and its Jobs say to each other: the summary each Job program leaves in its
termination message (docs/lifecycle.md, "Job results the guard reads"; the guard acts on none
that is a SummaryError) and the argv values both sides parse. It imports no Job program.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from guard.pci import link_record

KUBELET_MAX_BYTES = 4096  # what kubelet keeps of a termination message
MAX_BYTES = 4000  # every summary stays under this
WHY_MAX_CHARS = 160  # of one finding's `why`
CONFORMANCE_SCHEMA = "gpu-node-guard/conformance-summary/v1"
EVIDENCE_SCHEMA = "gpu-node-guard/evidence-summary/v1"
LOADTEST_SCHEMA = "gpu-node-guard/loadtest-summary/v1"
LOADTEST_KIND = "loadtest"
FENCE_SCHEMA = "gpu-node-guard/fence-summary/v1"
TERMINATION_LOG = "/dev/termination-log"
MAX_LINKS = 64  # an evidence summary with more GPUs than this is not one a node makes
# A GPU's UUID as the load test's backend read it (GPU-… from NVML; "" where it read none).
_GPU_UUID = re.compile(r"[!-~]{0,80}", re.ASCII)


class SummaryError(ValueError):
    """A termination message that is not a summary of the documented shape; one line."""


def write_termination_message(path: str, text: str) -> str | None:
    """Write `text` to a termination message file that already exists (kubelet creates it in the
    container); never create one, so a run by hand on a host writes nothing there. Returns a
    one-line note when an existing file cannot be written, None otherwise."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK)
        with os.fdopen(fd, "wb") as fh:  # a full disk (ENOSPC, /dev/full) shows at write or close
            fh.write(text.encode("utf-8"))
    except OSError as exc:
        # No file in an existing directory: a run by hand, write nothing. No directory either:
        # a path typed wrong, worth one line.
        if isinstance(exc, FileNotFoundError) and os.path.isdir(os.path.dirname(path) or "."):
            return None
        return (
            f"WARN termination message not written to {path!r}: {exc.strerror or exc}"
            " (the verdict and exit code stand)"
        )
    return None


# ── Writing and reading a termination message ─────────────────────────────────────────────────
def summary_doc(text: str, schema: str | None, program: str, name: str) -> Mapping[str, Any]:
    """The JSON object `program` left in its termination message; SummaryError with one line
    (`name` names the summary) when it is empty, not JSON or not an object of `schema`. Without a
    schema, a document that is not an object reads as an empty one: the caller's checks say what
    is missing."""
    if not text.strip():
        raise SummaryError(f"empty termination message: {program} did not finish")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{name} is not JSON: {exc}") from None
    if schema is None:
        return doc if isinstance(doc, Mapping) else {}
    if not isinstance(doc, Mapping) or doc.get("schema") != schema:
        got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise SummaryError(f"{name} schema is {got!r}, not {schema!r}")
    return doc


def _compact(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _fits(text: str) -> bool:
    return len(text.encode()) <= MAX_BYTES


def _first_fitting(docs: Iterable[Mapping[str, Any]]) -> str:
    """The compact JSON of the first of `docs` (each one smaller) that fits, or of the last."""
    for doc in docs:
        text = _compact(doc)
        if _fits(text):
            break
    return text


# ── conformance ──────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class Finding:
    item: str
    why: str = ""  # the item's `observed` line, shortened; "" when the summary had to drop it


@dataclass(frozen=True, slots=True)
class Summary:
    """What the guard needs from one conformance run: did it pass, and which items failed, could
    not be checked, warned, did not apply or were repaired (each in item order)."""

    ok: bool
    failed: tuple[Finding, ...] = ()
    unknown: tuple[Finding, ...] = ()
    warned: tuple[Finding, ...] = ()
    skipped: tuple[Finding, ...] = ()
    fixed: tuple[str, ...] = ()

    @property
    def failed_items(self) -> tuple[str, ...]:
        return tuple(f.item for f in self.failed)


_LISTS = ("failed", "unknown", "warned", "skipped")


def short_why(text: str) -> str:
    return text if len(text) <= WHY_MAX_CHARS else text[: WHY_MAX_CHARS - 1] + "…"


def _conformance_doc(s: Summary, keep_why: frozenset[str]) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": CONFORMANCE_SCHEMA, "status": "PASS" if s.ok else "FAIL"}
    for key in _LISTS:
        doc[key] = [
            {"item": f.item, "why": f.why if key in keep_why else ""} for f in getattr(s, key)
        ]
    doc["fixed"] = list(s.fixed)
    return doc


def render_summary(s: Summary) -> str:
    """Compact JSON under MAX_BYTES: `why` texts go first (skipped, warned, unknown, failed),
    names never."""
    lists = range(len(_LISTS), -1, -1)
    return _first_fitting(_conformance_doc(s, frozenset(_LISTS[:n])) for n in lists)


def parse_summary(text: str) -> Summary:
    """The summary from a conformance Pod's termination message."""
    doc = summary_doc(text, CONFORMANCE_SCHEMA, "the conformance program", "conformance summary")
    status = doc.get("status")
    if status not in ("PASS", "FAIL"):
        raise SummaryError(f"conformance summary status is {status!r}, not PASS or FAIL")
    lists = {key: _findings(doc, key) for key in _LISTS}
    fixed = doc.get("fixed", [])
    if not isinstance(fixed, list) or not all(isinstance(n, str) for n in fixed):
        raise SummaryError(f"conformance summary `fixed` is not a list of names: {fixed!r}")
    if (status == "FAIL") != bool(lists["failed"]):
        raise SummaryError(f"conformance summary says {status} with {len(lists['failed'])} failed")
    return Summary(status == "PASS", fixed=tuple(fixed), **lists)


def _findings(doc: Mapping[str, Any], key: str) -> tuple[Finding, ...]:
    value = doc.get(key, [])
    ok = isinstance(value, list) and all(
        isinstance(f, Mapping) and isinstance(f.get("item"), str) and isinstance(f.get("why"), str)
        for f in value
    )
    if not ok:
        raise SummaryError(f"conformance summary `{key}` is not a list of {{item, why}}: {value!r}")
    return tuple(Finding(f["item"], f["why"]) for f in value)


# ── evidence ─────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class EvidenceSummary:
    """The evidence Job's verdict and the GPUs whose link was up (evidence.collect.node_links): the
    guard records them on the node and passes them to the load test as ``--expect-link``."""

    pci: str
    verdict: str
    links: tuple[tuple[str, str], ...]  # (pci, "16GT/s,x16"), by PCI address


def render_evidence_summary(s: EvidenceSummary) -> str:
    """Compact JSON; links are dropped from the end if it would not fit (never happens below
    about 80 GPUs).

    >>> render_evidence_summary(EvidenceSummary("0000:99:00.0", "power-cycle",
    ...                                         (("0000:18:00.0", "16GT/s,x16"),)))
    '{"schema":"gpu-node-guard/evidence-summary/v1","pci":"0000:99:00.0","verdict":"power-cycle",\
"links":[{"pci":"0000:18:00.0","link":"16GT/s,x16"}]}'
    """
    head = {"schema": EVIDENCE_SCHEMA, "pci": s.pci, "verdict": s.verdict}
    pairs = [{"pci": pci, "link": link} for pci, link in s.links]
    return _first_fitting({**head, "links": pairs[:n]} for n in range(len(pairs), -1, -1))


def parse_evidence_summary(text: str) -> EvidenceSummary:
    """The summary from an evidence Pod's termination message."""
    doc = summary_doc(text, EVIDENCE_SCHEMA, "the evidence program", "evidence summary")
    pci, verdict = doc.get("pci"), doc.get("verdict")
    if not isinstance(pci, str) or not isinstance(verdict, str):
        raise SummaryError("evidence summary has no pci or verdict text")
    return EvidenceSummary(pci, verdict, _links(doc.get("links", [])))


def _links(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or len(value) > MAX_LINKS:
        raise SummaryError(f"evidence summary `links` is not a list of at most {MAX_LINKS}")
    out: dict[str, str] = {}
    for entry in value:
        pair = f"{entry.get('pci')}={entry.get('link')}" if isinstance(entry, Mapping) else ""
        found = link_record(pair)
        if found is None:
            raise SummaryError(
                f"evidence summary link {entry!r} is not "
                "{pci: 0000:bb:dd.f, link: <speed>GT/s,x<width>}"
            )
        if found[0] in out:
            raise SummaryError(f"evidence summary lists {found[0]} twice")
        out[found[0]] = found[1]
    return tuple(sorted(out.items()))


# ── load test ────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class LoadTestSummary:
    passed: bool
    reasons: tuple[str, ...]  # `word key=value…` lines
    gpus: tuple[str, ...] = ()  # the UUIDs of the GPUs it ran on (a device pass names its GPU)


def render_loadtest_summary(
    figures: Mapping[str, Any], reasons: Iterable[str], notes: Iterable[str]
) -> str:
    """`figures` (verdict, counts) with as many reasons, then notes, as fit; the lines left out
    for size are counted in `left_off`."""
    doc: dict[str, Any] = {"schema": LOADTEST_SCHEMA, "kind": LOADTEST_KIND, **figures}
    doc.update(reasons=[], notes=[], left_off=0)
    for key, line in [*(("reasons", r) for r in reasons), *(("notes", n) for n in notes)]:
        doc[key].append(line)
        if not _fits(json.dumps(doc, sort_keys=True)):
            doc[key].pop()
            doc["left_off"] += 1
    return json.dumps(doc, sort_keys=True)


def parse_loadtest_summary(text: str) -> LoadTestSummary:
    """The summary from a load-test Pod's termination message.

    >>> parse_loadtest_summary('{"kind": "loadtest", "verdict": "fail", "reasons": ["x a=1"]}')
    LoadTestSummary(passed=False, reasons=('x a=1',), gpus=())
    """
    doc = summary_doc(text, None, "the load test", "load-test summary")
    verdict = doc.get("verdict")
    reasons = doc.get("reasons", [])
    kind = doc.get("kind")
    if (schema := doc.get("schema", LOADTEST_SCHEMA)) != LOADTEST_SCHEMA:
        raise SummaryError(f"load-test summary schema is {schema!r}, not {LOADTEST_SCHEMA!r}")
    if kind != LOADTEST_KIND or verdict not in ("pass", "fail"):
        raise SummaryError(f"not a load-test summary (kind {kind!r}, verdict {verdict!r})")
    if not isinstance(reasons, list) or not all(isinstance(r, str) and r for r in reasons):
        raise SummaryError(f"load-test summary `reasons` is not a list of lines: {reasons!r}")
    gpus = doc.get("gpus", [])
    listed = isinstance(gpus, list) and len(gpus) <= MAX_LINKS
    if not listed or not all(isinstance(g, str) and _GPU_UUID.fullmatch(g) for g in gpus):
        raise SummaryError(f"load-test summary `gpus` is not a list of GPU UUIDs: {gpus!r}"[:200])
    return LoadTestSummary(verdict == "pass", tuple(reasons), tuple(gpus))


# ── fence ────────────────────────────────────────────────────────────────────────────────────
FENCE_MODES = ("set", "lift")
# What the fence Job established: `fenced` and `lifted` only with the compute mode read back as
# asked; `gpu-absent`: the GPU is off the bus (the node cordon stays the isolation).
FENCE_OUTCOMES = ("fenced", "lifted", "gpu-absent", "mismatch", "error")
FENCE_DRAIN = ("off", "done", "undone", "failed")
FENCE_PASSED = ("fenced", "lifted")


@dataclass(frozen=True, slots=True)
class FenceSummary:
    """The fence Job's report: which GPU, what it asked (`mode`), what it read back."""

    mode: str  # set | lift
    pci: str
    uuid: str
    outcome: str  # FENCE_OUTCOMES
    compute_mode: str = ""  # nvidia-smi's word as read back: Prohibited, Default, …
    drain: str = "off"
    why: str = ""

    @property
    def passed(self) -> bool:
        """The asked mode was read back: `fenced` for set, `lifted` for lift."""
        return self.outcome == ("fenced" if self.mode == "set" else "lifted")


def render_fence_summary(s: FenceSummary) -> str:
    """Compact JSON, far under MAX_BYTES (`why` is cut to WHY_MAX_CHARS).

    >>> render_fence_summary(FenceSummary("set", "0000:99:00.0", "GPU-1", "fenced", "Prohibited"))
    '{"schema":"gpu-node-guard/fence-summary/v1","mode":"set","pci":"0000:99:00.0","uuid":"GPU-1",\
"outcome":"fenced","compute_mode":"Prohibited","drain":"off","why":""}'
    """
    doc = {"schema": FENCE_SCHEMA, **asdict(s)}
    doc.update(compute_mode=s.compute_mode[:WHY_MAX_CHARS], why=short_why(s.why))
    return _compact(doc)


def parse_fence_summary(text: str) -> FenceSummary:
    """The summary from a fence Pod's termination message."""
    doc = summary_doc(text, FENCE_SCHEMA, "the fence program", "fence summary")
    fields = {f.name: doc.get(f.name) for f in dataclass_fields(FenceSummary)}
    if not all(isinstance(v, str) for v in fields.values()):
        raise SummaryError("fence summary has a field that is not text")
    s = FenceSummary(**fields)  # type: ignore[arg-type]
    if s.mode not in FENCE_MODES or s.outcome not in FENCE_OUTCOMES or s.drain not in FENCE_DRAIN:
        raise SummaryError(
            f"fence summary mode {s.mode!r}, outcome {s.outcome!r} or drain {s.drain!r} is not "
            "one of its words"
        )
    if s.outcome in FENCE_PASSED and not s.passed:
        raise SummaryError(f"fence summary of mode {s.mode!r} says {s.outcome!r}")
    if len(text.encode()) > MAX_BYTES:
        raise SummaryError(f"fence summary is over {MAX_BYTES} bytes")
    return s


# ── argv values both sides parse ─────────────────────────────────────────────────────────────
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_allowed_dns(text: str) -> tuple[IpNetwork, ...]:
    """``--allowed-dns``: comma-separated CIDRs (a bare address is a /32 or /128); ValueError
    names the bad entry.

    >>> [str(n) for n in parse_allowed_dns("10.20.0.0/16, 192.0.2.53")]
    ['10.20.0.0/16', '192.0.2.53/32']
    """
    networks = []
    for part in text.split(","):
        entry = part.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"not a CIDR: {entry!r}") from None
    if not networks:
        raise ValueError("no CIDR given")
    return tuple(networks)


_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)(?:[+-]rke2r(\d+))?")


@dataclass(frozen=True, slots=True)
class Version:
    """An RKE2 / Kubernetes version (``--control-plane-version``)."""

    major: int
    minor: int
    patch: int
    release: int | None = None

    def __str__(self) -> str:
        suffix = "" if self.release is None else f"+rke2r{self.release}"
        return f"v{self.major}.{self.minor}.{self.patch}{suffix}"


ALLOWED_DNS_MAX_BITS = 8  # one allowed network is at most 256 pushed prefixes


def allowed_dns_prefixes(networks: str) -> tuple[str, ...]:
    """The address prefixes the networks cover, as alert_queries.coredns_upstream_prefix cuts
    them from CoreDNS's `to` label: IPv4 whole octets (``10.``, ``172.16.``, ``10.20.0.53``),
    IPv6 whole 16-bit groups in the canonical form (``[2001:db8:``) or the address
    (``[2001:db8::53]``); ``v4``/``v6`` for /0. A prefix cut inside an octet or group is every
    prefix of the next one it covers (at most 2 ** ALLOWED_DNS_MAX_BITS: ValueError beyond).
    The guard pushes them for the CoreDNS alert, whose PromQL cannot match a network itself.

    >>> allowed_dns_prefixes("10.0.0.0/8, 192.168.4.0/23, 2001:db8::/32, fd00::53")
    ('10.', '192.168.4.', '192.168.5.', '[2001:db8:', '[fd00::53]')
    """
    out: list[str] = []
    for net in parse_allowed_dns(networks):
        width = 8 if net.version == 4 else 16
        if net.prefixlen and -net.prefixlen % width > ALLOWED_DNS_MAX_BITS:
            raise ValueError(
                f"{net} covers {2 ** (-net.prefixlen % width)} prefixes of whole "
                f"{'octets' if width == 8 else '16-bit groups'}, more than "
                f"{2**ALLOWED_DNS_MAX_BITS}"
            )
        if net.prefixlen == 0:
            out.append(f"v{net.version}")
            continue
        if net.version == 6 and net.prefixlen == 128:
            out.append(f"[{net.network_address}]")
            continue
        sep = "." if net.version == 4 else ":"
        parts = net.max_prefixlen // width
        level = -(-net.prefixlen // width)
        for sub in net.subnets(new_prefix=level * width):
            fields = (
                [str(b) for b in sub.network_address.packed]
                if net.version == 4
                else [g.lstrip("0") or "0" for g in sub.network_address.exploded.split(":")]
            )
            head = sep.join(fields[:level]) + (sep if level < parts else "")
            out.append(head if net.version == 4 else f"[{head}")
    return tuple(dict.fromkeys(out))


def parse_version(text: str) -> Version | None:
    """The first RKE2 / Kubernetes version in `text` (tests/unit/test_conformance_parsers.py)."""
    m = _VERSION.search(text)
    if m is None:
        return None
    release = int(m.group(4)) if m.group(4) else None
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3)), release)


def parse_exact(text: str) -> Version | None:
    """A whole string that is a version, as --control-plane-version takes it.

    >>> str(parse_exact("v1.34.3+rke2r1")), parse_exact("1.34"), str(parse_exact("1.34.3"))
    ('v1.34.3+rke2r1', None, 'v1.34.3')
    """
    m = _VERSION.fullmatch(text.strip())
    return parse_version(text) if m else None
