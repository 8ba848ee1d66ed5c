"""PyTorch CUDA backend, used inside the load-test Job; torch and pynvml are imported lazily.
Burn, memory test and PCIe links (NVML, else nvidia-smi) as in docs/loadtest.md."""

from __future__ import annotations

import time
from typing import Any

from guard.doors import hostexec
from guard.loadtest.collective import AllreduceSpec
from guard.loadtest.model import CONSTANT_WORDS, BurnResult, DeviceInfo, MemoryResult, PcieLink
from guard.pci import PciAddressError, normalize_pci

_WARMUP_ITERATIONS = 10
_BATCH = 20  # matmuls enqueued between checks of the wall clock
_MEMORY_FRACTION = 0.9  # of free memory; the rest leaves room for the verify temporaries
_CHUNK_WORDS = 1 << 27  # 1 GiB of int64 per allocation
_BLOCK_WORDS = 1 << 24  # 128 MiB slices for the address pattern and its check
# NCCL all-reduce sizes: latency-bound, middle, and bandwidth-bound (the per-GPU pairs use it).
ALLREDUCE_SIZES = (8 << 20, 64 << 20, 256 << 20)
_ALLREDUCE_WARMUP = 5
_ALLREDUCE_ITERATIONS = 20
_SMI_TIMEOUT_S = 20.0

SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max",
    "--format=csv,noheader,nounits",
)


class TorchBackend:
    name = "torch"

    def devices(self) -> tuple[DeviceInfo, ...]:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to PyTorch")
        return tuple(_device(torch, i) for i in range(torch.cuda.device_count()))

    def burn(self, index: int, size: int, duration_s: float) -> BurnResult:
        import torch

        with torch.cuda.device(index):
            a = torch.randn(size, size, device="cuda", dtype=torch.float16)
            b = torch.randn(size, size, device="cuda", dtype=torch.float16)
            c = torch.empty(size, size, device="cuda", dtype=torch.float16)
            for _ in range(_WARMUP_ITERATIONS):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            iterations = _burn_loop(torch, a, b, c, duration_s)
            end.record()
            end.synchronize()
            if not bool(torch.isfinite(c).all().item()):
                raise ArithmeticError("matmul result is not finite")
            device_s = start.elapsed_time(end) / 1000.0
        return BurnResult.timed(index, size, iterations, device_s)

    def memory_test(self, index: int) -> MemoryResult:
        import torch

        with torch.cuda.device(index):
            torch.cuda.empty_cache()
            free, _total = torch.cuda.mem_get_info()
            chunks = _allocate(torch, int(free * _MEMORY_FRACTION))
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            errors = _constant_passes(torch, chunks) + _address_pass(torch, chunks)
            end.record()
            found = int(errors.item())  # the one host sync of the test
            seconds = start.elapsed_time(end) / 1000.0
            tested = sum(int(c.numel()) * 8 for c in chunks)
            del chunks
            torch.cuda.empty_cache()
        return MemoryResult.timed(index, tested, found, seconds)

    def pcie_links(self) -> tuple[PcieLink, ...]:
        return read_links(_SMI_TIMEOUT_S)

    def allreduce_spec(self) -> AllreduceSpec:
        return AllreduceSpec(
            "nccl", "cuda", ALLREDUCE_SIZES, _ALLREDUCE_WARMUP, _ALLREDUCE_ITERATIONS
        )


def _device(torch: Any, index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    domain = getattr(props, "pci_domain_id", None)
    bus = getattr(props, "pci_bus_id", None)
    dev = getattr(props, "pci_device_id", None)  # the device number on the bus, not a PCI ID
    pci = "unknown" if None in (domain, bus, dev) else f"{domain:04x}:{bus:02x}:{dev:02x}.0"
    uuid = getattr(props, "uuid", None)
    return DeviceInfo(index, pci, str(props.name), f"GPU-{uuid}" if uuid is not None else "")


def _burn_loop(torch: Any, a: Any, b: Any, c: Any, duration_s: float) -> int:
    iterations = 0
    queued = None
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        for _ in range(_BATCH):
            torch.matmul(a, b, out=c)
        iterations += _BATCH
        marker = torch.cuda.Event()
        marker.record()
        if queued is not None:
            queued.synchronize()
        queued = marker
    return iterations


def _allocate(torch: Any, budget_bytes: int) -> list[Any]:
    chunks: list[Any] = []
    left = budget_bytes // 8
    while left > 0:
        words = min(_CHUNK_WORDS, left)
        try:
            chunks.append(torch.empty(words, dtype=torch.int64, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            break  # another process took memory meanwhile: test what we hold
        left -= words
    return chunks


def _constant_passes(torch: Any, chunks: list[Any]) -> Any:
    errors = torch.zeros((), dtype=torch.int64, device="cuda")
    for value in CONSTANT_WORDS:
        for chunk in chunks:
            chunk.fill_(value)
        for chunk in chunks:
            errors += torch.ne(chunk, value).sum()
    return errors


def _address_pass(torch: Any, chunks: list[Any]) -> Any:
    errors = torch.zeros((), dtype=torch.int64, device="cuda")
    ramp = torch.arange(_BLOCK_WORDS, dtype=torch.int64, device="cuda")
    for verify in (False, True):
        base = 0
        for chunk in chunks:
            for offset in range(0, int(chunk.numel()), _BLOCK_WORDS):
                block = chunk[offset : offset + _BLOCK_WORDS]
                expected = ramp[: block.numel()] + (base + offset)
                if verify:
                    errors += torch.ne(block, expected).sum()
                else:
                    block.copy_(expected)
            base += int(chunk.numel())
    return errors


def read_links(smi_timeout_s: float) -> tuple[PcieLink, ...]:
    """Links of every GPU this process can see; raises RuntimeError when neither source works."""
    try:
        return _nvml_links()
    except Exception as nvml_exc:  # ImportError, or NVMLError when the library is not mounted
        try:
            return smi_links(smi_timeout_s)
        except Exception as smi_exc:
            raise RuntimeError(f"NVML: {nvml_exc}; nvidia-smi: {smi_exc}") from smi_exc


def parse_smi(text: str) -> tuple[PcieLink, ...]:
    """Parse ``nvidia-smi --query-gpu=<SMI_QUERY fields> --format=csv,noheader,nounits``."""
    links = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 5:
            raise ValueError(f"nvidia-smi line has {len(cells)} fields, want 5: {line!r}")
        try:
            pci = normalize_pci(cells[0])
        except PciAddressError as exc:
            raise ValueError(f"nvidia-smi line: {exc}") from exc
        counts = (int(cell) if cell.isdigit() else None for cell in cells[1:])  # "[N/A]"
        links.append(PcieLink(pci, *counts))
    return tuple(links)


def smi_links(timeout_s: float) -> tuple[PcieLink, ...]:
    """Ask nvidia-smi (inside the container, no nsenter); RuntimeError with one line on failure.
    Through `guard.doors.hostexec`: one stuck on a dead GPU is killed with its children."""
    outcome = hostexec.run(SMI_QUERY, timeout_s)
    if isinstance(outcome, hostexec.NotStarted):
        raise RuntimeError(f"cannot start nvidia-smi: {outcome.strerror}")
    if isinstance(outcome, hostexec.TimedOut):
        raise RuntimeError(f"nvidia-smi timed out after {timeout_s:g}s")
    if outcome.returncode != 0:
        detail = (outcome.stderr or outcome.stdout).strip().splitlines()
        raise RuntimeError(f"exit {outcome.returncode}: {detail[0] if detail else ''}".strip())
    return parse_smi(outcome.stdout)


def _nvml_links() -> tuple[PcieLink, ...]:
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        return tuple(_nvml_link(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count))
    finally:
        pynvml.nvmlShutdown()


def _nvml_link(nvml: Any, handle: Any) -> PcieLink:
    bus_id = nvml.nvmlDeviceGetPciInfo(handle).busId
    if isinstance(bus_id, bytes):  # older nvidia-ml-py releases return bytes
        bus_id = bus_id.decode()
    return PcieLink(
        normalize_pci(str(bus_id)),
        int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
    )
