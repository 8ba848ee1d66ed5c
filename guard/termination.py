"""The termination message a guard Job's program leaves for the guard (docs/lifecycle.md,
"Job results"): written only into a file the kubelet already created, and read back as one JSON
object (`summary_doc`: the checks every summary's parser starts with)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

TERMINATION_LOG = "/dev/termination-log"


def write_termination_message(path: str, text: str) -> str | None:
    """Write `text` to a termination message file that already exists (kubelet creates it in the
    container); never create one, so a run by hand on a host writes nothing there. Returns a
    one-line note when an existing file cannot be written, None otherwise."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        # No file in an existing directory: a run by hand, write nothing. No directory either:
        # a path typed wrong, worth one line.
        parent = os.path.dirname(path) or "."
        return None if os.path.isdir(parent) else _note(path, exc)
    except OSError as exc:
        return _note(path, exc)
    try:  # a full disk (ENOSPC, /dev/full) shows at the write or the close
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
    except OSError as exc:
        return _note(path, exc)
    return None


def _note(path: str, exc: OSError) -> str:
    """The one WARN line of a termination message not written; the verdict does not change."""
    return (
        f"WARN termination message not written to {path!r}: {exc.strerror or exc}"
        " (the verdict and exit code stand)"
    )


def summary_doc(
    text: str, schema: str | None, *, program: str, name: str, error: type[ValueError]
) -> Mapping[str, Any]:
    """The JSON object `program` left in its termination message. `error` with one line when the
    message is empty (the program did not finish), is not JSON or, given a `schema`, is not an
    object of that schema; `name` names the summary in that line. Without a schema, a document
    that is not an object reads as an empty one: the caller's own checks say what is missing.

    >>> summary_doc('{"schema": "s/v1"}', "s/v1", program="p", name="s", error=ValueError)
    {'schema': 's/v1'}
    >>> summary_doc("", None, program="the load test", name="load-test summary", error=ValueError)
    Traceback (most recent call last):
    ...
    ValueError: empty termination message: the load test did not finish
    >>> summary_doc("[1]", "s/v1", program="p", name="the summary", error=ValueError)
    Traceback (most recent call last):
    ...
    ValueError: the summary schema is 'list', not 's/v1'
    """
    if not text.strip():
        raise error(f"empty termination message: {program} did not finish")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{name} is not JSON: {exc}") from None
    if schema is None:
        return doc if isinstance(doc, Mapping) else {}
    if not isinstance(doc, Mapping) or doc.get("schema") != schema:
        got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise error(f"{name} schema is {got!r}, not {schema!r}")
    return doc
