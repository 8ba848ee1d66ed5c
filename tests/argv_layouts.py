"""The argv layouts of guard/generate/policies/argv.py checked in Python, so the planners' tests
prove that every argv they build is one the admission policy admits."""

from __future__ import annotations

import re
from collections.abc import Sequence

from guard.generate.policies.argv import Layout, Repeat


def matches(layouts: Sequence[Layout], argv: Sequence[str], node: str) -> bool:
    """The admission policy's argv check (guard/generate/policies/argv.py) in Python.

    >>> from guard.generate.policies.argv import loadtest
    >>> base = ["gpu-node-guard", "loadtest", "run", "--backend", "torch", "--expected-gpus", "8",
    ...     "--duration-s", "90", "--size", "8192", "--min-ratio", "0.8", "--allreduce",
    ...     "--allreduce-min-ratio", "0.7", "--allreduce-timeout-s", "60"]
    >>> matches(loadtest(), base, "gpu-a")
    True
    >>> matches(loadtest(), [*base, "--expect-link", "0000:18:00.0=16GT/s,x16"], "gpu-a")
    True
    >>> matches(loadtest(), [*base, "--expect-link"], "gpu-a")
    False
    """
    return any(_one(layout, argv, node) for layout in layouts)


def _one(layout: Layout, argv: Sequence[str], node: str) -> bool:
    tail = layout[-1] if layout and isinstance(layout[-1], Repeat) else None
    if tail is not None:
        fixed, rest = layout[:-1], argv[len(layout) - 1 :]
        width = len(tail.group)
        if len(argv) < len(fixed) or len(rest) % width or len(rest) > width * tail.most:
            return False
        return _one(fixed, argv[: len(fixed)], node) and _one(
            tail.group * (len(rest) // width), rest, node
        )
    if len(layout) != len(argv):
        return False
    for token, arg in zip(layout, argv, strict=True):
        if isinstance(token, Repeat):
            return False
        if isinstance(token, str):
            if arg != token:
                return False
        elif not re.fullmatch(token.pattern[1:-1], arg) or (token.is_node and arg != node):
            return False
    return True
