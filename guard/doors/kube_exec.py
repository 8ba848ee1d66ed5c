"""Kubeconfig exec credential plugins, bounded (`aws eks get-token`, `kubelogin`, …).

The client runs a plugin with no timeout and logs its failure instead of raising. `install`
replaces its runner: at most `EXEC_TIMEOUT_S`, no terminal, bounded output, `ExecPluginFailed`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from typing import Any

EXEC_TIMEOUT_S = 30.0
MAX_OUTPUT_BYTES = 1024 * 1024


class ExecPluginFailed(BaseException):
    """A BaseException on purpose: the client's loader catches every Exception of the plugin
    and logs it instead of failing; this one passes through to `guard.doors.kube`."""


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[:limit] + "…"


def _run(args: Any, cwd: Any, env: Any, shell: bool, name: str) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of the plugin: no terminal, at most EXEC_TIMEOUT_S, at most
    MAX_OUTPUT_BYTES of stdout (a plugin that prints without end is stopped, not buffered)."""
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            shell=shell,
        )
    except OSError as exc:
        raise ExecPluginFailed(
            f"exec credential plugin {name} cannot start: {exc.strerror or exc}"
        ) from None
    out, err = bytearray(), bytearray()

    def drain(stream: Any, into: bytearray, limit: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := stream.read1(1 << 16):
                if len(into) <= limit:
                    into += chunk[: limit + 1 - len(into)]

    readers = [
        threading.Thread(target=drain, args=(proc.stdout, out, MAX_OUTPUT_BYTES), daemon=True),
        threading.Thread(target=drain, args=(proc.stderr, err, 64 * 1024), daemon=True),
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + EXEC_TIMEOUT_S
    try:
        while proc.poll() is None and len(out) <= MAX_OUTPUT_BYTES:
            if time.monotonic() > deadline:
                raise ExecPluginFailed(
                    f"exec credential plugin {name} did not answer within {EXEC_TIMEOUT_S:g} s"
                )
            time.sleep(0.02)
        if len(out) > MAX_OUTPUT_BYTES:
            raise ExecPluginFailed(f"exec credential plugin {name} printed over 1 MiB")
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
    return proc.returncode, bytes(out), bytes(err)


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
            returncode, stdout, stderr = _run(self.args, self.cwd, self.env, self.shell, name)
            err = _one_line(stderr.decode("utf-8", errors="replace"))
            if returncode != 0:
                detail = f": {err}" if err else ""
                raise ExecPluginFailed(f"exec credential plugin {name} exited {returncode}{detail}")
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
