"""kubectl v1.34.4 for tests that read the cluster as a person does.

Built by ``hack/envtest/build.sh --kubectl`` (``make envtest``) into the same cache directory as
kube-apiserver; ``hack/envtest/build.sh --print-kubectl`` prints its path. A `KUBEBUILDER_ASSETS`
directory that holds a kubectl wins, as for the servers.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.apiserver.kube import ENVTEST_VERSION

HOW_TO_BUILD = "run `make envtest` (or hack/envtest/build.sh --kubectl)"


def find_kubectl(env: Mapping[str, str]) -> Path | None:
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    version = env.get("ENVTEST_VERSION", ENVTEST_VERSION)
    for directory in (
        env.get("KUBEBUILDER_ASSETS", ""),
        str(Path(cache) / "gpu-node-guard" / "envtest" / version),
    ):
        path = Path(directory) / "kubectl" if directory else None
        if path is not None and os.access(path, os.X_OK):
            return path
    return None


def run_kubectl(kubectl: Path, kubeconfig: Path, *args: str) -> str:
    """kubectl's standard output; a non-zero exit fails with its standard error."""
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(kubeconfig.parent)},
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


# The commands of an on-call hint (`next=`, status), up to its "(…)" aside.
HINT_COMMANDS = re.compile(r"kubectl [^()]*[^() ]")


def follow_hint(hint: str, kubectl: Path, kubeconfig: Path) -> str:
    """Run a hint's kubectl commands as a person types them (bash, kubectl on PATH)."""
    (commands,) = HINT_COMMANDS.findall(hint)
    env = {
        "PATH": f"{kubectl.parent}:{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(kubeconfig),
        "HOME": str(kubeconfig.parent),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{commands}: {done.stderr}"
    return commands
