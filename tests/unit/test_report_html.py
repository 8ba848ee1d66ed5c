"""The report's HTML page rendered by headless Chromium (Debian's `chromium`) to a PNG.

The page is the write-up fixture's (tests/fixtures/writeup-episodes.yaml), written by the command
itself. Chromium's own DOM (``--dump-dom``) must hold every part by its id — a row per node, a bar
per isolation with its verdict, the legend, the weekly bars, the repeat-card table — and its
screenshot must show the verdicts' colours (the bars and the legend were painted, not just
parsed). The PNG and the page stay in $GUARD_TEST_ARTIFACTS (default build/test-artifacts).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from guard.cli import cli
from guard.report.html import COLOURS, FAULTED, HEALTHY
from guard.xid_tables import Repair
from tests.tiers import tool

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "writeup-episodes.yaml"
ARGS = ["--at", "2026-10-18T05:22:00Z", "--since", "2026-08-01T00:00:00Z"]


def artifacts() -> Path:
    out = Path(os.environ.get("GUARD_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    exe = tool("chromium", "report HTML", "apt-get install chromium (make system-deps)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    # No network: a page that fetched anything would fail to load it here, and show it.
    flags += ["--no-proxy-server", "--proxy-server=127.0.0.1:9", "--window-size=1000,900"]
    return subprocess.run(
        [exe, *flags, *args], capture_output=True, text=True, timeout=120, check=True
    )


def pixels(png: bytes) -> list[tuple[int, int, int]]:
    """Every pixel of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        prev = line
    return [tuple(r[x : x + 3]) for r in rows for x in range(0, stride, channels)]  # type: ignore[misc]


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def page() -> Path:
    out = artifacts() / "report.html"
    result = CliRunner().invoke(
        cli, ["report", "--cluster-snapshot", str(FIXTURE), *ARGS, "--html", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_the_page_is_self_contained(page: Path) -> None:
    text = page.read_text()
    assert not re.search(r"<script|https?://(?!www\.w3\.org/2000/svg)|@import|url\(", text)


def test_chromium_sees_every_part(page: Path) -> None:
    dom = chromium("--dump-dom", page.as_uri()).stdout
    rows = dict(re.findall(r'<g id="row-(\d+)" data-node="([^"]+)"', dom))
    assert sorted(rows.values()) == ["gpu-node-a", "gpu-node-b"]
    bars = re.findall(
        r'<rect id="bar-(\d+)" class="bar" data-node="([^"]+)" data-verdict="([^"]+)"', dom
    )
    assert [(node, verdict) for _, node, verdict in bars] == [
        ("gpu-node-a", "reset"),
        ("gpu-node-a", "reset"),
        ("gpu-node-a", "reset"),
        ("gpu-node-a", "reset"),
        ("gpu-node-b", "power-cycle"),
        ("gpu-node-b", "power-cycle"),
    ]
    assert 'id="legend"' in dom
    assert all(f'id="legend-{v.value}"' in dom for v in Repair)
    weeks = re.findall(r'id="week-(\d+)-(faulted|healthy)"', dom)
    assert len(weeks) == 2 * 12  # Aug 1 .. Oct 18: twelve weeks, two stacked bars each
    assert re.search(
        r'<table id="repeat-cards">.*GPU-9f8e7d6c.*<td>5</td>.*GPU-1a2b3c4d.*<td>2</td>', dom
    )
    assert '<b id="total">4750.5</b>' in dom


def test_the_screenshot_shows_the_bars_and_the_legend(page: Path) -> None:
    png = artifacts() / "report.png"
    png.unlink(missing_ok=True)
    chromium(f"--screenshot={png}", page.as_uri())
    seen = pixels(png.read_bytes())
    counts = {c: seen.count(rgb(c)) for c in (*COLOURS.values(), FAULTED, HEALTHY)}
    assert len(set(seen)) > 10  # not blank
    # Every verdict colour at least in its legend swatch (16 x 16); the two that bars use, more.
    assert all(n >= 200 for n in counts.values()), counts
    assert counts[COLOURS[Repair.RESET]] > counts[COLOURS[Repair.RMA]] + 1000
    assert counts[COLOURS[Repair.POWER_CYCLE]] > counts[COLOURS[Repair.RMA]] + 500
