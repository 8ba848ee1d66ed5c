"""The node's certificates: a CA, the kubelet's client certificate (system:node:<node> in
system:nodes, as the Node authorizer and NodeRestriction expect) and the API server's client
certificate for the kubelet (`kubectl logs`, exec)."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA = "ca"
KUBELET_CLIENT = "kubelet-client"
APISERVER_CLIENT = "apiserver-kubelet-client"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _save(pki: Path, name: str, key: rsa.RSAPrivateKey, cert: x509.Certificate) -> None:
    (pki / f"{name}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_certs(pki: Path, node: str) -> None:
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-node-guard-node-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki.mkdir(parents=True, exist_ok=True)
    _save(pki, CA, ca_key, ca)
    for name, common_name, org in (
        (KUBELET_CLIENT, f"system:node:{node}", "system:nodes"),
        (APISERVER_CLIENT, "kube-apiserver-kubelet-client", "system:masters"),
    ):
        key = _key()
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _save(pki, name, key, cert)
