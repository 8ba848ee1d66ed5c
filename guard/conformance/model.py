"""Values shared by every conformance item: the result of one item and the run's configuration. A
fact that could not be read is a `guard.doors.hostexec.Unknown`, and its item reports UNKNOWN."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from guard.conformance.platform import PlatformChoice, ProxyChoice
from guard.doors.hostexec import Unknown
from guard.wire import IpNetwork

Role = Literal["worker", "server"]


class Status(StrEnum):
    """Outcome of one item. Only FAIL fails the run; WARN and UNKNOWN are reported, not fatal.
    SKIP: the item does not apply to this node (its `observed` says why)."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    FIXED = "FIXED"
    UNKNOWN = "UNKNOWN"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One line of the report: what was seen and what a person should do about it."""

    name: str
    status: Status
    observed: str
    action: str = ""


def unknown_result(name: str, fact: Unknown) -> ItemResult:
    return ItemResult(name, Status.UNKNOWN, str(fact), "re-run; check the node by hand")


@dataclass(frozen=True, slots=True)
class Config:
    """What the node is expected to be (the options of docs/conformance.md). `None` is "not given":
    the item that needs it is SKIP; "auto" reads the platform from the node."""

    role: Role = "worker"
    control_plane_version: str | None = None
    allowed_dns: tuple[IpNetwork, ...] | None = None
    platform: PlatformChoice = "auto"
    kube_proxy_mode: ProxyChoice = "auto"
    resolv_conf: str | None = None
