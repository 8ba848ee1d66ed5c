"""nvidia-match: the loaded kernel module and the NVML library must be the same driver version
(after an upgrade without a reboot every new CUDA or NVML process fails). What is read, and why
never nvidia-smi: docs/conformance.md."""

from __future__ import annotations

import re
from dataclasses import dataclass

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import ItemResult, Status, unknown_result
from guard.doors.hostexec import Unknown

NAME = "nvidia-match"
MODULE_VERSION_FILE = "/sys/module/nvidia/version"
# Where distributions and the GPU Operator's driver container put the NVML library.
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
)
SONAME = "libnvidia-ml.so.1"
_VERSIONED = re.compile(r"^libnvidia-ml\.so\.(\d+(?:\.\d+)+)\Z")


@dataclass(frozen=True, slots=True)
class NvidiaFacts:
    module_version: str | Unknown | None  # None: the nvidia module is not loaded
    nvml_version: str | Unknown | None  # None: no libnvidia-ml.so.<version> in LIB_DIRS
    nvml_where: str = ""


def pick_nvml(entries: dict[str, tuple[str, ...]], links: dict[str, str]) -> tuple[str, str] | None:
    """(version, directory) of the library in use: the file ``libnvidia-ml.so.1`` points to, else
    the newest file (ldconfig points the soname at the newest)."""
    for directory, target in links.items():
        name = target.rsplit("/", 1)[-1]
        match = _VERSIONED.match(name)
        if match and name in entries.get(directory, ()):
            return match.group(1), directory
    found = [
        (m.group(1), directory)
        for directory, names in entries.items()
        for m in map(_VERSIONED.match, names)
        if m
    ]
    return max(found, key=lambda vd: tuple(map(int, vd[0].split(".")))) if found else None


def _read_nvml(fs: HostFS) -> tuple[str | None, str]:
    entries: dict[str, tuple[str, ...]] = {}
    links: dict[str, str] = {}
    for directory in LIB_DIRS:
        names = fs.listdir(directory)
        if not names:
            continue
        entries[directory] = names
        link = fs.readlink(f"{directory}/{SONAME}") if SONAME in names else None
        if link:
            links[directory] = link
    return pick_nvml(entries, links) or (None, "")


def read_nvidia(fs: HostFS) -> NvidiaFacts:
    text = guarded(lambda: fs.read_text(MODULE_VERSION_FILE), MODULE_VERSION_FILE)
    module = (text.strip() or None) if isinstance(text, str) else text
    nvml = guarded(lambda: _read_nvml(fs), "the NVML library directories")
    return NvidiaFacts(module, nvml) if isinstance(nvml, Unknown) else NvidiaFacts(module, *nvml)


# Only one of module and library: nothing to compare, and a GPU node in this state runs no GPU work.
def judge_nvidia(facts: NvidiaFacts) -> ItemResult:
    module, nvml = facts.module_version, facts.nvml_version
    if isinstance(module, Unknown):
        return unknown_result(NAME, module)
    if isinstance(nvml, Unknown):
        return unknown_result(NAME, nvml)
    if module is None and nvml is None:
        return ItemResult(NAME, Status.SKIP, "no NVIDIA module and no NVML library: not a GPU node")
    if module is None:
        seen = f"NVML {nvml} in {facts.nvml_where} but the nvidia module is not loaded"
        fix = "on a GPU node: load the driver (reboot) and re-run"
        return ItemResult(NAME, Status.WARN, seen, fix)
    if nvml is None:
        seen = f"nvidia module {module} loaded but no libnvidia-ml.so.<version> found"
        fix = "reinstall the driver's NVML library (libnvidia-compute) of version " + module
        return ItemResult(NAME, Status.WARN, seen, fix)
    if module == nvml:
        return ItemResult(NAME, Status.PASS, f"module {module} = NVML {nvml} ({facts.nvml_where})")
    seen = f"module {module} != NVML {nvml} ({facts.nvml_where}): new CUDA/NVML processes fail"
    fix = "drain GPU work and reboot to load the new driver; then hold the driver packages"
    return ItemResult(NAME, Status.FAIL, seen, fix)
