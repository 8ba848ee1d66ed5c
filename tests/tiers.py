"""Skip a tier whose real server is missing — except under CI=true, where that is a failure."""

from __future__ import annotations

import os
import shutil

import pytest


def unavailable(tier: str, reason: str, how: str) -> None:
    message = f"{tier} tier skipped: {reason}; {how}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{tier} tier required under CI=true: {reason}", pytrace=False)
    pytest.skip(message)


def require_engine(engine: str) -> None:
    """The one skip of the prometheus tier: `engine`'s binaries, or skip (fail under CI=true)."""
    from tests.engines import PrometheusUnavailable, binaries

    try:
        binaries(engine)  # type: ignore[arg-type]
    except PrometheusUnavailable as exc:
        unavailable(f"prometheus ({engine})", str(exc), exc.how)


def tool(name: str, tier: str, how: str) -> str:
    """The path of a binary a tier needs, or `unavailable` (skip; fail under CI=true)."""
    path = shutil.which(name)
    if path is None:
        unavailable(tier, f"{name} not found", how)
        raise AssertionError("unreachable: unavailable() skips or fails")
    return path
