"""The evidence Job's summary for the guard: the verdict and the node's GPU links, written to
the container's termination message (`render_summary`) and read back by the guard
(`parse_summary`), like the conformance summary (docs/conformance.md) and docs/evidence.md.

Schema `gpu-node-guard/evidence-summary/v1`, compact JSON under 4000 bytes (kubelet keeps 4096):
``{"schema": …, "pci": "0000:99:00.0", "verdict": "power-cycle", "links": [{"pci": …,
"link": "16GT/s,x16"}, …]}``. `links` are the GPUs whose link was up when the Job read them
(guard.evidence.links); the guard records them on the node and passes them to the load test as
``--expect-link``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guard.pci import link_record
from guard.termination import summary_doc

SCHEMA = "gpu-node-guard/evidence-summary/v1"
MAX_BYTES = 4000
MAX_LINKS = 64  # a summary with more GPUs than this is not one a node makes


class SummaryError(ValueError):
    """A termination message that is not an evidence summary; the message is one line."""


@dataclass(frozen=True, slots=True)
class EvidenceSummary:
    pci: str
    verdict: str
    links: tuple[tuple[str, str], ...]  # (pci, "16GT/s,x16"), by PCI address


def render_summary(s: EvidenceSummary) -> str:
    """Compact JSON; links are dropped from the end if it would not fit (never happens below
    about 80 GPUs).

    >>> render_summary(EvidenceSummary("0000:99:00.0", "power-cycle",
    ...                                (("0000:18:00.0", "16GT/s,x16"),)))
    '{"schema":"gpu-node-guard/evidence-summary/v1","pci":"0000:99:00.0","verdict":"power-cycle",\
"links":[{"pci":"0000:18:00.0","link":"16GT/s,x16"}]}'
    """
    links = list(s.links)
    while True:
        doc = {"schema": SCHEMA, "pci": s.pci, "verdict": s.verdict,
               "links": [{"pci": pci, "link": link} for pci, link in links]}  # fmt: skip
        text = json.dumps(doc, separators=(",", ":"))
        if len(text.encode()) <= MAX_BYTES or not links:
            return text
        links.pop()


def parse_summary(text: str) -> EvidenceSummary:
    """The summary from an evidence Pod's termination message; SummaryError when it is empty
    (the program did not finish) or not of the documented shape.

    >>> parse_summary('{"schema":"gpu-node-guard/evidence-summary/v1","pci":"0000:99:00.0",'
    ...               '"verdict":"reset","links":[]}')
    EvidenceSummary(pci='0000:99:00.0', verdict='reset', links=())
    >>> parse_summary('{"schema":"gpu-node-guard/evidence-summary/v1","pci":"0000:99:00.0",'
    ...               '"verdict":"reset","links":[{"pci":"0000:18:00.0","link":"3GT/s,x16"}]}')
    Traceback (most recent call last):
    ...
    guard.evidence.summary.SummaryError: evidence summary link {'pci': '0000:18:00.0', \
'link': '3GT/s,x16'} is not {pci: 0000:bb:dd.f, link: <speed>GT/s,x<width>}
    """
    doc = summary_doc(text, SCHEMA, program="the evidence program", name="evidence summary",
                      error=SummaryError)  # fmt: skip
    pci, verdict = doc.get("pci"), doc.get("verdict")
    if not isinstance(pci, str) or not isinstance(verdict, str):
        raise SummaryError("evidence summary has no pci or verdict text")
    return EvidenceSummary(pci, verdict, _links(doc.get("links", [])))


def _links(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or len(value) > MAX_LINKS:
        raise SummaryError(f"evidence summary `links` is not a list of at most {MAX_LINKS}")
    out: dict[str, str] = {}
    for entry in value:
        found = (
            link_record(f"{entry.get('pci')}={entry.get('link')}")
            if isinstance(entry, Mapping)
            else None
        )
        if found is None:
            raise SummaryError(
                f"evidence summary link {entry!r} is not "
                "{pci: 0000:bb:dd.f, link: <speed>GT/s,x<width>}"
            )
        if found[0] in out:
            raise SummaryError(f"evidence summary lists {found[0]} twice")
        out[found[0]] = found[1]
    return tuple(sorted(out.items()))
