"""``nsqpy.cluster.tls.serve`` on both event loops a daemon can run on: a peer with the
cluster's certificate is served; an outsider (plain TCP, no certificate, another CA's, a
peer silent past the handshake's deadline) is refused at the handshake with one log line
naming it and the reason; on uvloop (the daemons' loop) the link runs uvloop's compiled
TLS, not asyncio's."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import uvloop

from nsqpy.cluster.tls import ClusterTls, dial, serve
from nsqpy.testing.certs import CertFiles, make_certs

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


def cluster_tls(files: CertFiles) -> ClusterTls:
    opts = SimpleNamespace(
        cluster_tls_root_ca_file=files.ca,
        cluster_tls_cert=files.server_cert,
        cluster_tls_key=files.server_key,
    )
    tls = ClusterTls.from_options(opts)
    assert tls is not None
    return tls


def read_all(sock: socket.socket) -> bytes:
    got = b""
    while piece := sock.recv(100):
        got += piece
    return got


def outsider(kind: str, port: int, ours: CertFiles, theirs: CertFiles) -> str:
    """What an outsider of ``kind`` reads back, or how its handshake failed (run in a
    thread: the loop serves meanwhile)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if kind == "plain":
            sock.sendall(b"  V2PING\n")
            return "read " + repr(read_all(sock))
        if kind == "silent":
            return "read " + repr(read_all(sock))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(ours.ca)
        if kind == "other-ca":
            context.load_cert_chain(theirs.client_cert, theirs.client_key)
        try:
            with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"ping")
                return "read " + repr(read_all(tls))
        except (ssl.SSLError, OSError) as exc:
            return f"refused: {exc}"


# the reason each outsider's log line gives
REASONS = {
    "plain": ("WRONG_VERSION_NUMBER", "wrong version"),
    "no-cert": ("CERTIFICATE",),
    "other-ca": ("CERTIFICATE_VERIFY_FAILED",),
    "silent": ("taking longer than",),
}


@pytest.mark.parametrize("kind", list(REASONS))
@pytest.mark.parametrize("loop_kind", list(RUNNERS))
def test_serve_takes_the_cluster_and_refuses_outsiders_on_either_loop(
    loop_kind: str, kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ours, theirs = make_certs(tmp_path / "ours"), make_certs(tmp_path / "theirs")
    tls = dataclasses.replace(cluster_tls(ours), handshake_timeout=1)
    log = logging.getLogger("nsqpy.test.tls_serve")
    transports: list[str] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transports.append(type(writer.transport).__module__)
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await serve(echo, "127.0.0.1", 0, tls, "test", log)
        port = server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.wait_for(dial("127.0.0.1", port, tls), 10)
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 10) == b"ping"
            writer.close()
            seen = await asyncio.wait_for(asyncio.to_thread(outsider, kind, port, ours, theirs), 20)
            assert seen.startswith("refused") or seen == "read b''", seen  # nothing served
        finally:
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger=log.name):
        RUNNERS[loop_kind](main())
    refused = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert len(refused) == 1, refused
    assert refused[0].startswith("test: refused 127.0.0.1:"), refused
    assert "TLS handshake failed" in refused[0]
    assert any(reason in refused[0] for reason in REASONS[kind]), refused
    expected = "uvloop.loop" if loop_kind == "uvloop" else "asyncio.sslproto"
    assert transports == [expected]
