"""How the guard reaches a production Prometheus: credentials, TLS and headers, read once at start.

A file that is missing, unreadable or not what its flag says is a `PromAccessError` naming the
flag: the CLI makes it a usage error (exit 2) before any query.
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import requests

from guard.files import (
    SMALL_TEXT_MAX_BYTES,
    TOKEN_MAX_BYTES,
    FileInputError,
    open_regular,
    read_text_bounded,
)
from guard.settings import Settings

# Where the kubelet mounts the pod's projected ServiceAccount token.
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class PromAccessError(Exception):
    """A Prometheus access setting that cannot be used; one line naming the flag."""


@dataclass(frozen=True, slots=True)
class PromAccess:
    headers: tuple[tuple[str, str], ...] = ()
    verify: str | bool = True  # a CA bundle path, or the system's trust store
    cert: tuple[str, str] | None = None  # (certificate, key) for mutual TLS

    def apply(self, session: requests.Session) -> None:
        session.headers.update(dict(self.headers))
        session.verify = self.verify
        session.cert = self.cert

    @classmethod
    def from_settings(
        cls, s: Settings, service_account_token: Path = SERVICE_ACCOUNT_TOKEN
    ) -> PromAccess:
        headers = list(s.prometheus_header_pairs)
        if s.prometheus_bearer_token_file:
            token = _token(s.prometheus_bearer_token_file, "--prometheus-bearer-token-file")
            headers.append(("Authorization", f"Bearer {token}"))
        elif s.prometheus_service_account_token:
            token = _token(str(service_account_token), "--prometheus-service-account-token")
            headers.append(("Authorization", f"Bearer {token}"))
        elif s.prometheus_basic_auth_user:
            password = _secret(
                s.prometheus_basic_auth_password_file, "--prometheus-basic-auth-password-file"
            )
            pair = f"{s.prometheus_basic_auth_user}:{password}".encode()
            headers.append(("Authorization", f"Basic {base64.b64encode(pair).decode()}"))
        ca = s.prometheus_ca_file
        cert = s.prometheus_cert_file
        key = s.prometheus_key_file
        if ca:
            _check_pem(f"ca={ca}", "a PEM CA bundle", ca=ca)
        if cert:
            _check_pem(f"cert={cert} with key={key}", "a PEM certificate and its key", cert, key)
        return cls(tuple(headers), ca or True, (cert, key) if cert else None)


def _secret(path: str, flag: str) -> str:
    try:  # bounded: a token file is never /dev/zero, a FIFO or a gigabyte
        text = read_text_bounded(path, TOKEN_MAX_BYTES, flag).strip()
    except FileInputError as exc:
        said = str(exc).removeprefix(f"cannot read {flag} {path}: ")
        raise PromAccessError(f"{flag} {path}: cannot read it: {said}") from None
    if not text:
        raise PromAccessError(f"{flag} {path}: the file is empty")
    if "\n" in text:
        raise PromAccessError(f"{flag} {path}: more than one line; a token is one line")
    return text


def _token(path: str, flag: str) -> str:
    """A bearer token goes into a header as it is: printable ASCII only (requests refuses
    anything else only at the first query)."""
    text = _secret(path, flag)
    if not (text.isascii() and text.isprintable()):
        raise PromAccessError(f"{flag} {path}: not printable ASCII; a token is")
    return text


def _check_pem(said: str, what: str, cert: str = "", key: str = "", ca: str = "") -> None:
    """Regular files of PEM size (ssl would block on a FIFO, read /dev/zero forever) that ssl
    loads: a CA bundle, or a client certificate and its key."""
    for flag, path in (("ca", ca), ("cert", cert), ("key", key)):
        try:
            if path:
                os.close(open_regular(path, SMALL_TEXT_MAX_BYTES, f"--prometheus-tls {flag}"))
        except FileInputError as exc:
            raise PromAccessError(str(exc)) from None
    try:
        context = ssl.create_default_context(cafile=ca or None)
        if cert:
            context.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as exc:
        raise PromAccessError(f"--prometheus-tls {said}: not {what} ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
