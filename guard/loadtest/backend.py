"""The compute backend seen by the orchestration: PyTorch CUDA in the Job (`torch_backend.py`).

The tests run the same orchestration (`ranks.py`, gloo on the CPU) on `tests/numpy_backend.py`,
which is not shipped: the admission policy admits only `--backend torch` in a cluster.
"""

from __future__ import annotations

from typing import Protocol

from guard.loadtest.collective import AllreduceSpec
from guard.loadtest.model import BurnResult, DeviceInfo, MemoryResult, PcieLink


class Backend(Protocol):
    """One method per question; each may raise, and the orchestration records the exception."""

    @property
    def name(self) -> str: ...

    def devices(self) -> tuple[DeviceInfo, ...]:
        """Every GPU visible to this process."""
        ...

    def burn(self, index: int, size: int, duration_s: float) -> BurnResult:
        """Square matmuls back to back on GPU `index` for `duration_s` wall seconds."""
        ...

    def memory_test(self, index: int) -> MemoryResult:
        """Write and verify every pattern over most of the free memory of GPU `index`."""
        ...

    def pcie_links(self) -> tuple[PcieLink, ...]:
        """Current and maximum PCIe link of every GPU, keyed by PCI address."""
        ...

    def allreduce_spec(self) -> AllreduceSpec:
        """How this backend's all-reduce ranks run: transport, device, sizes, iterations."""
        ...
