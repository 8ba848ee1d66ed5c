"""Python source parsed for the tests that read the tree (layers, size, docs references)."""

from __future__ import annotations

import ast


def parse(text: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, tried once more on CPython 3.11's spurious "AST constructor recursion depth
    mismatch" SystemError (python/cpython#106905, fixed in 3.11.8): a garbage collection during
    the parse that imports a module (pytest's assertion rewriting parses it) corrupts the
    parser's depth count for that one call; a second parse of the same text succeeds."""
    try:
        return ast.parse(text, filename)
    except SystemError:
        return ast.parse(text, filename)
