"""The machine a benchmark ran on, in the words `nproc`, `free -g` and the binaries use."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        return f"unavailable ({exc.strerror})"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def describe() -> list[tuple[str, str]]:
    free = _first_line(
        ["sh", "-c", 'free -g | awk \'/^Mem:/ {print $2 " GiB total, " $7 " GiB available"}\'']
    )
    rows = [
        ("nproc", _first_line(["nproc"])),
        ("memory (free -g)", free),
        ("CPU", cpu_model()),
        ("kernel", platform.release()),
        ("Python", platform.python_version()),
        ("Prometheus", _first_line(["prometheus", "--version"])),
        ("guard revision", _revision()),
    ]
    apiserver = _apiserver_binary()
    if apiserver:
        rows.append(("kube-apiserver", _first_line([apiserver, "--version"])))
    return rows


def _revision() -> str:
    """The commit measured, and whether what it runs (guard/, jobs/, bench/) differed from it."""
    commit = _first_line(["git", "rev-parse", "--short", "HEAD"])
    changed = _first_line(["git", "status", "--porcelain", "--", "guard", "jobs", "bench"])
    return commit + (" + uncommitted changes" if changed != "unknown" else "")


def _apiserver_binary() -> str:
    try:
        from tests.apiserver.kube import assets_dir
    except ImportError:
        return ""
    found = assets_dir(os.environ)
    binary = found / "kube-apiserver" if found else None
    return str(binary) if binary and shutil.which(str(binary)) else ""
