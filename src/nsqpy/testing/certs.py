"""Throw-away certificates for TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, all made with ``cryptography`` (a dev dependency).

``make_certs(directory)`` writes ``ca.pem``, ``server.pem``/``server.key`` and
``client.pem``/``client.key`` and returns their paths. Test code only.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CertFiles:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    client_cn: str


def _name(cn: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: Any, path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert(subject: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool, san: bool) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_certs(directory: str | Path, client_cn: str = "nsqpy-test-client") -> CertFiles:
    """A CA and a server and a client certificate signed by it, as PEM files."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("nsqpy test CA", ca_key, "nsqpy test CA", ca_key, ca=True, san=False)
    files: dict[str, str] = {"ca": str(out / "ca.pem")}
    (out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for who, cn in (("server", "127.0.0.1"), ("client", client_cn)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(cn, key, "nsqpy test CA", ca_key, ca=False, san=who == "server")
        (out / f"{who}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, out / f"{who}.key")
        files[f"{who}_cert"] = str(out / f"{who}.pem")
        files[f"{who}_key"] = str(out / f"{who}.key")
    return CertFiles(client_cn=client_cn, **files)
