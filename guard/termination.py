"""The termination message a guard Job's program leaves for the guard (docs/lifecycle.md,
"Job results"): written only into a file the kubelet already created."""

from __future__ import annotations

import os

TERMINATION_LOG = "/dev/termination-log"


def write_termination_message(path: str, text: str) -> str | None:
    """Write `text` to a termination message file that already exists (kubelet creates it in the
    container); never create one, so a run by hand on a host writes nothing there. Returns a
    one-line note when an existing file cannot be written, None otherwise."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"termination message not written to {path}: {exc.strerror or exc}"
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return None
