"""``nsqpy.cluster.tls.serve`` on both event loops a daemon can run on: a peer with the
cluster's certificate is served, an outsider is refused at the handshake with one log line,
and on uvloop (the daemons' loop) the link runs uvloop's compiled TLS, not asyncio's."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import uvloop

from nsqpy.cluster.tls import ClusterTls, dial, serve
from nsqpy.testing.certs import make_certs

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


def cluster_tls(directory: Path) -> ClusterTls:
    files = make_certs(directory)
    opts = SimpleNamespace(
        cluster_tls_root_ca_file=files.ca,
        cluster_tls_cert=files.server_cert,
        cluster_tls_key=files.server_key,
    )
    tls = ClusterTls.from_options(opts)
    assert tls is not None
    return tls


def plain_hello(port: int) -> bytes:
    """What a peer speaking plain TCP reads back (in a thread: the loop serves meanwhile)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"  V2PING\n")
        got = b""
        while piece := sock.recv(100):
            got += piece
        return got


@pytest.mark.parametrize("loop_kind", list(RUNNERS))
def test_serve_takes_the_cluster_and_refuses_outsiders_on_either_loop(
    loop_kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls = cluster_tls(tmp_path)
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
            assert await asyncio.wait_for(asyncio.to_thread(plain_hello, port), 20) == b""
        finally:
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger=log.name):
        RUNNERS[loop_kind](main())
    refused = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert len(refused) == 1, refused
    assert refused[0].startswith("test: refused 127.0.0.1:"), refused
    assert "TLS handshake failed" in refused[0]
    assert "WRONG_VERSION_NUMBER" in refused[0] or "wrong version" in refused[0]
    expected = "uvloop.loop" if loop_kind == "uvloop" else "asyncio.sslproto"
    assert transports == [expected]
