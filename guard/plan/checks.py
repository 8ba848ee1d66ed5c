"""The lifecycle checks of one cycle: the onboarding gate and the after-reboot check, and their
one budget of conformance Jobs, started in priority order (docs/lifecycle.md, "First
deployment").
"""

from __future__ import annotations

from guard.actions import Action, Skip
from guard.jobs import JobTemplates
from guard.model import Snapshot
from guard.plan import boot_check, onboarding
from guard.plan.check_jobs import Wanted
from guard.settings import Settings
from guard.states import Decision


def plan_checks(
    snap: Snapshot,
    s: Settings,
    t: JobTemplates,
    released: frozenset[str] = frozenset(),
    isolating: tuple[Action, ...] = (),
) -> tuple[tuple[Action, ...], tuple[boot_check.Failed, ...]]:
    """The checks' actions, and their conformance failures: candidates of the isolation check's
    one pick (guard.plan.isolation). Nodes the return check lets go this cycle (`released`) or
    the isolation check acts on (`isolating`) are left to them this cycle."""
    decided = released | frozenset(a.node for a in isolating)
    gates, boots = onboarding.scan(snap, s, t, decided), boot_check.scan(snap, s, t, decided)
    per_node: dict[str, list[Action]] = {}
    for found in (gates.actions, boots.actions):
        for node, actions in found.items():
            per_node.setdefault(node, []).extend(actions)
    wanted = sorted(
        {**boots.wanted, **gates.wanted}.items(), key=lambda nw: (nw[1].priority, nw[0])
    )
    room = max(0, s.boot_check_max_jobs - gates.running - boots.running)
    for node, want in wanted[:room]:
        per_node.setdefault(node, []).append(want.job)
    out = [a for node in sorted(per_node) for a in per_node[node]]
    queued = _queued(wanted[room:], s, gates.running + boots.running)
    return (*out, *queued), tuple(boots.failed)


def _queued(waiting: list[tuple[str, Wanted]], s: Settings, running: int) -> tuple[Skip, ...]:
    if not waiting:
        return ()
    names = ", ".join(n for n, _ in waiting[:5]) + (", …" if len(waiting) > 5 else "")
    detail = (
        f"{len(waiting)} GPU nodes wait for a conformance Job ({names}); {running} run, "
        f"at most {s.boot_check_max_jobs} at once (boot_check_max_jobs)"
    )
    return (Skip("", Decision.BOOT_CHECK_QUEUED, detail, "started as running ones finish"),)
