"""The verdict for one GPU: a pure function of its Xid codes and two hardware facts.

Case list (first match wins; docs/evidence.md "Verdict"). Which Xid has which class is data,
``guard/data/xid-classes.tsv``, and is not repeated here:
  power-cycle  an Xid whose class is power-cycle, a "fallen off the bus" record, or PCI config
               space that reads all ``ff`` — a reset cannot reach a device that does not
               answer, whatever the driver's Xid 154 says
  rma          an Xid whose class is rma
  reset        an Xid whose class is reset and config space not all ``ff``
  human        anything else, including no record at all

Xid 154 (recovery action changed) is reported but never an input here: the incident of
2026-09-21 had the driver asking for a reset while config space read ``ff``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from guard.evidence.catalog import Repair, XidClasses

RECOVERY_ACTION_XID = 154
_ORDER = (Repair.POWER_CYCLE, Repair.RMA, Repair.RESET)


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Repair
    reasons: tuple[str, ...]  # why, one short phrase each, strongest first


def decide(
    codes: Iterable[int],
    fallen_off: bool,
    config_all_ff: bool | None,
    classes: XidClasses,
) -> Decision:
    """Decide; `config_all_ff` is None when config space was not read.

    >>> classes = XidClasses({79: Repair.POWER_CYCLE, 48: Repair.RESET, 143: Repair.RMA})
    >>> decide([48], False, True, classes)
    Decision(verdict=<Repair.POWER_CYCLE: 'power-cycle'>, reasons=('config space reads all ff',))
    >>> decide([48, 143], False, False, classes).verdict.value
    'rma'
    >>> decide([154], False, False, classes).verdict.value
    'human'
    """
    wanted = sorted({c for c in codes if c != RECOVERY_ACTION_XID})
    by_class: dict[Repair, list[str]] = {v: [] for v in _ORDER}
    for code in wanted:
        kind = classes.verdict_of(code)
        if kind in by_class:
            by_class[kind].append(f"Xid {code}")
    if fallen_off:
        by_class[Repair.POWER_CYCLE].append("fallen-off-the-bus record")
    if config_all_ff:
        by_class[Repair.POWER_CYCLE].append("config space reads all ff")
    for verdict in _ORDER:
        if by_class[verdict]:
            reasons = list(by_class[verdict])
            if verdict is Repair.RESET and config_all_ff is None:
                reasons.append("config space not read")
            return Decision(verdict, tuple(reasons))
    if wanted:
        return Decision(Repair.HUMAN, tuple(f"Xid {c}" for c in wanted))
    return Decision(Repair.HUMAN, ("no Xid or fallen-off record for this GPU",))
