"""All-reduce across every GPU of the node (one process per GPU, `ranks.py`; docs/loadtest.md): the
plan, what each rank reported, and the figures. A rank's progress is a position: -1 spawned,
0 started, 1 ready, then 2+2k / 3+2k at the begin / end of step k, and done after all."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Transport = Literal["nccl", "gloo"]
Status = Literal["ok", "died", "error", "hung", "stopped"]

SPAWNED, STARTED, READY = -1, 0, 1
# Until every rank is ready: start-up of a Python with torch, CUDA and NCCL per GPU.
START_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class AllreduceSpec:
    """What a backend runs: transport, tensor device, sizes, warm-up and timed iterations;
    `faults`: simulated failures for tests, by rank and kind (tests/numpy_backend.py)."""

    transport: Transport
    device: Literal["cuda", "cpu"]
    sizes_bytes: tuple[int, ...]
    warmup: int
    iterations: int
    faults: Mapping[int, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AllreducePlan:
    """`world` ranks; one silent past a timeout while others report is hung: `start_timeout_s`
    until every rank is ready, `step_timeout_s` between reports afterwards."""

    spec: AllreduceSpec
    world: int
    start_timeout_s: float
    step_timeout_s: float


@dataclass(frozen=True, slots=True)
class Step:
    """One step: every rank together (`pairs` empty) or the listed pairs side by side."""

    name: str
    size_bytes: int
    pairs: tuple[tuple[int, int], ...] = ()

    def group_of(self, rank: int) -> tuple[int, ...] | None:
        """The ranks `rank` reduces with in this step (all: empty tuple); None when idle."""
        if not self.pairs:
            return ()
        return next((tuple(sorted(p)) for p in self.pairs if rank in p), None)


def size_label(n_bytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n_bytes >= 1 << shift and n_bytes % (1 << shift) == 0:
            return f"{n_bytes >> shift}{unit}"
    return f"{n_bytes}B"


def pair_rounds(world: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Ring neighbours (i, i+1 mod n) in rounds where no rank appears twice; none below 3 ranks."""
    if world < 3:
        return ()
    left = [(i, (i + 1) % world) for i in range(world)]
    rounds = []
    while left:
        used: set[int] = set()
        this, rest = [], []
        for a, b in left:
            if a in used or b in used:
                rest.append((a, b))
            else:
                this.append((a, b))
                used |= {a, b}
        rounds.append(tuple(this))
        left = rest
    return tuple(rounds)


def steps(spec: AllreduceSpec, world: int) -> tuple[Step, ...]:
    together = tuple(Step(f"allreduce-{size_label(s)}", s) for s in spec.sizes_bytes)
    largest = max(spec.sizes_bytes)
    rounds = pair_rounds(world)
    return together + tuple(Step(f"pairs-{i + 1}", largest, r) for i, r in enumerate(rounds))


def steps_from_json(items: Sequence[Mapping[str, Any]]) -> tuple[Step, ...]:
    return tuple(
        Step(str(i["name"]), int(i["size_bytes"]), tuple((int(a), int(b)) for a, b in i["pairs"]))
        for i in items
    )


def rank_config(plan: AllreducePlan, all_steps: Sequence[Step], rank: int, parent: int) -> str:
    """The JSON command-line argument of one rank (`guard.loadtest.rank`); `parent`: its pid."""
    spec = plan.spec
    # The ranks' own collective timeout stays far above the parent's, which names the rank first.
    timeout_s = plan.start_timeout_s + plan.step_timeout_s * (len(all_steps) + 2)
    config = {
        "parent": parent,
        "rank": rank,
        "world": plan.world,
        "transport": spec.transport,
        "device": spec.device,
        "warmup": spec.warmup,
        "iterations": spec.iterations,
        "timeout_s": 2 * timeout_s,
        "faults": dict(spec.faults.get(rank, {})),
        "steps": [asdict(s) for s in all_steps],
    }
    return json.dumps(config, sort_keys=True)


def done_position(n_steps: int) -> int:
    return 2 + 2 * n_steps


def stage(position: int, all_steps: Sequence[Step]) -> str:
    """What a rank at `position` is doing or about to do: the stage where it stopped."""
    if position == SPAWNED:
        return "start"
    if position == STARTED:
        return "init"
    if position >= done_position(len(all_steps)):
        return "done"
    index = (position - 1) // 2  # ready and begin k are in step k; end k heads into step k+1
    return all_steps[index].name if index < len(all_steps) else "finish"


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus factor 2(n−1)/n: 0 for one rank, 1 for two, 1.75 for eight."""
    return 2.0 * (ranks - 1) / ranks


def silence_limit_s(positions: Sequence[int], plan: AllreducePlan) -> float:
    return plan.start_timeout_s if min(positions) < READY else plan.step_timeout_s


def hung_ranks(positions: Sequence[int], quiet_s: float, plan: AllreducePlan) -> tuple[int, ...]:
    """Ranks to call hung when no rank has reported for `quiet_s`; empty while within limits. The
    laggards are hung (the others wait for them inside a collective); when all stand at the same
    place, the collective itself hangs and every rank is named."""
    if quiet_s < silence_limit_s(positions, plan):
        return ()
    front = max(positions)
    behind = tuple(rank for rank, pos in enumerate(positions) if pos < front)
    return behind or tuple(range(len(positions)))


@dataclass(frozen=True, slots=True)
class RankReport:
    """What the parent saw of one rank: its position; `seconds` of one timed all-reduce by step
    index (None: idle in that step); the `error` it reported, `error_seq` its place among all
    ranks' reports; its `exit` status (negative: signal; None: running); `killed` by the parent."""

    rank: int
    position: int
    seconds: Mapping[int, float | None] = field(default_factory=dict)
    mismatches: Mapping[int, int] = field(default_factory=dict)
    error: str | None = None
    error_seq: int = 0
    exit: int | None = None
    killed: bool = False
    log_tail: str = ""

    def is_done(self, n_steps: int) -> bool:
        return self.position >= done_position(n_steps)


@dataclass(frozen=True, slots=True)
class RankOutcome:
    """One rank's end: `stage` where it stopped, `detail` the exit, signal or error."""

    rank: int
    status: Status
    stage: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SizeFigure:
    """All ranks at one size: mean seconds of one all-reduce, algbw and busbw in GB/s (10⁹)."""

    size_bytes: int
    seconds: float
    algbw_gbps: float
    busbw_gbps: float


@dataclass(frozen=True, slots=True)
class Mismatch:
    rank: int
    step: str
    count: int


@dataclass(frozen=True, slots=True)
class AllreduceResult:
    """The run: one outcome per rank, the node's figures, each GPU's bandwidth (None: unknown)."""

    transport: Transport
    world: int
    outcomes: tuple[RankOutcome, ...]
    sizes: tuple[SizeFigure, ...] = ()
    gpu_busbw_gbps: tuple[float | None, ...] = ()
    mismatches: tuple[Mismatch, ...] = ()
    hung_after_s: float | None = None  # the silence limit the hung ranks ran past
    error: str | None = None  # the ranks could not be started at all

    @property
    def completed(self) -> bool:
        return self.error is None and all(o.status == "ok" for o in self.outcomes)
