"""The engine versions the tests look for are the ones hack/engines/build.sh builds."""

from __future__ import annotations

import re
from pathlib import Path

from tests import engines

BUILD = Path(__file__).resolve().parents[2] / "hack" / "engines" / "build.sh"


def default(name: str) -> str:
    found = re.search(rf'^{name}="\$\{{{name}:-([^}}]+)\}}"$', BUILD.read_text(), re.MULTILINE)
    assert found, f"{name} default not found in {BUILD}"
    return found.group(1)


def test_versions_agree_with_the_build_script():
    assert default("PROM3_VERSION") == engines.PROM3_VERSION
    assert default("THANOS_VERSION") == engines.THANOS_VERSION


def test_cache_paths_follow_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert engines.prom3_dir() == tmp_path / "gpu-node-guard/engines/prometheus" / default(
        "PROM3_VERSION"
    )
    assert engines.thanos_dir() == tmp_path / "gpu-node-guard/engines/thanos" / default(
        "THANOS_VERSION"
    )
