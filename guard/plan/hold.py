"""The hold: which faults have lasted long enough to be cordon candidates, decided from the facts
Prometheus showed, for the isolation check, the pending lines, `status` and the watch alike.
Each step's value is the latest scrape at or before it, so the hold that really passed is never
shorter than its window (guard.codec.series).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from guard.model import GpuSample, PromView
from guard.settings import Settings


def hold_window_s(xid: int, s: Settings) -> int:
    """How long GPU loss must hold before a cordon for this Xid: the fast hold on the fast path."""
    return s.fast_hold_window_s if xid in s.fast_path_xids else s.hold_window_s


def held_s(since: datetime, now: datetime) -> int:
    """Whole seconds the loss has held, rounded down (never more than really passed)."""
    return max(0, int((now - since).total_seconds()))


def loss_held_s(view: PromView, node: str, now: datetime) -> int:
    """Seconds the node's GPU loss has held at `now`; 0 without loss now."""
    since = dict(view.loss_since).get(node)
    return 0 if since is None else held_s(since, now)


def nvml_held_s(view: PromView, node: str, now: datetime) -> int:
    """Seconds the node's nvidia-match failure has held at `now`; 0 without one."""
    since = dict(view.nvml_since).get(node)
    return 0 if since is None else held_s(since, now)


def decides_at(since: datetime, window_s: int) -> datetime:
    """The instant a hold that began at `since` completes."""
    return since + timedelta(seconds=window_s)


def xid_holds(
    view: PromView, now: datetime, s: Settings, cordoned: set[str]
) -> Iterator[tuple[GpuSample, datetime, int, int]]:
    """Each hardware-Xid GPU of a node with GPU loss, not in `cordoned`: when the loss began,
    how long it has held and how long it must."""
    since = dict(view.loss_since)
    for g in view.hardware_xids:
        if (start := since.get(g.node)) is not None and g.node not in cordoned:
            yield g, start, held_s(start, now), hold_window_s(g.value, s)


def candidates(view: PromView, now: datetime, s: Settings) -> tuple[GpuSample, ...]:
    """Hardware-Xid GPUs whose node's loss held for the Xid's window, sorted by node and GPU."""
    out = [g for g, _, held, needs in xid_holds(view, now, s, set(view.cordoned)) if held >= needs]
    return tuple(sorted(out, key=lambda g: (g.node, g.gpu.zfill(4), g.uuid, g.value)))


def nvml_candidates(view: PromView, now: datetime, s: Settings) -> tuple[str, ...]:
    """Nodes whose nvidia-match failure held for `Settings.nvml_hold_s`, not cordoned (sorted)."""
    held = (node for node, start in view.nvml_since if held_s(start, now) >= s.nvml_hold_s)
    cordoned = set(view.cordoned)
    return tuple(sorted(node for node in held if node not in cordoned))
