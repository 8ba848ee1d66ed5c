"""CPU backend: each "GPU" is a worker thread, so the real orchestration and verdict run in CI.

fp16 like the GPU burn. NumPy has no BLAS for float16, so its matmul is a slow single-threaded
loop: sizes stay small (`MAX_SIZE`), and concurrent "GPUs" do not fight over a BLAS thread pool,
which made float32 runs lopsided. A thread's CPU time stands in for device time: it counts the
work done for that GPU, not the time the thread waited for a core or the GIL.
`NumpyFaults` injects the failures a real GPU shows, so tests go through the same code paths.
Not in the wheel (the admission policy admits only `--backend torch`): a test hands it to the
command with `cpu()` as the click context's object.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np
import numpy.typing as npt

from guard.loadtest.cli import BackendOverride
from guard.loadtest.collective import AllreduceSpec
from guard.loadtest.model import CONSTANT_WORDS, BurnResult, DeviceInfo, MemoryResult, PcieLink

MAX_SIZE = 256  # one fp16 matmul of this size takes about 0.2 s on one core
# gloo over loopback between CPU processes: small tensors, the orchestration is what is tested.
ALLREDUCE_SIZES = (4 << 10, 64 << 10, 256 << 10)
_PCI_BUS_BASE = 0x18  # simulated GPUs sit at 0000:18:00.0, 0000:19:00.0, …
_STUCK_STRIDE = 4099  # every n-th word of a faulty simulated GPU has bit 0 stuck at 0


@dataclass(frozen=True, slots=True)
class RankFaults:
    """Simulated rank failures, by rank, each at a step: `die` (SIGKILL, like an OOM kill), `hang`
    (blocks for good before it), `fail` (raises, like a CUDA or NCCL error), `corrupt` (one element
    of its checked all-reduce off by one); `slow` multiplies the rank's timed seconds, like a card
    on a degraded link. `guard.loadtest.rank` acts on them."""

    die: Mapping[int, int] = field(default_factory=dict)
    hang: Mapping[int, int] = field(default_factory=dict)
    fail: Mapping[int, int] = field(default_factory=dict)
    corrupt: Mapping[int, int] = field(default_factory=dict)
    slow: Mapping[int, float] = field(default_factory=dict)

    def by_rank(self) -> dict[int, dict[str, float]]:
        """As `AllreduceSpec.faults`: each rank's faults by kind."""
        out: dict[int, dict[str, float]] = {}
        for kind in fields(self):
            for rank, value in getattr(self, kind.name).items():
                out.setdefault(rank, {})[kind.name] = value
        return out


@dataclass(frozen=True, slots=True)
class NumpyFaults:
    """Simulated defects by GPU index.

    fail: the burn raises this message after its first matmul (a CUDA error mid-run).
    stall: the burn returns having done nothing (the gpu-burn trap).
    stuck_words: this many words keep bit 0 at zero whatever is written (a bad memory cell).
    downtrained: the PCIe link reports gen 1 x8 against gen 4 x16.
    ranks: failures of the all-reduce ranks (gloo processes), see `RankFaults`.
    """

    fail: Mapping[int, str] = field(default_factory=dict)
    stall: frozenset[int] = frozenset()
    stuck_words: Mapping[int, int] = field(default_factory=dict)
    downtrained: frozenset[int] = frozenset()
    ranks: RankFaults = field(default_factory=RankFaults)


class NumpyBackend:
    def __init__(
        self, devices: int = 2, memory_bytes: int = 4 << 20, faults: NumpyFaults | None = None
    ) -> None:
        self._count = devices
        self._memory_words = max(1, memory_bytes // 8)
        self._faults = faults or NumpyFaults()

    @property
    def name(self) -> str:
        return "numpy"

    def devices(self) -> tuple[DeviceInfo, ...]:
        return tuple(
            DeviceInfo(i, _pci(i), "numpy-cpu", f"CPU-{i:08x}-0000-0000-0000-000000000000")
            for i in range(self._count)
        )

    def burn(self, index: int, size: int, duration_s: float) -> BurnResult:
        if size > MAX_SIZE:
            raise ValueError(f"size {size} is too large for the numpy backend (at most {MAX_SIZE})")
        if index in self._faults.stall:
            return BurnResult.timed(index, size, 0, 0.0)
        rng = np.random.default_rng(index)
        a = rng.standard_normal((size, size), dtype=np.float32).astype(np.float16)
        b = rng.standard_normal((size, size), dtype=np.float32).astype(np.float16)
        c = np.empty_like(a)
        np.matmul(a, b, out=c)  # warm-up, outside the timed loop like on the GPU
        iterations = 0
        start_cpu = time.thread_time()
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            np.matmul(a, b, out=c)
            iterations += 1
            if index in self._faults.fail:
                raise RuntimeError(self._faults.fail[index])
        device_s = time.thread_time() - start_cpu
        if not np.isfinite(c).all():
            raise ArithmeticError("matmul result is not finite")
        return BurnResult.timed(index, size, iterations, device_s)

    def memory_test(self, index: int) -> MemoryResult:
        words: npt.NDArray[np.int64] = np.empty(self._memory_words, dtype=np.int64)
        stuck = self._stuck_offsets(index)
        errors = 0
        start = time.perf_counter()
        for word in CONSTANT_WORDS:
            words.fill(word)
            words[stuck] &= ~1
            errors += int(np.count_nonzero(words != word))
        expected: npt.NDArray[np.int64] = np.arange(self._memory_words, dtype=np.int64)
        words[:] = expected
        words[stuck] &= ~1
        errors += int(np.count_nonzero(words != expected))
        seconds = time.perf_counter() - start
        return MemoryResult.timed(index, words.nbytes, errors, seconds)

    def pcie_links(self) -> tuple[PcieLink, ...]:
        def link(i: int) -> PcieLink:
            if i in self._faults.downtrained:
                return PcieLink(_pci(i), 1, 4, 8, 16)
            return PcieLink(_pci(i), 4, 4, 16, 16)

        return tuple(link(i) for i in range(self._count))

    def allreduce_spec(self) -> AllreduceSpec:
        return AllreduceSpec("gloo", "cpu", ALLREDUCE_SIZES, 1, 3, self._faults.ranks.by_rank())

    def _stuck_offsets(self, index: int) -> npt.NDArray[np.int64]:
        count = self._faults.stuck_words.get(index, 0)
        offsets: npt.NDArray[np.int64] = np.arange(count, dtype=np.int64) * _STUCK_STRIDE + 1
        return offsets[offsets < self._memory_words]


def cpu(devices: int = 2, faults: NumpyFaults | None = None) -> BackendOverride:
    """The click `obj` that runs `loadtest run` on `devices` simulated GPUs."""
    return BackendOverride(NumpyBackend(devices=devices, faults=faults))


def _pci(index: int) -> str:
    return f"0000:{_PCI_BUS_BASE + index:02x}:00.0"
