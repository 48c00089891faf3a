"""Garbage during and after the TLS handshake, corrupt snappy and deflate streams, a stalled
handshake, client certificate policies: clear errors, and nsqd keeps serving the others."""

from __future__ import annotations

import asyncio
import json
import ssl
import zlib
from typing import Any

import pytest
import snappy

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import eventually, identify, pub
from nsqpy.testing.certs import CertFiles

from .conftest import MakeNsqd
from .helpers import SecureWire, client_context


async def still_serving(server: NsqdServer, certs: CertFiles | None = None) -> None:
    """A fresh client negotiates and publishes: the daemon was not hurt."""
    wire = await SecureWire.connect(server.tcp_port)
    fields: dict[str, Any] = {"snappy": True}
    if certs is not None:
        fields["tls_v1"] = True
    await wire.negotiate(fields, tls=client_context(certs) if certs else None)
    await wire.send(pub("alive", b"yes"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.close()


async def identify_tls(server: NsqdServer) -> SecureWire:
    wire = await SecureWire.connect(server.tcp_port)
    await wire.send(identify({"feature_negotiation": True, "tls_v1": True}))
    _ftype, data = await wire.read_frame()
    assert json.loads(data)["tls_v1"] is True
    return wire


@pytest.mark.both_loops
async def test_garbage_instead_of_a_handshake_is_identify_failed(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    wire = await identify_tls(server)
    wire.writer.write(b"PUB t\n\x00\x00\x00\x01x" * 20)
    rest = await wire.expect_closed()
    assert b"E_IDENTIFY_FAILED IDENTIFY failed" in rest
    await still_serving(server, certs)


async def test_stalled_handshake_times_out(make_nsqd: MakeNsqd, tls_opts: dict[str, Any]) -> None:
    server = await make_nsqd(**tls_opts)
    server.tls.handshake_timeout = 0.2
    wire = await identify_tls(server)
    rest = await wire.expect_closed()
    assert rest.endswith(b"E_IDENTIFY_FAILED IDENTIFY failed TLS handshake timed out")


async def test_garbage_after_the_handshake_closes_only_that_client(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    wire = await identify_tls(server)
    # The handshake by hand over the plain stream, so plain bytes can follow it.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(certs).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            wire.writer.write(outgoing.read())
            incoming.write(await asyncio.wait_for(wire.reader.read(65536), 5))
    wire.writer.write(outgoing.read())
    while True:
        try:
            assert tls.read(1024).endswith(b"OK")  # the OK over TLS
            break
        except ssl.SSLWantReadError:
            incoming.write(await asyncio.wait_for(wire.reader.read(65536), 5))
    wire.writer.write(b"\x17\x03\x03\x00\x20" + b"\x42" * 32)  # a record nsqd cannot decrypt
    await wire.expect_closed()
    await still_serving(server, certs)


@pytest.mark.parametrize(
    ("kind", "garbage"),
    [
        ("snappy", b"\x00\x10\x00\x00" + b"\x00" * 16),  # compressed chunk, bad CRC and data
        ("snappy", b"\x05\x01\x00\x00x"),  # reserved chunk type
        ("snappy", b"NOP\n"),  # plain text where a chunk header belongs
        ("deflate", b"\xff\xfe\xfd garbage that is no deflate block"),
    ],
)
async def test_corrupt_compressed_stream_closes_the_connection(
    make_nsqd: MakeNsqd, kind: str, garbage: bytes
) -> None:
    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    await wire.negotiate({kind: True})
    wire.writer.write(garbage)
    await wire.expect_closed()
    await still_serving(server)
    await eventually(lambda: not server.connections)


async def test_corrupt_chunk_after_good_commands_keeps_the_good_ones(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    await wire.negotiate({"snappy": True})
    good = snappy.StreamCompressor().compress(pub("kept", b"1"))
    await wire.send(pub("kept", b"0"))
    assert await wire.read_frame() == (0, b"OK")
    wire.writer.write(good + b"\x00\x08\x00\x00" + b"\x01" * 8)
    await wire.expect_closed()
    assert server.broker.topics["kept"].message_count == 2


async def test_deflate_bomb_is_refused_without_inflating_it_whole(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    await wire.negotiate({"deflate": True})
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = z.compress(b"A" * (32 << 20)) + z.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < 100_000
    wire.writer.write(bomb)  # inflates to one 32 MiB "command line"
    await wire.expect_closed(timeout=20)
    await still_serving(server)


@pytest.mark.parametrize("policy", ["require", "require-verify"])
async def test_client_certificate_policies(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any], policy: str
) -> None:
    server = await make_nsqd(tls_client_auth_policy=policy, tls_root_ca_file=certs.ca, **tls_opts)
    assert server.tls_required, "a client auth policy forces --tls-required"
    without = await identify_tls(server)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await without.writer.start_tls(client_context(certs), server_hostname="127.0.0.1")
        await without.read_frame()  # TLS 1.3 reports the refusal on the first read
    with_cert = await SecureWire.connect(server.tcp_port)
    await with_cert.negotiate({"tls_v1": True}, tls=client_context(certs, with_cert=True))
    await with_cert.send(pub("mtls", b"x"))
    assert await with_cert.read_frame() == (0, b"OK")


async def test_many_bad_clients_at_once_do_not_disturb_a_good_one(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    server.tls.handshake_timeout = 1.0  # some garbage looks like the start of a long record

    async def bad(i: int) -> None:
        wire = await identify_tls(server)
        wire.writer.write(bytes([i]) * (100 + i))
        assert b"E_IDENTIFY_FAILED" in await wire.expect_closed(timeout=10)

    await asyncio.gather(*(bad(i) for i in range(20)), still_serving(server, certs))


async def test_a_bomb_of_valid_commands_does_not_starve_other_clients(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd()
    other = await SecureWire.connect(server.tcp_port)
    await other.negotiate({})
    wire = await SecureWire.connect(server.tcp_port)
    await wire.negotiate({"deflate": True})
    (bomber,) = [c for c in server.connections if c.client.deflate]
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    commands = b"NOP\n" * (1 << 19) + pub("bomb_done", b"x")  # 2 MiB of commands
    bomb = z.compress(commands) + z.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < 4096
    before = bomber.last_recv
    wire.writer.write(bomb)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while bomber.last_recv == before:  # one event-loop turn at a time until nsqd starts on it
        assert loop.time() < deadline, "nsqd never read the bomb"
        await asyncio.sleep(0)
    # nsqd runs the bomb a bounded piece per turn: the other client is answered meanwhile.
    await other.send(b"SUB other ch\n")
    assert await other.read_frame(timeout=30) == (0, b"OK")
    assert "bomb_done" not in server.broker.topics, "the whole bomb ran in one event-loop turn"
    assert await wire.read_frame(timeout=60) == (0, b"OK")  # and the bomb itself is served
