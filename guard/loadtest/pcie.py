"""PCIe link generation and width per GPU: NVML (nvidia-ml-py) when importable, else nvidia-smi.

"Max" is what NVML and nvidia-smi call the maximum possible with this GPU *and system*, so a gen4
slot under a gen5 card is not reported as degraded. Read while the GPUs are busy: an idle link
trains down to a lower generation to save power.
"""

from __future__ import annotations

import re
from typing import Any

from guard.doors import hostexec
from guard.loadtest.model import ExpectedLink, PcieLink
from guard.pci import LINK_SPEEDS, LINK_WIDTHS, PciAddressError, normalize_pci

SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max",
    "--format=csv,noheader,nounits",
)


GEN_SPEED = dict(enumerate(LINK_SPEEDS, start=1))  # generation -> GT/s
_SPEED_GEN = {float(speed): gen for gen, speed in GEN_SPEED.items()}
_EXPECTED = re.compile(r"^(?P<pci>[^=\s]+)=(?P<speed>[0-9]+(?:\.[0-9]+)?)GT/s,x(?P<width>[0-9]+)\Z")


def parse_expected_link(text: str) -> ExpectedLink:
    """``<PCI address>=<speed>GT/s,x<width>``, the address in any spelling; ValueError otherwise.

    >>> parse_expected_link("00000000:99:00.0=16GT/s,x16")
    ExpectedLink(pci='0000:99:00.0', gen=4, width=16)
    >>> parse_expected_link("0000:18:00=2.5GT/s,x8")
    ExpectedLink(pci='0000:18:00.0', gen=1, width=8)
    """
    match = _EXPECTED.match(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not <pci>=<speed>GT/s,x<width>, e.g. 0000:99:00.0=16GT/s,x16"
        )
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
        raise ValueError(
            f"x{width} is no PCIe link width; one of {', '.join(map(str, LINK_WIDTHS))}"
        )
    return ExpectedLink(pci, gen, width)


def link_text(gen: int | None, width: int | None) -> str:
    """The `--expect-link` spelling of a link; ``?`` for a value that could not be read.

    >>> link_text(4, 16), link_text(None, 8)
    ('16GT/s,x16', '?GT/s,x8')
    """
    speed = "?" if gen is None else GEN_SPEED.get(gen, f"gen{gen}")
    return f"{speed}GT/s,x{'?' if width is None else width}"


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

    Through `guard.doors.hostexec`, so an nvidia-smi stuck on a dead GPU is killed with its children
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
