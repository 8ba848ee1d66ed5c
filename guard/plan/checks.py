"""The lifecycle checks of one cycle: the onboarding gate and the after-reboot check, their one
budget of conformance Jobs, and the after-reboot check's cordon (docs/lifecycle.md).

Budget: at most `boot_check_max_jobs` of their conformance Jobs run at once; a cycle starts
new ones in priority order (rebooted, onboarding, never checked; then by node name) only below
it, and says in one line how many wait. The cordon: after the isolation check, under its
breaker, and not at all in a cycle where it cordoned (one cordon per cycle, hardware first).
"""

from __future__ import annotations

from guard.actions import Action, Skip
from guard.jobs import JobTemplates
from guard.model import Snapshot
from guard.plan import boot_check, onboarding, units
from guard.plan.check_jobs import Wanted
from guard.plan.common import breaker_open
from guard.plan.isolation import breaker_limit
from guard.settings import Settings


def plan_checks(
    snap: Snapshot,
    s: Settings,
    t: JobTemplates,
    released: frozenset[str] = frozenset(),
    isolating: tuple[Action, ...] = (),
) -> tuple[Action, ...]:
    """`released`: nodes the return check lets go this cycle (they no longer count for the
    breaker); `isolating`: the isolation check's actions this cycle. Nodes either acted on are
    left to them this cycle."""
    decided = released | frozenset(a.node for a in isolating)
    cordoned = any(units.isolates(a) for a in isolating)
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
    cordons = _cordons(snap, s, boots.failed, released, cordoned)
    for node, actions in cordons.items():
        per_node.setdefault(node, []).extend(actions)
    out = [a for node in sorted(per_node) for a in per_node[node]]
    return (*out, *_queued(wanted[room:], s, gates.running + boots.running))


def _queued(waiting: list[tuple[str, Wanted]], s: Settings, running: int) -> tuple[Skip, ...]:
    if not waiting:
        return ()
    names = ", ".join(n for n, _ in waiting[:5]) + (", …" if len(waiting) > 5 else "")
    detail = (
        f"{len(waiting)} GPU nodes wait for a conformance Job ({names}); {running} run, "
        f"at most {s.boot_check_max_jobs} at once (boot_check_max_jobs)"
    )
    return (Skip("", "boot-check-queued", detail, "started as running ones finish"),)


def _cordons(
    snap: Snapshot,
    s: Settings,
    failed: list[boot_check.Failed],
    released: frozenset[str],
    cordoned: bool,
) -> dict[str, list[Action]]:
    """At most one conformance cordon; the rest wait a cycle, or the breaker holds them all."""
    if not failed:
        return {}
    limit = breaker_limit(snap, s)
    guarded = units.breaker_count(snap, s, released) + cordoned
    out: dict[str, list[Action]] = {}
    first = failed[0]
    for f in failed:
        items = ",".join(x.item for x in f.job.result.failed) if f.job.result else ""
        what = f"conformance failed on {items} (job/{f.job.name})"
        if guarded >= limit:
            out[f.node.name] = list(breaker_open(f.node.name, guarded, limit, what))
        elif cordoned or f is not first:
            behind = "the isolation check's cordon" if cordoned else first.node.name
            out[f.node.name] = [
                Skip(
                    f.node.name,
                    "one-per-cycle",
                    f"{what}; waits behind {behind}",
                    "considered again next cycle",
                )
            ]
        else:
            out[f.node.name] = list(boot_check.conformance_cordon(snap, s, f))
    return out
