"""The --tls-* flags: start-up refusals with one clear line, the HTTPS listener,
--tls-required for HTTP (true vs tcp-https), --tls-min-version."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nsqpy.errors import ConfigError
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import identify
from nsqpy.testing.certs import CertFiles

from .conftest import MakeNsqd, nsqd_opts
from .helpers import SecureWire


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tls_cert": "CERT"}, "--tls-cert and --tls-key must be given together"),
        ({"tls_key": "KEY"}, "--tls-cert and --tls-key must be given together"),
        ({"tls_cert": "/nonexistent/c.pem", "tls_key": "KEY"}, "--tls-cert /nonexistent/c.pem"),
        ({"tls_cert": "CERT", "tls_key": "/nonexistent/k.pem"}, "--tls-key /nonexistent/k.pem"),
        ({"tls_cert": "KEY", "tls_key": "CERT"}, "cannot load"),
        ({"tls_cert": "GARBAGE", "tls_key": "GARBAGE"}, "cannot load"),
        ({"tls_required": "true"}, "cannot require TLS client connections without TLS key"),
        ({"tls_client_auth_policy": "require"}, "cannot require TLS client connections"),
        ({"tls_client_auth_policy": "maybe"}, "--tls-client-auth-policy"),
        ({"tls_required": "sometimes"}, "--tls-required"),
        ({"tls_cert": "CERT", "tls_key": "KEY", "tls_min_version": "tls9"}, "--tls-min-version"),
        ({"tls_cert": "CERT", "tls_key": "KEY", "tls_root_ca_file": "GARBAGE"}, "root-ca-file"),
    ],
)
def test_bad_tls_flags_refuse_to_start(
    tmp_path: Path, certs: CertFiles, overrides: dict[str, str], message: str
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    names = {"CERT": certs.server_cert, "KEY": certs.server_key, "GARBAGE": str(garbage)}
    opts = nsqd_opts(tmp_path, **{k: names.get(v, v) for k, v in overrides.items()})
    with pytest.raises(ConfigError, match=message):
        NsqdServer(opts)


def test_nsqd_program_prints_one_line_for_an_unreadable_key(
    tmp_path: Path, certs: CertFiles
) -> None:
    nsqd = Path(sys.executable).with_name("nsqd")
    proc = subprocess.run(
        [
            str(nsqd),
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={tmp_path}",
            f"--tls-cert={certs.server_cert}",
            f"--tls-key={tmp_path}/missing.key",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nsqd: error: --tls-key ") and "No such file" in lines[0]


async def fetch(url: str, ctx: ssl.SSLContext | None = None) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as session, session.get(url, ssl=ctx or False) as resp:
        return resp.status, await resp.text(), resp.headers


async def test_https_listener_serves_the_api(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    assert server.https_port > 0
    ctx = ssl.create_default_context(cafile=certs.ca)
    status, text, _ = await fetch(f"https://127.0.0.1:{server.https_port}/ping", ctx)
    assert (status, text) == (200, "OK")
    status, text, _ = await fetch(f"https://127.0.0.1:{server.https_port}/info", ctx)
    assert status == 200 and json.loads(text)["version"] == "1.3.0"
    status, _, _ = await fetch(f"http://127.0.0.1:{server.http_port}/ping")
    assert status == 200


async def test_no_https_listener_without_a_certificate(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd()
    assert server.https_port == 0


async def test_tls_required_true_refuses_plain_http(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(tls_required="true", **tls_opts)
    status, text, headers = await fetch(f"http://127.0.0.1:{server.http_port}/pub?topic=t")
    assert status == 403
    assert json.loads(text) == {"message": "TLS_REQUIRED", "https_port": server.https_port}
    assert headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    ctx = ssl.create_default_context(cafile=certs.ca)
    status, _, _ = await fetch(f"https://127.0.0.1:{server.https_port}/stats?format=json", ctx)
    assert status == 200


async def test_tls_required_tcp_https_allows_plain_http(
    make_nsqd: MakeNsqd, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(tls_required="tcp-https", **tls_opts)
    status, text, _ = await fetch(f"http://127.0.0.1:{server.http_port}/ping")
    assert (status, text) == (200, "OK")
    assert server.tls_required


async def test_tls_min_version_refuses_older_clients(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(tls_min_version="tls1.3", **tls_opts)
    wire = await SecureWire.connect(server.tcp_port)
    await wire.send(identify({"feature_negotiation": True, "tls_v1": True}))
    await wire.read_frame()
    old = ssl.create_default_context(cafile=certs.ca)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await wire.writer.start_tls(old, server_hostname="127.0.0.1")
