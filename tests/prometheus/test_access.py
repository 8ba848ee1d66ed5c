"""The guard against a real Prometheus behind TLS, client certificates and basic auth.

Prometheus serves them itself through ``--web.config.file``; the CA, the server certificate (for
127.0.0.1) and the client certificate are made here. Both Prometheus versions.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from guard.doors.prom import PromError
from guard.settings import Settings
from tests.engines import Engine, LocalPrometheus, serve
from tests.prom_client import PromClient
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus
USER, PASSWORD = "guard", "guard-test-password"
# bcrypt of PASSWORD (Prometheus accepts only bcrypt hashes in basic_auth_users).
PASSWORD_HASH = "$2b$10$YhwEUHOmyxIsc3Gt3kF4M.5NY.C.9nO5t.Y8HiEN8Xe8/bYN1g8eO"


@dataclass(frozen=True, slots=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing the server shows


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


Issuer = tuple[x509.Name, ec.EllipticCurvePrivateKey]


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: Issuer | None,
    *,
    ca: bool = False,
    ip: str = "",
    client: bool = False,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
    if client:
        usage = [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    def pem(cert: x509.Certificate, name: str) -> Path:
        (directory / name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return directory / name

    ca_key, other_key, server_key, client_key = _key(), _key(), _key(), _key()
    ca = _cert("gng-test-ca", ca_key, None, ca=True)
    issuer = (ca.subject, ca_key)
    return Pki(
        ca=pem(ca, "ca.pem"),
        server_cert=pem(_cert("127.0.0.1", server_key, issuer, ip="127.0.0.1"), "server.pem"),
        server_key=_write_key(server_key, directory / "server.key"),
        client_cert=pem(_cert("gpu-node-guard", client_key, issuer, client=True), "client.pem"),
        client_key=_write_key(client_key, directory / "client.key"),
        other_ca=pem(_cert("someone-else", other_key, None, ca=True), "other-ca.pem"),
    )


@pytest.fixture(scope="module", params=["prometheus2", "prometheus3"])
def secured(request, tmp_path_factory) -> Iterator[tuple[LocalPrometheus, Pki, Path]]:
    engine: Engine = request.param
    require_engine(engine)
    directory = tmp_path_factory.mktemp(f"tls-{engine}")
    pki = make_pki(directory)
    web = directory / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        f"  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        f"basic_auth_users:\n  {USER}: {PASSWORD_HASH}\n",
        encoding="utf-8",
    )
    password = directory / "password"
    password.write_text(PASSWORD + "\n", encoding="utf-8")
    probe = requests.Session()
    probe.trust_env = False  # REQUESTS_CA_BUNDLE would override a session's own CA
    probe.verify, probe.cert = str(pki.ca), (str(pki.client_cert), str(pki.client_key))
    probe.auth = (USER, PASSWORD)
    (directory / "tsdb").mkdir()
    with serve(directory, engine, web_config=web, probe=probe) as server:
        yield server, pki, password


def settings(server: LocalPrometheus, pki: Pki, password: Path, **changes: str) -> Settings:
    fields = {
        "prometheus_url": server.url,
        "prometheus_ca_file": str(pki.ca),
        "prometheus_cert_file": str(pki.client_cert),
        "prometheus_key_file": str(pki.client_key),
        "prometheus_basic_auth_user": USER,
        "prometheus_basic_auth_password_file": str(password),
        **changes,
    }
    return Settings(**fields)  # type: ignore[arg-type]


def one_query(s: Settings) -> float:
    (found,) = PromClient.from_settings(s).vector("q", "vector(7)", None)
    return found.value


def test_tls_client_certificate_and_basic_auth_get_answers(secured):
    server, pki, password = secured
    assert server.url.startswith("https://127.0.0.1:")
    assert one_query(settings(server, pki, password)) == 7


def test_a_wrong_ca_is_one_tls_line(secured):
    server, pki, password = secured
    with pytest.raises(PromError, match=r"TLS with .* failed: .*certificate verify failed"):
        one_query(settings(server, pki, password, prometheus_ca_file=str(pki.other_ca)))


def test_a_wrong_password_says_to_check_the_credentials(secured, tmp_path):
    server, pki, _ = secured
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    with pytest.raises(PromError, match=r"HTTP 401.*check the Prometheus credentials"):
        one_query(settings(server, pki, wrong))


def test_no_client_certificate_is_refused(secured):
    server, pki, password = secured
    s = settings(server, pki, password, prometheus_cert_file="", prometheus_key_file="")
    refused = r"query q: TLS with https://127\.0\.0\.1:\d+/api/v1/query failed: "
    with pytest.raises(PromError, match=refused):
        one_query(s)
