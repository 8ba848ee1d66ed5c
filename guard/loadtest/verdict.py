"""The load-test verdict: a pure function of what was expected and what the run observed.

Only the ratio between GPUs is judged, as in the incident runbook: a node whose GPUs are all slow
together passes. Absolute numbers are reported for people to compare against the chip's peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.loadtest.model import BurnResult, RunResult, memory_targets


@dataclass(frozen=True, slots=True)
class Criteria:
    """expected_gpus: the node's recorded GPU count; min_ratio: slowest/fastest at least this."""

    expected_gpus: int
    min_ratio: float


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
    """Each GPU that ran, as a fraction of the fastest one.

    >>> from guard.loadtest.model import BurnResult
    >>> throughput_ratios((BurnResult(0, 100, 1.0, 2e12), BurnResult(1, 75, 1.0, 2e12)))
    {0: 1.0, 1: 0.75}
    """
    ran = [b for b in burns if b.has_run]
    if not ran:
        return {}
    fastest = max(b.tflops for b in ran)
    return {b.index: b.tflops / fastest for b in ran}


# Fail when any case holds; every failing case is listed, in this order:
#   backend-error          the backend could not list its GPUs (no CUDA, no driver)
#   gpu-count              visible GPUs differ from the expected count
#   no-result              a visible GPU's burn never returned (hung thread)
#   exception              a GPU raised during its burn
#   not-run                a GPU returned without a timed iteration (the gpu-burn trap)
#   no-gpu-ran             not one GPU completed an iteration
#   slow                   a GPU below min_ratio of the fastest
#   memory-*               the required memory test: target missing, not run, raised, or errors
# Never failing, reported as notes: PCIe links below their maximum, links unreadable.
def judge(criteria: Criteria, run: RunResult) -> Verdict:
    reasons = [*_count_reasons(criteria, run), *_burn_reasons(run)]
    ratios = throughput_ratios(run.burns)
    reasons += [
        f"slow gpu={i} ratio={r:.3f} min_ratio={criteria.min_ratio}"
        for i, r in sorted(ratios.items())
        if r < criteria.min_ratio
    ]
    reasons += _memory_reasons(run)
    tflops = [b.tflops for b in run.burns if b.has_run]
    return Verdict(
        passed=not reasons,
        reasons=tuple(reasons),
        notes=_pcie_notes(run),
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
        if burn is None:
            reasons.append(f"no-result gpu={device.index} pci={device.pci}")
        elif burn.error is not None:
            reasons.append(f"exception gpu={device.index} pci={device.pci} error={burn.error!r}")
        elif not burn.has_run:
            reasons.append(
                f"not-run gpu={device.index} pci={device.pci} iterations={burn.iterations}"
                f" device_s={burn.device_s:g}"
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


def _pcie_notes(run: RunResult) -> tuple[str, ...]:
    if run.pcie_error is not None:
        return (f"pcie-unknown error={run.pcie_error!r}",)
    notes = []
    for link in run.pcie:
        if link.is_below_max:
            notes.append(
                f"pcie-below-max pci={link.pci} gen={link.gen_current}/{link.gen_max}"
                f" width={link.width_current}/{link.width_max}"
            )
    return tuple(notes)
