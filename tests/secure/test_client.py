"""nsqpy's own client with TLS, snappy, deflate and AUTH against the in-process nsqd."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from nsqpy.client import Consumer, IdentifyOptions, Message, Producer, UnexpectedResponseError
from nsqpy.client.conn import Connection
from nsqpy.client.secure import AuthRequiredError, tls_context
from nsqpy.errors import ConfigError, Unauthorized
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import serve_http
from nsqpy.testing.certs import CertFiles

from .conftest import MakeNsqd
from .test_negotiation import client_stats


async def roundtrip(server: NsqdServer, identify: IdentifyOptions, topic: str) -> bool:
    """Publish and consume 20 messages; every connection shows the negotiated features."""
    address = f"127.0.0.1:{server.tcp_port}"
    bodies = [f"{topic}-{i}".encode() * 50 for i in range(20)]
    async with Producer(address, identify=identify) as producer:
        await producer.pub(topic, bodies[0])
        await producer.mpub(topic, bodies[1:])
        for client in client_stats(server):
            assert client["tls"] == identify.tls_v1
            assert client["snappy"] == identify.snappy
            assert client["deflate"] == identify.deflate
    got: list[bytes] = []
    done = asyncio.Event()

    async def handle(msg: Message) -> None:
        got.append(msg.body)
        if len(got) == len(bodies):
            done.set()

    async with Consumer(
        topic, "c", handle, nsqd_tcp_addresses=[address], identify=identify, max_in_flight=5
    ):
        await asyncio.wait_for(done.wait(), 10)
        (client,) = client_stats(server)
        assert (client["tls"], client["snappy"], client["deflate"]) == (
            identify.tls_v1,
            identify.snappy,
            identify.deflate,
        )
    assert sorted(got) == sorted(bodies)
    return True


@pytest.mark.both_loops
@pytest.mark.parametrize(
    "features",
    [
        {"tls_v1": True},
        {"snappy": True},
        {"deflate": True, "deflate_level": 9},
        {"tls_v1": True, "deflate": True},
        {"tls_v1": True, "snappy": True},
    ],
    ids=["tls", "snappy", "deflate", "tls+deflate", "tls+snappy"],
)
async def test_producer_and_consumer_with_upgrades(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any], features: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    identify = IdentifyOptions(tls_context=tls_context(root_ca_file=certs.ca), **features)
    assert await roundtrip(server, identify, "secure_" + "_".join(sorted(features)))


async def test_client_certificate_and_insecure_skip_verify(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(
        tls_client_auth_policy="require-verify", tls_root_ca_file=certs.ca, **tls_opts
    )
    ctx = tls_context(
        cert_file=certs.client_cert, key_file=certs.client_key, insecure_skip_verify=True
    )
    assert await roundtrip(server, IdentifyOptions(tls_v1=True, tls_context=ctx), "mtls")
    no_cert = IdentifyOptions(tls_v1=True, tls_context=tls_context(root_ca_file=certs.ca))
    with pytest.raises((OSError, ConnectionError, UnexpectedResponseError)):
        conn = await Connection.connect(f"127.0.0.1:{server.tcp_port}", no_cert)
        await conn.command(b"PUB t\n\x00\x00\x00\x01x")  # TLS 1.3 refuses after the handshake


async def test_unverified_server_certificate_is_refused(
    make_nsqd: MakeNsqd, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        await Connection.connect(f"127.0.0.1:{server.tcp_port}", IdentifyOptions(tls_v1=True))


async def test_tls_asked_but_not_offered_is_an_error(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd()
    with pytest.raises(UnexpectedResponseError, match="does not offer TLS"):
        await Connection.connect(f"127.0.0.1:{server.tcp_port}", IdentifyOptions(tls_v1=True))


def test_client_option_checks(certs: CertFiles) -> None:
    with pytest.raises(ConfigError, match="both deflate and snappy"):
        IdentifyOptions(snappy=True, deflate=True)
    with pytest.raises(ConfigError, match="deflate_level"):
        IdentifyOptions(deflate=True, deflate_level=0)
    with pytest.raises(ConfigError, match="tls_cert and tls_key"):
        tls_context(cert_file=certs.client_cert)
    with pytest.raises(ConfigError, match="cannot load"):
        tls_context(root_ca_file="/nonexistent/ca.pem")
    with pytest.raises(ConfigError, match="tls_min_version"):
        tls_context(min_version="tls2")
    assert tls_context(min_version="tls1.2").minimum_version.name == "TLSv1_2"


@pytest.fixture
async def auth_url() -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.Response:
        if request.query.get("secret") != "open-sesame":
            return web.json_response({"ttl": 60, "authorizations": []})
        grant = {"topic": "^granted", "channels": [".*"], "permissions": ["publish", "subscribe"]}
        return web.json_response({"ttl": 60, "identity": "bob", "authorizations": [grant]})

    app = web.Application()
    app.router.add_get("/auth", handle)
    async with serve_http(app) as port:
        yield f"127.0.0.1:{port}"


async def test_auth_secret(make_nsqd: MakeNsqd, auth_url: str) -> None:
    server = await make_nsqd(auth_http_addresses=[auth_url])
    address = f"127.0.0.1:{server.tcp_port}"
    good = IdentifyOptions(auth_secret="open-sesame", snappy=True)
    conn = await Connection.connect(address, good)
    assert conn.auth_reply == {"identity": "bob", "identity_url": "", "permission_count": 1}
    conn.close()
    assert await roundtrip(server, good, "granted_t")
    with pytest.raises(AuthRequiredError, match="requires AUTH"):
        await Connection.connect(address, IdentifyOptions())
    with pytest.raises(Unauthorized, match="no authorizations found"):
        await Connection.connect(address, IdentifyOptions(auth_secret="wrong"))
    async with Producer(address, identify=good) as producer:
        with pytest.raises(Unauthorized, match='AUTH failed for PUB on "other" ""'):
            await producer.pub("other", b"x")


async def test_corrupt_stream_from_the_server_closes_the_client() -> None:
    """A peer that negotiates snappy and then sends garbage: the client closes cleanly."""

    async def fake_nsqd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4 + len("IDENTIFY\n"))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        reply = json.dumps({"snappy": True, "max_rdy_count": 10}).encode()
        ok = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
        from nsqpy.codecs import stream_codec

        encoder, _ = stream_codec("snappy")
        frame = struct.pack(">ii", len(reply) + 4, 0) + reply
        writer.write(frame + encoder.encode(ok) + b"\x00\x05\x00\x00garbage")
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(fake_nsqd, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        conn = await Connection.connect(f"127.0.0.1:{port}", IdentifyOptions(snappy=True))
        await asyncio.wait_for(conn.wait_closed(), 5)


async def test_consumer_sends_its_auth_secret_to_lookupd(
    make_nsqd: MakeNsqd, auth_url: str
) -> None:
    seen: list[str | None] = []

    async def lookup(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"channels": [], "producers": []})

    app = web.Application()
    app.router.add_get("/lookup", lookup)
    async with serve_http(app) as port:

        async def handle(msg: Message) -> None:
            pass

        consumer = Consumer(
            "granted_l",
            "c",
            handle,
            lookupd_http_addresses=[f"127.0.0.1:{port}"],
            identify=IdentifyOptions(auth_secret="open-sesame"),
        )
        async with consumer:
            while not seen:
                await asyncio.sleep(0.01)
        assert seen[0] == "Bearer open-sesame"


@pytest.mark.both_loops
async def test_a_producer_closes_a_tls_connection_whose_nsqd_stopped_reading(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    """Over TLS a close waits for the peer's close_notify. An nsqd that stopped reading (it
    is stopping: its connections are held) never sends it; the producer aborts the
    connection after its grace instead of waiting for the loop's TLS shutdown timeout (30 s):
    this hung a stopping nsqd whose forwarder was connected to itself."""
    server = await make_nsqd(**tls_opts)
    identify = IdentifyOptions(tls_v1=True, tls_context=tls_context(root_ca_file=certs.ca))
    producer = Producer(f"127.0.0.1:{server.tcp_port}", identify=identify)
    await producer.pub("held", b"m")
    for conn in server.connections:
        conn.hold()  # (what a stopping nsqd does first: its connections are read no more)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(producer.close(grace=0.5), 10)
    assert loop.time() - started < 5
    started = loop.time()
    again = Producer(f"127.0.0.1:{server.tcp_port}", identify=identify)
    await again.pub("held", b"m")
    for conn in server.connections:
        conn.hold()
    await asyncio.wait_for(again.close(grace=0), 10)  # (the forwarder's: abort at once)
    assert loop.time() - started < 5
