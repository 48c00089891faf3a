"""pynsq and gnsq from PyPI with TLS, snappy and deflate, through AUTH, against the real
``nsqd`` program (uvloop): each publishes and consumes, and nsqd's /stats, read by the client
while its connections are open, shows the negotiated features for every one of them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from nsqpy.testing import DaemonProcess, nsqd_process
from nsqpy.testing.certs import CertFiles

from .test_compat_clients import run_client

pytestmark = pytest.mark.compat
SECRET = "compat-secret"


class AuthHandler(BaseHTTPRequestHandler):
    queries: list[dict[str, str]] = []

    def do_GET(self) -> None:
        query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        AuthHandler.queries.append(query)
        grant = {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
        ok = query.get("secret") == SECRET
        body = json.dumps(
            {"ttl": 3600, "identity": "compat", "authorizations": [grant] if ok else []}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def secure_nsqd(
    tmp_path_factory: pytest.TempPathFactory, certs: CertFiles
) -> Iterator[DaemonProcess]:
    auth = ThreadingHTTPServer(("127.0.0.1", 0), AuthHandler)
    thread = threading.Thread(target=auth.serve_forever, daemon=True)
    thread.start()
    data: Path = tmp_path_factory.mktemp("secure") / "data"
    flags = (
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        f"--auth-http-address=127.0.0.1:{auth.server_address[1]}",
    )
    try:
        with nsqd_process(data, *flags) as daemon:
            yield daemon
    finally:
        auth.shutdown()
        auth.server_close()


CASES: dict[str, dict[str, Any]] = {
    "tls": {"tls_v1": True},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True, "deflate_level": 3},
    "tls+snappy": {"tls_v1": True, "snappy": True},
}


def check_report(report: dict[str, Any], features: dict[str, Any], asked: int) -> None:
    """``asked``: how many auth queries nsqd had made before this client ran."""
    assert report["bodies"] == report["expected"]
    tls = "true" if features.get("tls_v1") else "false"
    new = AuthHandler.queries[asked:]
    assert new, "nsqd asked the auth server for this client's connections"
    assert all(q["secret"] == SECRET and q["tls"] == tls for q in new), new
    assert report["clients"], "the client's connections show up in /stats"
    for client in report["clients"]:
        assert client["tls"] is bool(features.get("tls_v1")), client
        assert client["snappy"] is bool(features.get("snappy")), client
        assert client["deflate"] is bool(features.get("deflate")), client
        assert client["authed"] is True and client["auth_identity"] == "compat"
        if client["tls"]:
            assert client["tls_version"] in ("TLS1.2", "TLS1.3")


def run_secure_client(
    client: str, nsqd: DaemonProcess, case: str, tls_options: dict[str, Any]
) -> dict[str, Any]:
    """Run ``clients/<client>_secure.py`` with ``case``'s features (and ``tls_options`` when
    it has TLS) against ``nsqd``; its report, checked with ``check_report``."""
    features = CASES[case]
    options: dict[str, Any] = {**features, "auth_secret": SECRET}
    if features.get("tls_v1"):
        options["tls_options"] = tls_options
    asked = len(AuthHandler.queries)
    report = run_client(
        f"{client}_secure.py",
        f"127.0.0.1:{nsqd.tcp_port}",
        nsqd.http_port,
        f"{client}_{case.replace('+', '_')}",
        12,
        json.dumps(options),
    )
    assert report["pub"] == ["OK", "OK"]
    check_report(report, features, asked)
    return report


@pytest.mark.parametrize("case", list(CASES))
def test_pynsq_with(secure_nsqd: DaemonProcess, certs: CertFiles, case: str) -> None:
    run_secure_client("pynsq", secure_nsqd, case, {"ca_certs": certs.ca})


@pytest.mark.parametrize("case", list(CASES))
def test_gnsq_with(secure_nsqd: DaemonProcess, certs: CertFiles, case: str) -> None:
    tls_options = {"ca_certs": certs.ca, "cert_reqs": 2}  # CERT_REQUIRED
    report = run_secure_client("gnsq", secure_nsqd, case, tls_options)
    features = CASES[case]
    for client in report["producer_clients"]:
        assert client["tls"] is bool(features.get("tls_v1"))
