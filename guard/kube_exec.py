"""Kubeconfig exec credential plugins, bounded (`aws eks get-token`, `kubelogin`, …).

The kubernetes client runs a plugin with no timeout (one that never answers makes `run` and
`status` wait forever) and, when it fails, logs its stderr through the root logger
(``ERROR:root:…``) and goes on without credentials. `install` replaces the client's runner with
one that waits at most `EXEC_TIMEOUT_S`, gives the plugin no terminal, bounds its output, and
raises `ExecPluginFailed` with one line, which `guard.kube` turns into a `KubeError`.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

EXEC_TIMEOUT_S = 30.0
MAX_OUTPUT_BYTES = 1024 * 1024


class ExecPluginFailed(BaseException):
    """A BaseException on purpose: the client's loader catches every Exception of the plugin
    and logs it instead of failing; this one passes through to `guard.kube`."""


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[:limit] + "…"


def install() -> None:
    """Replace the client's exec runner (idempotent)."""
    from kubernetes.config import exec_provider, kube_config

    if getattr(kube_config.ExecProvider, "bounded", False):
        return

    class BoundedExecProvider(exec_provider.ExecProvider):  # type: ignore[misc]
        bounded = True

        def run(self, previous_response: Any = None) -> Any:
            info: dict[str, Any] = {
                "apiVersion": self.api_version,
                "kind": "ExecCredential",
                "spec": {"interactive": False},
            }
            if self.cluster:
                info["spec"]["cluster"] = self.cluster.value
            self.env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
            name = str(self.args[0]) if self.args else "?"
            try:
                done = subprocess.run(
                    self.args, stdin=subprocess.DEVNULL, capture_output=True, cwd=self.cwd,
                    env=self.env, shell=self.shell, timeout=EXEC_TIMEOUT_S, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise ExecPluginFailed(
                    f"exec credential plugin {name} did not answer within {EXEC_TIMEOUT_S:g} s"
                ) from None
            except OSError as exc:
                raise ExecPluginFailed(
                    f"exec credential plugin {name} cannot start: {exc.strerror or exc}"
                ) from None
            err = _one_line(done.stderr.decode("utf-8", errors="replace"))
            if done.returncode != 0:
                detail = f": {err}" if err else ""
                raise ExecPluginFailed(
                    f"exec credential plugin {name} exited {done.returncode}{detail}"
                )
            if len(done.stdout) > MAX_OUTPUT_BYTES:
                raise ExecPluginFailed(f"exec credential plugin {name} printed over 1 MiB")
            try:
                data = json.loads(done.stdout)
            except ValueError:
                raise ExecPluginFailed(
                    f"exec credential plugin {name} printed no ExecCredential JSON"
                ) from None
            if not isinstance(data, dict) or not isinstance(data.get("status"), dict):
                raise ExecPluginFailed(f"exec credential plugin {name}: no status in its answer")
            if data.get("apiVersion") != self.api_version:
                raise ExecPluginFailed(
                    f"exec credential plugin {name} answered apiVersion "
                    f"{data.get('apiVersion')!r}, not {self.api_version!r}"
                )
            return data["status"]

    kube_config.ExecProvider = BoundedExecProvider
