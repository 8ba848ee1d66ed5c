"""PCIe link generation and width per GPU: NVML (nvidia-ml-py) when importable, else nvidia-smi.

"Max" is what NVML and nvidia-smi call the maximum possible with this GPU *and system*, so a gen4
slot under a gen5 card is not reported as degraded. Read while the GPUs are busy: an idle link
trains down to a lower generation to save power.
"""

from __future__ import annotations

from typing import Any

from guard import hostexec
from guard.loadtest.model import PcieLink
from guard.pci import PciAddressError, normalize_pci

SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max",
    "--format=csv,noheader,nounits",
)


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
    """Parse ``nvidia-smi --query-gpu=<SMI_QUERY fields> --format=csv,noheader,nounits``.

    >>> parse_smi("00000000:18:00.0, 5, 5, 16, 16\\n00000000:2A:00.0, 1, 5, 8, 16\\n")[1]
    PcieLink(pci='0000:2a:00.0', gen_current=1, gen_max=5, width_current=8, width_max=16)
    >>> parse_smi("00000000:18:00.0, [N/A], 5, 16, 16")[0].gen_current is None
    True
    """
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
        gen_cur, gen_max, width_cur, width_max = (_count(cell) for cell in cells[1:])
        links.append(PcieLink(pci, gen_cur, gen_max, width_cur, width_max))
    return tuple(links)


def _count(cell: str) -> int | None:
    return int(cell) if cell.isdigit() else None  # "[N/A]", "[Not Supported]"


def smi_links(timeout_s: float) -> tuple[PcieLink, ...]:
    """Ask nvidia-smi (inside the container, no nsenter); RuntimeError with one line on failure.

    Through `guard.hostexec`, so an nvidia-smi stuck on a dead GPU is killed with its children
    and the wait ends, instead of blocking the load test after the timeout.
    """
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
