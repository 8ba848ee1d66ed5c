"""What an executor did with each action; the ``done`` line, ``--output json`` counts and the exit
code are built from outcomes, never from the plan."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from guard.actions import TYPE_WORDS, Action, Skip

if TYPE_CHECKING:  # types only: `run` loads these anyway, the push need not load them again
    from guard.doors.kube import Kube
    from guard.doors.prom import PromClient
    from guard.jobs import JobTemplates
    from guard.model import Snapshot

Status = Literal[
    "applied",  # the write landed
    "already-done",  # the cluster already held it (an earlier try or another run wrote it)
    "skipped",  # not attempted; `why` says which earlier write it depended on
    "failed",  # the API refused it or stayed unreachable; `why` is the API's message
    "would-apply",  # a dry run printed it
    "noted",  # a decision not to act (`Skip`); nothing to write
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """`reason`: a fixed word for already-done and skipped (``job-exists``); `detail`: for failed
    the API's message, else what was found or what else happened (``moved 4812 oldest lines…``)."""

    action: Action
    status: Status
    reason: str = ""
    detail: str = ""

    @property
    def type_word(self) -> str:
        return TYPE_WORDS[type(self.action)]


def tally(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Counts for the ``done`` line and ``--output json``: totals per status, then per type.

    >>> from guard.actions import Skip
    >>> tally([Outcome(Skip("a", "hold", "", ""), "noted")])
    {'applied': 0, 'failed': 0, 'already_done': 0, 'skipped': 0, 'decisions': 1}
    """
    writes = [o for o in outcomes if not isinstance(o.action, Skip)]
    by = Counter((o.status, o.type_word) for o in writes)
    statuses = Counter(o.status for o in writes)
    counts = {
        s.replace("-", "_"): statuses[s] for s in ("applied", "failed", "already-done", "skipped")
    }
    if statuses["would-apply"]:
        counts["would_apply"] = statuses["would-apply"]
    counts["decisions"] = len(outcomes) - len(writes)
    for (status, word), n in sorted(by.items()):
        counts[f"{status}_{word}".replace("-", "_")] = n
    return counts


def failed(outcomes: Iterable[Outcome]) -> tuple[Outcome, ...]:
    return tuple(o for o in outcomes if o.status == "failed")


@dataclass
class RunTrace:
    """What a run got to, filled in as it goes; read by the push even after an abort."""

    prom: PromClient
    kube: Kube | None = None
    snap: Snapshot | None = None
    templates: JobTemplates | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    # Unix time the run took the cycle's Lease, or found it held by another (the push).
    lease_taken: float | None = None
    lease_held: float | None = None
