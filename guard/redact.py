"""Secrets never reach a log line: header values whose name says they are credentials.

`--prometheus-headers` carries ``Name=value`` pairs; Authorization is refused outright (a token
file is the way), but X-Api-Key, Cookie, Proxy-Authorization or a tenant's ``X-Auth-Token`` are
headers too. Every log line (guard.log) and every "bad setting" line passes through `redact`.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_SECRET_WORDS = ("authorization", "cookie", "api-key", "apikey", "token", "key", "secret",
                 "password", "passwd", "credential")  # fmt: skip
# ``Name=value`` (the headers setting) and ``Name: value`` (an echoed request header).
_PAIR = re.compile(r"(?P<name>[!#$%&'*+.^_`|~0-9A-Za-z-]+)(?P<sep>=|:[ \t]*)(?P<value>[^,\s]+)")
_SCHEME = re.compile(r"(?i)\b(bearer|basic)[ \t]+[^,\s]+")


def is_secret_name(name: str) -> bool:
    """
    >>> is_secret_name("X-Api-Key"), is_secret_name("X-Scope-OrgID"), is_secret_name("Cookie")
    (True, False, True)
    """
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def redact(text: str) -> str:
    """`text` with the value of every secret-named pair, and every Bearer/Basic credential,
    replaced by ``<redacted>``.

    >>> redact("X-Scope-OrgID=team-a,X-Api-Key=s3cr3t")
    'X-Scope-OrgID=team-a,X-Api-Key=<redacted>'
    >>> redact("Proxy-Authorization: Basic dXNlcjpwdw==")
    'Proxy-Authorization: <redacted>'
    """
    if "=" not in text and ":" not in text and " " not in text:
        return text

    def pair(m: re.Match[str]) -> str:
        if not is_secret_name(m["name"]) or m["value"] == REDACTED:
            return m[0]
        return f"{m['name']}{m['sep']}{REDACTED}"

    text = _SCHEME.sub(REDACTED, text)
    return _PAIR.sub(pair, text)
