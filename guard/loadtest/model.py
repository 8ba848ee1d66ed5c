"""Plain values of one load test: what was asked, what each GPU did, and the accounting, the same
on every backend (``2·n³`` operations per square matmul, bytes moved per memory pass)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from guard.files import first_line
from guard.loadtest.collective import AllreduceResult, AllreduceSpec
from guard.pci import LINK_SPEEDS, LINK_WIDTHS, PciAddressError, normalize_pci

# 64-bit words written over the whole test area, each verified before the next: all zeros, all
# ones, 1010…, 0101… (every bit both ways), as int64 (what array libraries use); a last pass
# writes each word's own index (address-line faults).
_PATTERNS = (0, 0xFFFF_FFFF_FFFF_FFFF, 0xAAAA_AAAA_AAAA_AAAA, 0x5555_5555_5555_5555)
CONSTANT_WORDS: tuple[int, ...] = tuple(w - (1 << 64) if w >= 1 << 63 else w for w in _PATTERNS)
MEMORY_PASSES = len(CONSTANT_WORDS) + 1


def matmul_flops(size: int) -> float:
    """Floating-point operations of one ``size × size`` by ``size × size`` matmul."""
    return 2.0 * float(size) ** 3


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One visible GPU: its index in this process, sysfs-form PCI address, name and UUID."""

    index: int
    pci: str
    name: str
    uuid: str


@dataclass(frozen=True, slots=True)
class BurnResult:
    """Matmuls finished on one GPU and the device-timed seconds they took."""

    index: int
    iterations: int
    device_s: float
    flops_per_iteration: float
    error: str | None = None

    @property
    def has_run(self) -> bool:
        return self.error is None and self.iterations > 0 and self.device_s > 0

    @property
    def tflops(self) -> float:
        if not self.has_run:
            return 0.0
        return self.flops_per_iteration * self.iterations / self.device_s / 1e12

    @classmethod
    def timed(cls, index: int, size: int, iterations: int, device_s: float) -> BurnResult:
        return cls(index, iterations, device_s, matmul_flops(size))


@dataclass(frozen=True, slots=True)
class MemoryResult:
    """Pattern test of one GPU: bytes covered by every pattern, mismatched words, speed."""

    index: int
    bytes_tested: int
    errors: int
    gbps: float
    error: str | None = None

    @classmethod
    def timed(cls, index: int, bytes_tested: int, errors: int, seconds: float) -> MemoryResult:
        """GB/s (10⁹) of every byte written and read back over all passes."""
        gbps = bytes_tested * MEMORY_PASSES * 2 / seconds / 1e9 if seconds > 0 else 0.0
        return cls(index, bytes_tested, errors, gbps)


@dataclass(frozen=True, slots=True)
class PcieLink:
    """PCIe link of one GPU, sampled under load (an idle link trains down to save power)."""

    pci: str
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None

    @property
    def is_below_max(self) -> bool:
        pairs = ((self.gen_current, self.gen_max), (self.width_current, self.width_max))
        return any(cur is not None and top is not None and cur < top for cur, top in pairs)


@dataclass(frozen=True, slots=True)
class ExpectedLink:
    """The link a GPU had when its node was cordoned (`--expect-link`); it must not be lower now."""

    pci: str
    gen: int
    width: int


GEN_SPEED = dict(enumerate(LINK_SPEEDS, start=1))  # generation -> GT/s
_SPEED_GEN = {float(speed): gen for gen, speed in GEN_SPEED.items()}
_EXPECTED = re.compile(r"^(?P<pci>[^=\s]+)=(?P<speed>[0-9]+(?:\.[0-9]+)?)GT/s,x(?P<width>[0-9]+)\Z")


def parse_expected_link(text: str) -> ExpectedLink:
    """``<PCI address>=<speed>GT/s,x<width>``, the address in any spelling; ValueError otherwise."""
    match = _EXPECTED.match(text.strip())
    if match is None:
        example = "0000:99:00.0=16GT/s,x16"
        raise ValueError(f"{text!r} is not <pci>=<speed>GT/s,x<width>, e.g. {example}")
    try:
        pci = normalize_pci(match["pci"])
    except PciAddressError as exc:
        raise ValueError(str(exc)) from None
    gen = _SPEED_GEN.get(float(match["speed"]))
    if gen is None:
        speeds = ", ".join(f"{s}GT/s" for s in GEN_SPEED.values())
        raise ValueError(f"{match['speed']}GT/s is no PCIe speed; one of {speeds}")
    width = int(match["width"])
    if width not in LINK_WIDTHS:
        widths = ", ".join(map(str, LINK_WIDTHS))
        raise ValueError(f"x{width} is no PCIe link width; one of {widths}")
    return ExpectedLink(pci, gen, width)


def link_text(gen: int | None, width: int | None) -> str:
    """The `--expect-link` spelling of a link; ``?`` for a value that could not be read."""
    speed = "?" if gen is None else GEN_SPEED.get(gen, f"gen{gen}")
    return f"{speed}GT/s,x{'?' if width is None else width}"


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Whether the memory pattern test runs, and on which GPU (`pci`; None: every GPU)."""

    required: bool
    pci: str | None = None


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What to run; `*_timeout_s` bound the wait for a GPU whose thread never returns, except
    `allreduce_timeout_s`, the all-reduce's step limit (`AllreducePlan`; None: not run)."""

    size: int
    duration_s: float
    memory: MemoryPlan
    burn_timeout_s: float
    memory_timeout_s: float
    allreduce_timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything the run observed; missing entries mean a GPU never answered."""

    backend: str
    plan: RunPlan
    devices: tuple[DeviceInfo, ...]
    burns: tuple[BurnResult, ...]
    memory: tuple[MemoryResult, ...] = ()
    pcie: tuple[PcieLink, ...] = ()
    backend_error: str | None = None
    pcie_error: str | None = None
    allreduce: AllreduceResult | None = None
    allreduce_skipped: str | None = None  # why a planned all-reduce did not run
    dev_shm_bytes: int | None = None  # size of /dev/shm where NCCL ranks ran (None: unknown)


def memory_targets(devices: tuple[DeviceInfo, ...], plan: MemoryPlan) -> tuple[DeviceInfo, ...]:
    """The GPUs the memory test must cover: none, the one at `plan.pci`, or all of them."""
    if not plan.required:
        return ()
    if plan.pci is None:
        return devices
    return tuple(d for d in devices if d.pci == plan.pci)


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one short line for the report (CUDA errors span several lines)."""
    first = first_line(exc, blank="")
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:limit]


# PyTorch CUDA in the Job (`torch_backend.py`); the tests' `tests/numpy_backend.py` is not shipped
# (the admission policy admits only `--backend torch`). A raising method is recorded, not fatal.
class Backend(Protocol):
    @property
    def name(self) -> str: ...

    def devices(self) -> tuple[DeviceInfo, ...]: ...

    # Square matmuls back to back for `duration_s` wall seconds.
    def burn(self, index: int, size: int, duration_s: float) -> BurnResult: ...

    # Every pattern over most of the GPU's free memory.
    def memory_test(self, index: int) -> MemoryResult: ...

    def pcie_links(self) -> tuple[PcieLink, ...]: ...

    def allreduce_spec(self) -> AllreduceSpec: ...
