"""``nsqpy cert``: the certificates of a secure cluster, made without openssl.

``nsqpy cert create-ca`` makes the cluster's certificate authority: its certificate
``ca.pem`` in ``--certs-dir`` (every daemon trusts it: ``--cluster-tls-root-ca-file``) and
its private key at ``--ca-key`` (keep it off the daemons' machines). ``nsqpy cert
create-node HOST...`` makes one daemon's certificate and key, ``node.pem`` and ``node.key``
(``--cluster-tls-cert``, ``--cluster-tls-key``), signed by that CA, valid for every host
name and IP address given (what the others dial), usable both to serve and to dial
(mutual TLS). ``nsqpy cert list`` prints what a directory holds and when it expires.

Keys are ECDSA P-256 (fast handshakes), written with mode 0600. Nothing is overwritten
unless ``--overwrite`` says so, except that a new CA is *added* to an existing ``ca.pem``:
during a rotation the daemons trust the old and the new CA at once (docs/security.md).
Made with the ``cryptography`` package.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

CA_CERT = "ca.pem"
NODE_CERT = "node.pem"
NODE_KEY = "node.key"
CA_DAYS = 3650
NODE_DAYS = 1825
SKEW = datetime.timedelta(minutes=5)  # valid from a little before now (clocks differ)


class CertError(Exception):
    """A certificate could not be made or read (one line for the user)."""


@dataclass(frozen=True)
class Made:
    cert: x509.Certificate
    key: EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nsqpy"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _usage(*, ca: bool) -> x509.KeyUsage:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def san_of(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """Each host as an IP address entry when it is one, else as a DNS name."""
    from cryptography import x509

    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not host or any(c in host for c in " /:@"):
                raise CertError(f"{host!r} is neither an IP address nor a host name") from None
            names.append(x509.DNSName(host))
    return names


def create_ca(common_name: str = "nsqpy cluster CA", days: int = CA_DAYS) -> Made:
    """A self-signed CA certificate and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Made(cert, key)


def create_leaf(
    ca: Made,
    hosts: Sequence[str],
    common_name: str = "node",
    days: int = NODE_DAYS,
    *,
    server: bool = True,
) -> Made:
    """A certificate signed by ``ca`` for ``hosts``: for a client only, or (``server``) to
    serve and dial alike, as every daemon of a cluster does."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    if server and not hosts:
        raise CertError("a node certificate names at least one host (what the others dial)")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    uses = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        uses.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(min(now + datetime.timedelta(days=days), ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(uses), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(san_of(hosts)), critical=False)
    return Made(builder.sign(ca.key, hashes.SHA256()), key)


def cert_pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def write_key(key: EllipticCurvePrivateKey, path: Path) -> None:
    """The key as unencrypted PKCS#8 PEM, readable by its owner only."""
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, 0o600)  # (an existing file keeps its mode through O_CREAT)


def load_ca(ca_cert: Path, ca_key: Path) -> Made:
    """The CA whose key is ``ca_key``: the certificate of ``ca_cert`` matching it (the file
    may hold several during a rotation)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
        certs = x509.load_pem_x509_certificates(ca_cert.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise CertError(f"cannot read the CA ({ca_cert}, {ca_key}): {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"{ca_key} is not an ECDSA key made by nsqpy cert create-ca")
    mine = key.public_key().public_numbers()
    for cert in certs:
        public = cert.public_key()
        if isinstance(public, ec.EllipticCurvePublicKey) and public.public_numbers() == mine:
            return Made(cert, key)
    raise CertError(f"no certificate in {ca_cert} belongs to the key {ca_key}")


def _refuse_existing(paths: Sequence[Path], overwrite: bool) -> None:
    if overwrite:
        return
    found = [str(p) for p in paths if p.exists()]
    if found:
        raise CertError(f"{', '.join(found)} exists already (--overwrite replaces it)")


def _create_ca(ns: argparse.Namespace) -> str:
    certs, key_path = Path(ns.certs_dir), Path(ns.ca_key)
    _refuse_existing([key_path], ns.overwrite)
    certs.mkdir(parents=True, exist_ok=True)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    made = create_ca(ns.name, ns.days)
    write_key(made.key, key_path)
    bundle = certs / CA_CERT
    kept = b"" if ns.overwrite or not bundle.exists() else bundle.read_bytes()
    bundle.write_bytes(kept + cert_pem(made.cert))
    added = " (added to the CA certificates it held: both are trusted)" if kept else ""
    return f"wrote {bundle}{added} and the CA key {key_path}"


def _create_leaf(ns: argparse.Namespace, *, server: bool) -> str:
    certs = Path(ns.certs_dir)
    if not server and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", ns.name):
        raise CertError(f"client name {ns.name!r}: letters, digits, '.', '_' and '-' only")
    ca = load_ca(certs / CA_CERT, Path(ns.ca_key))
    stem = ns.name if not server else "node"
    cert_path, key_path = certs / f"{stem}.pem", certs / f"{stem}.key"
    _refuse_existing([cert_path, key_path], ns.overwrite)
    made = create_leaf(ca, ns.hosts, ns.name, ns.days, server=server)
    write_key(made.key, key_path)
    cert_path.write_bytes(cert_pem(made.cert))
    return f"wrote {cert_path} and {key_path}"


def describe(path: Path) -> list[str]:
    """One line per certificate in ``path``: subject, hosts, usage, expiry."""
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(path.read_bytes())
    except ValueError:
        return []
    lines = []
    for cert in certs:
        try:
            hosts = [str(n.value) for n in cert.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value]  # fmt: skip
        except x509.ExtensionNotFound:
            hosts = []
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        kind = "CA" if basic.ca else "certificate"
        lines.append(
            f"{path.name}: {kind} {cert.subject.rfc4514_string()}"
            + (f" for {', '.join(hosts)}" if hosts else "")
            + f", expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    return lines


def _list(ns: argparse.Namespace) -> str:
    certs = Path(ns.certs_dir)
    if not certs.is_dir():
        raise CertError(f"{certs} is not a directory")
    lines = [line for path in sorted(certs.glob("*.pem")) for line in describe(path)]
    return "\n".join(lines) if lines else f"{certs} holds no certificate"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nsqpy cert", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--certs-dir", required=True, help=f"where {CA_CERT} and the node's are")
    common.add_argument("--overwrite", action="store_true", help="replace files that exist")
    ca = sub.add_parser("create-ca", parents=[common], help="the cluster's certificate authority")
    ca.add_argument("--ca-key", required=True, help="where to write the CA's private key")
    ca.add_argument("--name", default="nsqpy cluster CA", help="the CA's common name")
    ca.add_argument("--days", type=int, default=CA_DAYS, help=f"validity (default {CA_DAYS})")
    node = sub.add_parser(
        "create-node", parents=[common], help="a daemon's certificate (serves and dials)"
    )
    node.add_argument("hosts", nargs="+", help="host names and IP addresses others dial it by")
    node.add_argument("--ca-key", required=True, help="the CA's private key")
    node.add_argument("--name", default="node", help="the certificate's common name")
    node.add_argument("--days", type=int, default=NODE_DAYS, help=f"validity (default {NODE_DAYS})")
    client = sub.add_parser(
        "create-client", parents=[common], help="a client certificate (<name>.pem, <name>.key)"
    )
    client.add_argument("name", help="the client's common name, also the file names")
    client.add_argument("--ca-key", required=True, help="the CA's private key")
    client.add_argument("--days", type=int, default=NODE_DAYS, help=f"validity ({NODE_DAYS})")
    client.set_defaults(hosts=[])
    sub.add_parser("list", parents=[common], help="what the directory holds, and expiries")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if getattr(ns, "days", 1) < 1:
        print(f"nsqpy cert {ns.action}: --days {ns.days} must be at least 1", file=sys.stderr)
        return 2
    try:
        if ns.action == "create-ca":
            done = _create_ca(ns)
        elif ns.action == "create-node":
            done = _create_leaf(ns, server=True)
        elif ns.action == "create-client":
            done = _create_leaf(ns, server=False)
        else:
            done = _list(ns)
    except CertError as exc:
        print(f"nsqpy cert {ns.action}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"nsqpy cert {ns.action}: {exc}", file=sys.stderr)
        return 1
    print(done)
    return 0
