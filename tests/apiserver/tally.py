"""What the apiserver tier prints at its end: how fast each control plane came up, and the counts
of the out-of-shape tries per identity. Under pytest-xdist each worker keeps its own and sends
them to the controller (`to_controller`, `from_worker`), which prints the merged lines."""

from __future__ import annotations

from collections import Counter
from typing import Any

TRIES: Counter[tuple[str, str, str]] = Counter()
STARTED_IN_S: list[float] = []


def record(identity: str, what: str, refused: bool) -> None:
    TRIES[(identity, what, "refused" if refused else "ACCEPTED")] += 1


def to_controller() -> dict[str, Any]:
    """This process's figures as plain data (what xdist's workeroutput can carry)."""
    return {"started": list(STARTED_IN_S), "tries": [[*key, n] for key, n in TRIES.items()]}


def from_worker(
    data: dict[str, Any],
    tries: Counter[tuple[str, str, str]] = TRIES,
    started: list[float] = STARTED_IN_S,
) -> None:
    """Add one worker's `to_controller` data to this process's figures.

    >>> tries, started = Counter({("guard", "Pods", "refused"): 1}), [2.0]
    >>> from_worker({"started": [3.5], "tries": [["guard", "Pods", "refused", 2]]}, tries, started)
    >>> tries, started
    (Counter({('guard', 'Pods', 'refused'): 3}), [2.0, 3.5])
    """
    started.extend(data["started"])
    for who, what, outcome, n in data["tries"]:
        tries[(who, what, outcome)] += n


def lines() -> list[str]:
    out = [
        f"a control plane (etcd, kube-apiserver, kube-controller-manager) ready in {s:.1f} s"
        for s in STARTED_IN_S
    ]
    for who, what in sorted({(who, what) for who, what, _ in TRIES}):
        refused, accepted = TRIES[(who, what, "refused")], TRIES[(who, what, "ACCEPTED")]
        out.append(
            f"out-of-shape {what} as {who}: {refused + accepted} tried, {refused} refused, "
            f"{accepted} accepted"
        )
    return out
