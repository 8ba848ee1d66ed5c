"""Kubeconfig exec credential plugins (`aws eks get-token`, …), bounded: the client runs one with
no timeout and logs its failure; `install` replaces its runner with one that raises.
"""

from __future__ import annotations

import json
from typing import Any

from guard.doors.hostexec import NotStarted, TimedOut, run

EXEC_TIMEOUT_S = 30.0
MAX_OUTPUT_BYTES = 1024 * 1024


class ExecPluginFailed(BaseException):
    """Not an Exception: the client's loader logs those instead of failing."""


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[:limit] + "…"


def _stdout(args: Any, cwd: Any, env: Any, shell: bool, name: str) -> str:
    """The plugin's stdout once it exits 0: no terminal, at most EXEC_TIMEOUT_S, at most
    MAX_OUTPUT_BYTES (stopped, not buffered)."""
    done = run(args, EXEC_TIMEOUT_S, stop_over=MAX_OUTPUT_BYTES, cwd=cwd, env=env, shell=shell)
    if isinstance(done, NotStarted):
        raise ExecPluginFailed(f"exec credential plugin {name} cannot start: {done.strerror}")
    if isinstance(done, TimedOut):
        raise ExecPluginFailed(
            f"exec credential plugin {name} did not answer within {EXEC_TIMEOUT_S:g} s"
        )
    if done.dropped:
        raise ExecPluginFailed(f"exec credential plugin {name} printed over 1 MiB")
    if done.returncode != 0:
        err = _one_line(done.stderr)
        detail = f": {err}" if err else ""
        raise ExecPluginFailed(f"exec credential plugin {name} exited {done.returncode}{detail}")
    return done.stdout


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
            stdout = _stdout(self.args, self.cwd, self.env, self.shell, name)
            try:
                data = json.loads(stdout)
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
