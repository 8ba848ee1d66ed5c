"""The Kubernetes door's typed errors, made from an answer or a socket error."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from guard import files


class KubeError(Exception):
    """An API call failed; the message is one line."""


class Conflict(KubeError):
    """409: the object changed since it was read."""


class AlreadyExists(Conflict):
    """409 on create: an object of that name exists."""


class NotFound(KubeError):
    pass


class Refused(KubeError):
    """The API refused the request for good (admission, validation, RBAC): retrying won't help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Forbidden(Refused):
    """403; `by_admission`: an admission check's verdict, not the authorizer's."""

    def __init__(self, message: str, status: int, by_admission: bool = False) -> None:
        super().__init__(message, status)
        self.by_admission = by_admission


class Unavailable(KubeError):
    """The API server stayed unreachable or overloaded until the cycle's deadline."""


def decode(what: str, content: bytes) -> dict[str, Any]:
    if not content:
        return {}
    try:
        decoded = json.loads(content)
    except ValueError:
        snippet = content[:60].decode("utf-8", "replace").replace("\n", " ")
        raise KubeError(
            f"{what}: the answer is not JSON ({len(content)} bytes: {snippet!r})"
        ) from None
    if not isinstance(decoded, dict):
        raise KubeError(f"{what}: the answer is not a JSON object")
    return decoded


def _status(content: bytes) -> tuple[str, str]:
    """(reason, message) of a `Status` answer; empty when the body is not one."""
    try:
        found = json.loads(content or b"{}")
    except ValueError:
        return "", ""
    if not isinstance(found, dict):
        return "", ""
    return str(found.get("reason") or ""), str(found.get("message") or "")


def status_text(code: int, reason: str, content: bytes) -> str:
    message = _status(content)[1]
    return f"HTTP {code} {reason}" + (f": {first_line(message)}" if message else "")


def typed(what: str, code: int, reason: str, content: bytes) -> KubeError:
    text = f"{what}: {status_text(code, reason, content)}"
    if code == 409:
        exists = _status(content)[0] == "AlreadyExists"
        return AlreadyExists(text) if exists else Conflict(text)
    if code == 404:
        return NotFound(text)
    if code == 403:
        # "admission webhook "x" denied the request: …", "ValidatingAdmissionPolicy 'p' with
        # binding 'b' denied request: …"; RBAC's own says "cannot <verb> resource …".
        message = _status(content)[1]
        admission = any(w in message for w in ("denied the request", "denied request"))
        return Forbidden(text, code, admission)
    return Refused(text, code)


def socket_reason(exc: Exception, line: Callable[[object], str] | None = None) -> str:
    """The OS's words under urllib3's wrapping, else `line` (default `first_line`) of the error."""
    text = str(exc)
    found = re.search(r"\[Errno -?\d+\][^'\")]*", text)
    return found[0].strip() if found else (line or first_line)(text)


first_line = functools.partial(files.first_line, limit=400)  # of an API answer or error
