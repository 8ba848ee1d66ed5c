"""The push at the end of a run: the gpu_node_guard_* gauges of docs/metrics.md to a Pushgateway
(``pushadd_to_gateway``, a POST: a failed run keeps the last success; docs/metrics.md, "The push").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

from guard import metric_names as m
from guard.actions import TYPE_WORDS, Skip
from guard.apply.outcome import Outcome, RunTrace
from guard.figures import Figures, Unit, budget_of, facts, figures
from guard.jobs import JobTemplates
from guard.log import Log
from guard.model import Snapshot
from guard.plan import domain
from guard.plan.isolation import held_candidates
from guard.plan.pending import pending
from guard.settings import INTERNAL_UPSTREAMS, Settings
from guard.states import NODE_STATES
from guard.status.derive import report
from guard.status.model import Sight
from guard.wire import allowed_dns_prefixes
from guard.xid_tables import Repair, bundled_classes

PUSH_TIMEOUT_S = 5.0  # after the cycle, well inside the pod's activeDeadlineSeconds
OUTCOMES = ("applied", "failed")
WRITE_TYPES = tuple(word for kind, word in TYPE_WORDS.items() if kind is not Skip)

Labels = tuple[tuple[str, str], ...]
Samples = dict[str, dict[Labels, float]]  # metric name → label set → value


def metrics(s: Settings, trace: RunTrace, exit_code: int, ended: float, took_s: float) -> Samples:
    """The samples of one push (docs/metrics.md); `ended` is Unix time, `took_s` the duration."""
    out: Samples = {
        m.LAST_RUN.name: {(): ended},
        m.LAST_RUN_EXIT_CODE.name: {(): float(exit_code)},
        m.LAST_RUN_DURATION.name: {(): round(took_s, 3)},
        m.LAST_RUN_ACTIONS.name: _actions(trace.outcomes),
        m.LAST_RUN_REQUESTS.name: _requests(trace),
    }
    if exit_code == 0:
        out[m.LAST_SUCCESS.name] = {(): ended}
    for lease, at in ((m.LEASE_TAKEN, trace.lease_taken), (m.LEASE_HELD, trace.lease_held)):
        if at is not None:
            out[lease.name] = {(): at}
    out.update(site_filters(s))
    if trace.snap is not None and trace.templates is not None:
        out.update(_seen(s, trace.snap, trace.templates))
    return out


def site_filters(s: Settings) -> Samples:
    """The settings the shipped alerts join with (alert_queries): known before any read, so an
    aborted run pushes them too."""
    networks = s.conformance_allowed_dns or INTERNAL_UPSTREAMS
    return {
        m.USER_CODE_XID.name: {(("xid", str(x)),): 1.0 for x in sorted(set(s.user_code_xids))},
        m.ALLOWED_DNS_PREFIX.name: {(("prefix", p),): 1.0 for p in allowed_dns_prefixes(networks)},
    }


def _actions(outcomes: Iterable[Outcome]) -> dict[Labels, float]:
    done: Counter[tuple[str, str]] = Counter(
        (o.type_word, o.status) for o in outcomes if o.status in OUTCOMES
    )
    return {
        (("type", word), ("outcome", status)): float(done[(word, status)])
        for word in WRITE_TYPES
        for status in OUTCOMES
    }


def _requests(trace: RunTrace) -> dict[Labels, float]:
    codes = {
        "prometheus": trace.prom.codes,
        "kubernetes": trace.kube.codes if trace.kube else Counter(),
    }
    return {
        (("target", target), ("code", code)): float(n)
        for target, counted in codes.items()
        for code, n in sorted(counted.items())
    }


def _seen(s: Settings, snap: Snapshot, templates: JobTemplates) -> Samples:
    """Nodes by state and the breaker, as `gpu-node-guard status` showed them at the cycle's
    read; the pending candidates."""
    status = report(snap, s, templates, Sight(s.prometheus_url))
    states = Counter(row.state for row in status.nodes)
    by_state = {state.value: 0 for state in NODE_STATES} | dict(states)
    return {
        m.NODES.name: {(("state", state),): float(n) for state, n in by_state.items()},
        m.PENDING_CANDIDATES.name: {(): float(len(pending(snap, s)))},
        m.BREAKER_LIMIT.name: {(): float(status.breaker.limit)},
        m.BREAKER_ISOLATIONS.name: {(): float(status.breaker.guarded)},
        m.BREAKER_HEADROOM.name: {(): float(status.breaker.headroom)},
        m.DOMAIN_INCIDENT_NODES.name: domain_incidents(s, snap),
        **repair_figures(s, snap),
    }


def domain_incidents(s: Settings, snap: Snapshot) -> dict[Labels, float]:
    """Nodes per domain incident (guard.plan.domain), as the cycle's plan found them; one
    series at 0 with domain="" when there is none, so the push replaces the last incident."""
    found = domain.incidents(snap, s, held_candidates(snap, s))
    if not found:
        return {(("domain", ""),): 0.0}
    return {(("domain", i.domain),): float(len(i.members)) for i in found}


def repair_figures(s: Settings, snap: Snapshot) -> Samples:
    """The repair figures of the ledger and the nodes' records (guard/figures.py): every
    verdict, unit, window and phase, so a value that emptied reads 0 (NaN for a mean of none)."""
    # A snapshot's Events carry no time and its Jobs no creation time: the report reads those.
    known = facts(snap.ledger, snap.nodes, (), ())
    classes = bundled_classes()
    budget = budget_of(s)
    month = figures(known, classes, snap.now - timedelta(days=30), snap.now, budget)
    week = figures(known, classes, snap.now - timedelta(days=7), snap.now, budget)
    open_ = [x for x in month.spans if x.end is None]
    counts = Counter((x.verdict.value, x.unit.value) for x in open_)
    oldest = {v: 0.0 for v in Repair}
    for x in open_:
        oldest[x.verdict] = max(oldest[x.verdict], (snap.now - x.start).total_seconds())
    past = Counter(o.verdict for o in month.over_budget)
    hours = {"7d": week.hours, "30d": month.hours}
    return {
        m.ISOLATIONS.name: {
            (("verdict", v.value), ("unit", u.value)): float(counts[(v.value, u.value)])
            for v in Repair
            for u in Unit
        },
        m.ISOLATION_OLDEST_AGE.name: {(("verdict", v.value),): oldest[v] for v in Repair},
        m.ISOLATIONS_PAST_BUDGET.name: {(("verdict", v.value),): float(past[v]) for v in Repair},
        m.QUARANTINE_BUDGET.name: {
            (("verdict", v.value),): budget.of(v).total_seconds() for v in Repair
        },
        m.GPU_HOURS_LOST.name: {
            (("gpus", which), ("window", w)): round(getattr(h, which), 3)
            for w, h in hours.items()
            for which in ("faulted", "healthy")
        },
        m.REPAIR_PHASE.name: _phases(month),
        m.INCIDENTS.name: {
            (("window", "7d"),): float(sum(r.incidents for r in week.nodes)),
            (("window", "30d"),): float(sum(r.incidents for r in month.nodes)),
        },
        m.REPEAT_CARDS.name: {(): float(len(month.repeat_cards()))},
    }


def _phases(f: Figures) -> dict[Labels, float]:
    firsts = [r for r in f.incidents if r.isolated is not None]
    seen = {
        "onset-to-cordon": [r.onset_to_cordon for r in firsts],
        "cordon-to-repair": [r.cordon_to_repair for r in firsts],
        "repair-to-return": [r.repair_to_return for r in firsts],
        "isolated": [r.isolated for r in firsts if not r.open],
    }
    out: dict[Labels, float] = {}
    for phase, spans in seen.items():
        known = [d.total_seconds() for d in spans if d is not None]
        out[(("phase", phase),)] = sum(known) / len(known) if known else math.nan
    return out


def registry(samples: Samples) -> CollectorRegistry:
    """A fresh prometheus-client registry with one gauge per metric of `samples`."""
    reg = CollectorRegistry()
    for metric in m.PUSHED:
        values = samples.get(metric.name)
        if values is None:
            continue
        gauge = Gauge(metric.name, metric.help, metric.labels, registry=reg)
        for labels, value in values.items():
            (gauge.labels(**dict(labels)) if labels else gauge).set(value)
    return reg


def push_run(
    s: Settings, trace: RunTrace, exit_code: int, ended: float, took_s: float, log: Log
) -> bool:
    """Build the samples and push them; neither raises or changes the exit code. A bug in
    building is one WARN ``push-failed`` line and no push (a half-built one misleads alerts)."""
    try:
        samples = metrics(s, trace, exit_code, ended, took_s)
    except Exception as exc:  # a bug in the status derivation: the cycle's work stands
        _failed(s, log, exc, "the samples could not be built")
        return False
    return push(s, samples, log)


def push(s: Settings, samples: Samples, log: Log) -> bool:
    """POST the samples; a failure is one WARN line. True when the Pushgateway took them."""
    try:
        pushadd_to_gateway(
            s.pushgateway_url,
            job=m.PUSH_JOB,
            registry=registry(samples),
            grouping_key={m.GROUPING_LABEL: s.namespace},
            timeout=PUSH_TIMEOUT_S,
        )
    except Exception as exc:  # urllib's URLError/HTTPError, a timeout, a refused connection
        _failed(s, log, exc)
        return False
    return True


def _failed(s: Settings, log: Log, exc: Exception, what: str = "") -> None:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    log.event(
        "push-failed",
        "WARN",
        url=s.pushgateway_url,
        reason=f"{what + ': ' if what else ''}{type(exc).__name__}: {first}",
        next="the run's exit code is unchanged; GPUNodeGuardNotRunning (Pushgateway "
        "variant) fires if pushes keep failing",
    )
