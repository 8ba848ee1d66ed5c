"""The 21 September incident as data: gpu-node-b's GPU 4 falls off the bus (Xid 79), in UTC
(14:52:44 KST = 05:52:44Z). Around it: two healthy nodes, one with only a user-code Xid, and
gpu-node-a, cordoned by a person weeks earlier for Xid 48 on GPU 1."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from guard.example.scenario import NodeTimeline, Scenario

START = datetime(2026, 9, 21, 5, 0, 0, tzinfo=UTC)
XID_ONSET = datetime(2026, 9, 21, 5, 52, 44, tzinfo=UTC)
CARD_UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
CARD_PCI = "00000000:99:00.0"
# The first cron tick (*/5) at which the guard cordons gpu-node-b in this scenario.
DECISION_TICK = datetime(2026, 9, 21, 5, 55, 0, tzinfo=UTC)


def incident(duration: timedelta = timedelta(minutes=70), scrape_s: int = 15) -> Scenario:
    # The exporter reports the Xid at its first scrape at or after the onset.
    onset = -(-int((XID_ONSET - START).total_seconds()) // scrape_s) * scrape_s
    nodes = (
        NodeTimeline(
            "gpu-node-a", gpus=4, xids=((0, 1, 48),), allocatable=((0, 3),), unschedulable=((0, 1),)
        ),
        NodeTimeline("gpu-node-b", gpus=8, xids=((onset, 4, 79),), allocatable=((onset, 7),)),
        NodeTimeline("gpu-node-c", gpus=8),
        NodeTimeline("gpu-node-d", gpus=8, host_label="hostname"),
        NodeTimeline("gpu-node-e", gpus=8, xids=((1800, 2, 13),)),
    )
    return Scenario(
        start=START,
        duration_s=int(duration.total_seconds()),
        nodes=nodes,
        scrape_s=scrape_s,
        extra_uuids={("gpu-node-b", 4): CARD_UUID},
        extra_pci={("gpu-node-b", 4): CARD_PCI},
    )
