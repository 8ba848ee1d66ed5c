"""The time in front of a kernel-log line, whatever tool printed it (docs/evidence.md lists the
formats). The parser matches on message text, so the prefix only yields the time.
"""

from __future__ import annotations

import re

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_CTIME = re.compile(r"\[(\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
# Month token is any word (Dec, 6月, cze); the day may be padded with a second space.
_SHORT = re.compile(r"^(\S+ +\d{1,2} \d{2}:\d{2}:\d{2})\b")
_MONOTONIC = re.compile(r"\[\s*(\+?\d+\.\d+)\]")


def line_time(prefix: str) -> str | None:
    """The wall-clock time in `prefix` if it has one, else the seconds since boot, else None.

    >>> line_time("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 ")
    '2025-01-21T04:41:44,283302+00:00'
    >>> line_time("Dec  2 10:43:35 worker4 kernel: [240314.528856] ")
    'Dec 2 10:43:35'
    >>> line_time("[ 130.456250] [ T1946] ")
    '130.456250'
    >>> line_time("kernel: ") is None
    True
    """
    for pattern in (_ISO, _CTIME, _SHORT, _MONOTONIC):
        found = pattern.search(prefix)
        if found:
            text = found.group(1) if pattern.groups else found.group(0)
            return " ".join(text.split())
    return None
