"""Throw-away certificates for TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, made as ``nsqpy cert`` makes them
(``nsqpy.tools.cert``).

``make_certs(directory)`` writes ``ca.pem``, ``server.pem``/``server.key`` and
``client.pem``/``client.key`` and returns their paths. Test code only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nsqpy.tools.cert import cert_pem, create_ca, create_leaf, write_key

DAYS = 2


@dataclass(frozen=True)
class CertFiles:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    client_cn: str


def make_certs(directory: str | Path, client_cn: str = "nsqpy-test-client") -> CertFiles:
    """A CA and a server and a client certificate signed by it, as PEM files."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca = create_ca("nsqpy test CA", DAYS)
    (out / "ca.pem").write_bytes(cert_pem(ca.cert))
    files: dict[str, str] = {"ca": str(out / "ca.pem")}
    made = {
        "server": create_leaf(ca, ["localhost", "127.0.0.1"], "127.0.0.1", DAYS),
        "client": create_leaf(ca, [], client_cn, DAYS, server=False),
    }
    for who, leaf in made.items():
        (out / f"{who}.pem").write_bytes(cert_pem(leaf.cert))
        write_key(leaf.key, out / f"{who}.key")
        files[f"{who}_cert"] = str(out / f"{who}.pem")
        files[f"{who}_key"] = str(out / f"{who}.key")
    return CertFiles(client_cn=client_cn, **files)
