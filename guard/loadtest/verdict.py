"""The load-test verdict: a pure function of what was expected and what the run observed. Only
the ratio between GPUs is judged, as in the incident runbook (docs/loadtest.md, "Verdict")."""

from __future__ import annotations

from dataclasses import dataclass

from guard.loadtest.collective import AllreduceResult
from guard.loadtest.model import BurnResult, ExpectedLink, RunResult, link_text, memory_targets

SMALL_DEV_SHM_BYTES = 1 << 30
# A card at half the best GPU's bandwidth (a PCIe-bound pair on a link at half width or one
# generation lower) is below it; the spread of a healthy node is unmeasured (docs/loadtest.md).
ALLREDUCE_MIN_RATIO = 0.7


@dataclass(frozen=True, slots=True)
class Criteria:
    """The node's recorded GPU count and links, and the least slowest/fastest ratios (throughput,
    each GPU's all-reduce bandwidth against the best GPU's)."""

    expected_gpus: int
    min_ratio: float
    allreduce_min_ratio: float = ALLREDUCE_MIN_RATIO
    expected_links: tuple[ExpectedLink, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """`reasons` fail the test (one `word key=value…` line each); `notes` are reported only."""

    passed: bool
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    min_tflops: float | None
    max_tflops: float | None

    @property
    def ratio(self) -> float | None:
        if self.min_tflops is None or not self.max_tflops:
            return None
        return self.min_tflops / self.max_tflops


def throughput_ratios(burns: tuple[BurnResult, ...]) -> dict[int, float]:
    """Each GPU that ran, as a fraction of the fastest one."""
    ran = [b for b in burns if b.has_run]
    if not ran:
        return {}
    fastest = max(b.tflops for b in ran)
    return {b.index: b.tflops / fastest for b in ran}


# Every failing case, in the order of docs/loadtest.md's reasons table. Notes never fail: links
# unreadable, all-reduce skipped, a /dev/shm under 1 GiB (NCCL's shared memory: it may fail there).
def judge(criteria: Criteria, run: RunResult) -> Verdict:
    reasons = [*_count_reasons(criteria, run), *_burn_reasons(run)]
    ratios = throughput_ratios(run.burns)
    reasons += [
        f"slow gpu={i} ratio={r:.3f} min_ratio={criteria.min_ratio}"
        for i, r in sorted(ratios.items())
        if r < criteria.min_ratio
    ]
    reasons += _memory_reasons(run)
    if run.allreduce is not None:
        reasons += _allreduce_reasons(criteria, run, run.allreduce)
    reasons += _pcie_reasons(criteria, run)
    tflops = [b.tflops for b in run.burns if b.has_run]
    return Verdict(
        passed=not reasons,
        reasons=tuple(reasons),
        notes=_notes(run),
        min_tflops=min(tflops) if tflops else None,
        max_tflops=max(tflops) if tflops else None,
    )


def _count_reasons(criteria: Criteria, run: RunResult) -> list[str]:
    reasons = []
    if run.backend_error is not None:
        reasons.append(f"backend-error backend={run.backend} error={run.backend_error!r}")
    if len(run.devices) != criteria.expected_gpus:
        reasons.append(f"gpu-count expected={criteria.expected_gpus} visible={len(run.devices)}")
    return reasons


def _burn_reasons(run: RunResult) -> list[str]:
    burns = {b.index: b for b in run.burns}
    reasons = []
    for device in run.devices:
        burn = burns.get(device.index)
        where = f"gpu={device.index} pci={device.pci}"
        if burn is None:
            reasons.append(f"no-result {where}")
        elif burn.error is not None:
            reasons.append(f"exception {where} error={burn.error!r}")
        elif not burn.has_run:
            reasons.append(
                f"not-run {where} iterations={burn.iterations} device_s={burn.device_s:g}"
            )
    if not any(b.has_run for b in run.burns):
        reasons.append("no-gpu-ran")
    return reasons


def _memory_reasons(run: RunResult) -> list[str]:
    plan = run.plan.memory
    if not plan.required:
        return []
    targets = memory_targets(run.devices, plan)
    if plan.pci is not None and not targets:
        return [f"memory-target-missing pci={plan.pci}"]
    results = {m.index: m for m in run.memory}
    reasons = []
    for device in targets:
        result = results.get(device.index)
        where = f"gpu={device.index} pci={device.pci}"
        if result is None or (result.error is None and result.bytes_tested <= 0):
            reasons.append(f"memory-not-run {where}")
        elif result.error is not None:
            reasons.append(f"memory-exception {where} error={result.error!r}")
        elif result.errors > 0:
            reasons.append(
                f"memory-errors {where} errors={result.errors} bytes={result.bytes_tested}"
            )
    return reasons


def allreduce_ratios(result: AllreduceResult) -> dict[int, float]:
    """Each GPU's all-reduce bandwidth as a fraction of the best GPU's (ranks that have one)."""
    known = {i: bw for i, bw in enumerate(result.gpu_busbw_gbps) if bw is not None}
    best = max(known.values(), default=0.0)
    return {i: bw / best for i, bw in known.items()} if best > 0 else {}


def _allreduce_reasons(criteria: Criteria, run: RunResult, result: AllreduceResult) -> list[str]:
    if result.error is not None:
        return [f"allreduce-unavailable transport={result.transport} error={result.error!r}"]
    pci = {d.index: d.pci for d in run.devices}
    reasons = []
    for o in result.outcomes:
        where = f"rank={o.rank} pci={pci.get(o.rank, 'unknown')} at={o.stage}"
        if o.status == "died":
            reasons.append(f"allreduce-died {where} {o.detail}")
        elif o.status == "error":
            reasons.append(f"allreduce-error {where} error={o.detail!r}")
        elif o.status == "hung":
            reasons.append(f"allreduce-hung {where} silent_s={result.hung_after_s:g}")
    reasons += [
        f"allreduce-wrong rank={m.rank} pci={pci.get(m.rank, 'unknown')} at={m.step}"
        f" mismatches={m.count}"
        for m in result.mismatches
    ]
    if result.completed:
        reasons += [
            f"allreduce-slow rank={rank} pci={pci.get(rank, 'unknown')}"
            f" bus_gbps={result.gpu_busbw_gbps[rank]:.4g} ratio={ratio:.3f}"
            f" min_ratio={criteria.allreduce_min_ratio}"
            for rank, ratio in sorted(allreduce_ratios(result).items())
            if ratio < criteria.allreduce_min_ratio
        ]
    return reasons


def _pcie_reasons(criteria: Criteria, run: RunResult) -> list[str]:
    reasons = [
        f"pcie-below-max pci={link.pci} gen={link.gen_current}/{link.gen_max}"
        f" width={link.width_current}/{link.width_max}"
        for link in run.pcie
        if link.is_below_max
    ]
    links = {link.pci: link for link in run.pcie}
    for expected in criteria.expected_links:
        recorded = link_text(expected.gen, expected.width)
        link = links.get(expected.pci)
        now = "unreadable" if run.pcie_error is not None else "absent"
        if link is not None:
            now = link_text(link.gen_current, link.width_current)
        if link is None or link.gen_current is None or link.width_current is None:
            reasons.append(
                f"pcie-recorded-unchecked pci={expected.pci} recorded={recorded} now={now}"
            )
        elif link.gen_current < expected.gen or link.width_current < expected.width:
            reasons.append(f"pcie-below-recorded pci={expected.pci} now={now} recorded={recorded}")
    return reasons


def _notes(run: RunResult) -> tuple[str, ...]:
    notes = []
    if run.pcie_error is not None:
        notes.append(f"pcie-unknown error={run.pcie_error!r}")
    if run.allreduce_skipped is not None:
        notes.append(f"allreduce-skipped reason={run.allreduce_skipped}")
    if run.dev_shm_bytes is not None and run.dev_shm_bytes < SMALL_DEV_SHM_BYTES:
        notes.append(f"dev-shm-small size_mib={run.dev_shm_bytes >> 20}")
    return tuple(notes)
