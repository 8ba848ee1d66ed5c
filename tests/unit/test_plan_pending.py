"""Pending candidates: a hardware Xid with GPU loss that has not held long enough yet."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from guard.log import format_line
from guard.model import AgentCheck
from guard.plan.pending import Pending, PendingNode, pending
from tests.builders import NOW, PCI, UUID, Signals, gpu, node, settings, snapshot

S = settings()  # hold 600 s, fast hold 120 s for Xid 79
SEEN = "module 580.126.09 != NVML 580.159.03 (/usr/lib/x86_64-linux-gnu)"


def at(seconds: int) -> datetime:
    """When a pending hold decides: `seconds` after NOW."""
    return NOW + timedelta(seconds=seconds)


def failing(*nodes, seconds: int, **kw):
    """Node "b"'s agent says nvidia-match FAIL, seen at every step for `seconds`."""
    agent = (AgentCheck("b", "FAIL", SEEN),)
    return snapshot(*nodes, signals=Signals(failing={"b": seconds}, agent=agent), **kw)


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 48),), loss={"a": 360}),
            [Pending("a", 48, "4", PCI, UUID, 360, 600, at(240))],
            id="xid-48-held-6-of-10-minutes",
        ),
        pytest.param(
            snapshot(node("a"), hardware=(gpu("a", 79),), loss={"a": 60}),
            [Pending("a", 79, "4", PCI, UUID, 60, 120, at(60))],
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
                Pending("a", 48, "0", PCI, UUID, 300, 600, at(300)),
                Pending("a", 94, "1", PCI, UUID, 300, 600, at(300)),
                Pending("b", 48, "7", PCI, UUID, 30, 600, at(570)),
            ],
            id="every-gpu-sorted-by-node-and-gpu",
        ),
    ],
)
def test_pending_candidates(snap, expected):
    assert list(pending(snap, S)) == expected


@pytest.mark.parametrize(
    ("snap", "changes", "expected"),
    [
        pytest.param(
            failing(node("b"), seconds=120),
            {},
            [PendingNode("b", "nvml-mismatch", SEEN, 120, 600, at(480))],
            id="mismatch-held-2-of-10-minutes",
        ),
        pytest.param(
            failing(node("b"), seconds=120),
            {"nvml_mismatch_hold_s": 1800},
            [PendingNode("b", "nvml-mismatch", SEEN, 120, 1800, at(1680))],
            id="its-own-hold-setting",
        ),
        pytest.param(
            failing(node("b"), seconds=600), {}, [], id="held-for-the-whole-hold-is-a-candidate"
        ),
        pytest.param(
            failing(node("b"), seconds=120),
            {"nvml_mismatch_cordon": False},
            [],
            id="no-cordon-to-wait-for-when-the-mismatch-cordon-is-off",
        ),
        pytest.param(
            failing(node("b", cordoned=True), seconds=120), {}, [], id="cordoned-per-the-api"
        ),
        pytest.param(
            failing(node("b"), seconds=120, cordoned=("b",)),
            {},
            [],
            id="cordoned-per-kube-state-metrics",
        ),
        pytest.param(
            failing(node("b"), seconds=120, hardware=(gpu("b", 48),), loss={"b": 60}),
            {},
            [
                Pending("b", 48, "4", PCI, UUID, 60, 600, at(540)),
                PendingNode("b", "nvml-mismatch", SEEN, 120, 600, at(480)),
            ],
            id="a-nodes-mismatch-after-its-gpus",
        ),
    ],
)
def test_pending_mismatches(snap, changes, expected):
    assert list(pending(snap, settings(**changes))) == expected


def test_the_pending_line_says_held_and_needed_seconds_and_when_it_decides():
    (p,) = pending(snapshot(node("gpu-3"), hardware=(gpu("gpu-3", 48),), loss={"gpu-3": 360}), S)
    assert format_line(*p.log_line()) == (
        f"pending node=gpu-3 reason=xid-48 gpu={PCI} held_s=360 needs_s=600 "
        "decides_at=2026-09-21T05:59:00Z "
        'next="cordon candidate if the GPU loss holds 240s more"'
    )


def test_the_pending_line_of_a_mismatch_says_what_the_agent_saw():
    (p,) = pending(failing(node("b"), seconds=120), S)
    assert format_line(*p.log_line()) == (
        f'pending node=b reason=nvml-mismatch detail="{SEEN}" held_s=120 needs_s=600 '
        "decides_at=2026-09-21T06:03:00Z "
        'next="cordon candidate if the mismatch holds 480s more"'
    )
    assert p.to_json() == {
        "node": "b",
        "reason": "nvml-mismatch",
        "xid": None,
        "gpu": None,
        "pci": None,
        "uuid": None,
        "held_s": 120,
        "needs_s": 600,
        "decides_at": "2026-09-21T06:03:00Z",
        "detail": SEEN,
    }
