"""Pending candidates: a hardware Xid with GPU loss that has not held long enough yet."""

from __future__ import annotations

import pytest

from guard.log import format_line
from guard.plan.pending import Pending, pending
from tests.builders import PCI, UUID, gpu, node, settings, snapshot

S = settings()  # hold 600 s, fast hold 120 s for Xid 79


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 48),), loss={"a": 360}),
            [Pending("a", 48, "4", PCI, UUID, 360, 600)],
            id="xid-48-held-6-of-10-minutes",
        ),
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 79),), loss={"a": 60}),
            [Pending("a", 79, "4", PCI, UUID, 60, 120)],
            id="fast-path-xid-needs-the-fast-hold",
        ),
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 48),), loss={"a": 600}),
            [],
            id="held-for-the-whole-window-is-a-candidate-not-pending",
        ),
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 48),)), [], id="xid-without-gpu-loss-is-not"
        ),
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 48),), loss={"a": 60}, cordoned=("a",)),
            [],
            id="cordoned-per-kube-state-metrics",
        ),
        pytest.param(
            snapshot(node("a", cordoned=True), hardware=(gpu("a", 48),), loss={"a": 60}),
            [],
            id="cordoned-per-the-api",
        ),
        pytest.param(
            snapshot(
                node("a"),
                node("b"),
                hardware=(gpu("b", 48, index=7), gpu("a", 94, index=1), gpu("a", 48, index=0)),
                loss={"a": 300, "b": 30},
            ),
            [
                Pending("a", 48, "0", PCI, UUID, 300, 600),
                Pending("a", 94, "1", PCI, UUID, 300, 600),
                Pending("b", 48, "7", PCI, UUID, 30, 600),
            ],
            id="every-gpu-sorted-by-node-and-gpu",
        ),
    ],
)
def test_pending_candidates(snap, expected):
    assert list(pending(snap, S)) == expected


def test_the_pending_line_says_held_and_needed_seconds():
    (p,) = pending(snapshot(node("gpu-3"), hardware=(gpu("gpu-3", 48),), loss={"gpu-3": 360}), S)
    assert format_line(*p.log_line()) == (
        f"pending node=gpu-3 reason=xid-48 gpu={PCI} held_s=360 needs_s=600 "
        'next="cordon candidate if the GPU loss holds 240s more"'
    )
