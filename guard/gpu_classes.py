"""Node classes and their expected GPU count: `Settings.gpu_classes`, ``<selector>:<count>``
entries split by ``;``; the format and the learned count (``auto``): docs/triggers.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from guard.names import is_label_pair

AUTO = "auto"
# A learned count needs this many other nodes in the class, and more than half of them agreeing.
MIN_PEERS = 2


class ClassError(ValueError):
    """`gpu_classes` that cannot be read; the message names the entry."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "exists"
    value: str = ""

    def holds(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


@dataclass(frozen=True, slots=True)
class GpuClass:
    selector: str  # as written, for log lines and Events
    requirements: tuple[Requirement, ...]
    count: int | None  # None: learned (`auto`)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.holds(labels) for r in self.requirements)


def _requirement(text: str, entry: str) -> Requirement:
    op = "!=" if "!=" in text else "=" if "=" in text else "exists"
    key, _, value = text.partition(op) if op != "exists" else (text, "", "")
    key, value = key.strip(), value.strip()
    if not is_label_pair(f"{key}={value}"):
        raise ClassError(f"entry {entry!r}: {text!r} is not k=v, k!=v or k of a Node label")
    return Requirement(key, op, value)


def parse_classes(text: str) -> tuple[GpuClass, ...]:
    out = []
    for raw in text.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        selector, colon, count = entry.rpartition(":")
        count = count.strip()
        if not colon or not selector.strip() or not (count == AUTO or count.isdecimal()):
            raise ClassError(f"entry {entry!r}: must be <selector>:<count> (a number or auto)")
        if count != AUTO and not 1 <= int(count) <= 64:
            raise ClassError(f"entry {entry!r}: the count must be in 1..64")
        reqs = tuple(_requirement(part, entry) for part in selector.split(","))
        out.append(GpuClass(selector.strip(), reqs, None if count == AUTO else int(count)))
    return tuple(out)


def class_of(classes: Iterable[GpuClass], labels: Mapping[str, str]) -> GpuClass | None:
    return next((c for c in classes if c.matches(labels)), None)


def majority(counts: Iterable[int]) -> int | None:
    """The count more than half of `counts` agree on, with at least `MIN_PEERS` of them."""
    seen = Counter(counts)
    total = sum(seen.values())
    if total < MIN_PEERS:
        return None
    value, n = seen.most_common(1)[0]
    return value if 2 * n > total else None


def kept_label_keys(classes: str, topology_label: str) -> frozenset[str]:
    """The Node labels the guard keeps: the keys its classes select on and the site's topology
    label (`Settings.topology_label`, guard.plan.domain)."""
    try:
        keys = {r.key for c in parse_classes(classes) for r in c.requirements}
    except ClassError:
        keys = set()  # refused at start (Settings); never reached with such settings
    return frozenset(keys | ({topology_label} if topology_label else set()))
