"""AUTH against a real HTTP auth server started by the test (aiohttp on 127.0.0.1:0):
the query it receives, grants and refusals, TTL expiry, failing and slow auth servers."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from nsqpy.protocol.extend import encode_mpub_trace, encode_pub_ext, encode_pub_trace
from nsqpy.testing import FakeClock, pub, serve_http
from nsqpy.testing.certs import CertFiles

from .conftest import MakeNsqd
from .helpers import SecureWire, client_context

GRANT_PUB = {"topic": "^orders", "channels": [".*"], "permissions": ["publish"]}
GRANT_SUB = {"topic": "orders", "channels": ["^archive$"], "permissions": ["subscribe"]}


@dataclass
class AuthServer:
    """Answers /auth by the ``secret`` query parameter from ``replies``."""

    replies: dict[str, Any] = field(default_factory=dict)
    queries: list[dict[str, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.queries.append(query)
        self.headers.append(dict(request.headers))
        reply = self.replies.get(query.get("secret", ""), 404)
        if reply == "slow":
            await self.released.wait()
            reply = 500
        if reply == "junk":
            return web.Response(text="<html>not json</html>")
        if isinstance(reply, int):
            return web.Response(status=reply, text="no")
        if isinstance(reply, tuple):  # (status, body)
            return web.Response(status=reply[0], text=json.dumps(reply[1]))
        return web.json_response(reply)


@pytest.fixture
async def auth_server() -> AsyncIterator[AuthServer]:
    server = AuthServer()
    app = web.Application()
    app.router.add_get("/auth", server.handle)
    app.router.add_get("/custom/path", server.handle)
    async with serve_http(app) as port:
        server.port = port
        yield server
        server.released.set()


def grant(ttl: int = 3600, *auths: dict[str, Any]) -> dict[str, Any]:
    return {
        "ttl": ttl,
        "identity": "alice",
        "identity_url": "https://id.example/alice",
        "authorizations": list(auths) or [GRANT_PUB, GRANT_SUB],
    }


def auth_cmd(secret: bytes) -> bytes:
    return b"AUTH\n" + struct.pack(">i", len(secret)) + secret


async def authed_wire(port: int, secret: bytes, **fields: Any) -> tuple[SecureWire, Any]:
    wire = await SecureWire.connect(port)
    settings = await wire.negotiate(fields, tls=fields.pop("tls_context", None))
    assert settings["auth_required"] is True
    await wire.send(auth_cmd(secret))
    return wire, await wire.read_frame()


async def test_auth_grants_publish_and_subscribe_as_the_server_says(
    make_nsqd: MakeNsqd, auth_server: AuthServer
) -> None:
    auth_server.replies["s3cret"] = grant()
    nsqd = await make_nsqd(auth_http_addresses=[auth_server.address])
    wire, reply = await authed_wire(nsqd.tcp_port, b"s3cret")
    assert reply == (
        0,
        b'{"identity":"alice","identity_url":"https://id.example/alice","permission_count":2}',
    )
    assert auth_server.queries == [
        {"common_name": "", "remote_ip": "127.0.0.1", "secret": "s3cret", "tls": "false"}
    ]
    assert auth_server.headers[0]["Accept"] == "application/vnd.nsq; version=1.0"
    await wire.send(pub("orders_eu", b"1"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(pub("payments", b"1"))
    assert await wire.read_frame() == (1, b'E_UNAUTHORIZED AUTH failed for PUB on "payments" ""')
    await wire.expect_closed()

    ext, _ = await authed_wire(nsqd.tcp_port, b"s3cret")  # youzan's commands: the same checks
    await ext.send(encode_pub_ext("orders_eu", {"a": "b"}, b"1"))
    assert await ext.read_frame() == (0, b"OK")
    await ext.send(encode_pub_trace("payments", 9, b"1"))
    assert await ext.read_frame() == (
        1,
        b'E_UNAUTHORIZED AUTH failed for PUB_TRACE on "payments" ""',
    )

    sub, _ = await authed_wire(nsqd.tcp_port, b"s3cret")
    await sub.send(b"SUB orders_eu archive\n")
    assert await sub.read_frame() == (0, b"OK")
    (client,) = [c for c in nsqd.broker.clients.values() if c.channel is not None]
    assert client.authed and client.auth_identity == "alice"
    refused, _ = await authed_wire(nsqd.tcp_port, b"s3cret")
    await refused.send(b"SUB orders_eu archive2\n")
    assert await refused.read_frame() == (
        1,
        b'E_UNAUTHORIZED AUTH failed for SUB on "orders_eu" "archive2"',
    )


async def test_commands_before_auth_and_auth_misuse(
    make_nsqd: MakeNsqd, auth_server: AuthServer
) -> None:
    auth_server.replies.update({"good": grant(), "nothing": grant(60, *[])})
    auth_server.replies["nothing"]["authorizations"] = []
    nsqd = await make_nsqd(auth_http_addresses=[auth_server.address])
    for command, verb in [
        (pub("orders", b"x"), "PUB"),
        (b"SUB orders archive\n", "SUB"),
        (b"DPUB orders 10\n\x00\x00\x00\x01x", "DPUB"),
        (b"MPUB orders\n\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00\x00\x01x", "MPUB"),
        (encode_pub_ext("orders", {"a": "b"}, b"x"), "PUB_EXT"),
        (encode_pub_trace("orders", 7, b"x"), "PUB_TRACE"),
        (encode_mpub_trace("orders", [(7, b"x")]), "MPUB_TRACE"),
        (b"SUB_ORDERED orders archive\n", "SUB_ORDERED"),
        (b"PUB orders 0\n\x00\x00\x00\x01x", "PUB"),
    ]:
        wire = await SecureWire.connect(nsqd.tcp_port)
        await wire.send(command)
        assert await wire.read_frame() == (1, f"E_AUTH_FIRST AUTH required before {verb}".encode())
        await wire.expect_closed()
    wire, reply = await authed_wire(nsqd.tcp_port, b"nothing")
    assert reply == (1, b"E_UNAUTHORIZED AUTH no authorizations found")
    wire, reply = await authed_wire(nsqd.tcp_port, b"good")
    await wire.send(auth_cmd(b"good"))
    assert await wire.read_frame() == (1, b"E_INVALID AUTH already set")


async def test_auth_disabled(make_nsqd: MakeNsqd) -> None:
    nsqd = await make_nsqd()
    wire = await SecureWire.connect(nsqd.tcp_port)
    await wire.send(auth_cmd(b"x"))
    assert await wire.read_frame() == (1, b"E_AUTH_DISABLED AUTH disabled")


@pytest.mark.parametrize("answer", ["junk", 500, 404, (200, {"ttl": 0}), (200, {"ttl": "1"})])
async def test_failing_auth_server_is_auth_failed(
    make_nsqd: MakeNsqd, auth_server: AuthServer, answer: Any
) -> None:
    auth_server.replies["s"] = answer
    auth_server.replies["good"] = grant()
    nsqd = await make_nsqd(auth_http_addresses=[auth_server.address])
    wire, reply = await authed_wire(nsqd.tcp_port, b"s")
    assert reply == (1, b"E_AUTH_FAILED AUTH failed")
    await wire.expect_closed()
    _other, reply = await authed_wire(nsqd.tcp_port, b"good")
    assert reply[0] == 0


@pytest.mark.parametrize(
    "bad_grant",
    [
        {"topic": "(", "channels": [".*"], "permissions": ["publish"]},
        {"topic": ".*", "channels": ["[z-a]"], "permissions": ["publish"]},
        {"topic": ".*", "channels": [".*"], "permissions": ["admin"]},
    ],
)
async def test_unusable_grants_are_auth_failed(
    make_nsqd: MakeNsqd, auth_server: AuthServer, bad_grant: dict[str, Any]
) -> None:
    auth_server.replies["s"] = grant(60, bad_grant)
    nsqd = await make_nsqd(auth_http_addresses=[auth_server.address])
    _, reply = await authed_wire(nsqd.tcp_port, b"s")
    assert reply == (1, b"E_AUTH_FAILED AUTH failed")


async def test_slow_auth_server_times_out_without_blocking_others(
    make_nsqd: MakeNsqd, auth_server: AuthServer
) -> None:
    auth_server.replies.update({"slow": "slow", "fast": grant()})
    nsqd = await make_nsqd(
        auth_http_addresses=[auth_server.address], http_client_request_timeout_ms=1500
    )
    slow = await SecureWire.connect(nsqd.tcp_port)
    await slow.negotiate({})
    await slow.send(auth_cmd(b"slow"))
    fast, reply = await authed_wire(nsqd.tcp_port, b"fast")
    assert reply[0] == 0, "served while the other AUTH waits"
    await fast.send(pub("orders", b"x"))
    assert await fast.read_frame() == (0, b"OK")
    assert await slow.read_frame(timeout=10) == (1, b"E_AUTH_FAILED AUTH failed")


async def test_auth_servers_are_tried_in_turn(make_nsqd: MakeNsqd, auth_server: AuthServer) -> None:
    auth_server.replies["s"] = grant()
    dead = "127.0.0.1:1"  # nothing listens on port 1 of loopback
    nsqd = await make_nsqd(
        auth_http_addresses=[dead, f"http://{auth_server.address}/custom/path", dead]
    )
    for _ in range(4):  # the first server tried is random: every order falls through
        _, reply = await authed_wire(nsqd.tcp_port, b"s")
        assert reply[0] == 0, reply


async def test_ttl_expiry_asks_the_auth_server_again(
    make_nsqd: MakeNsqd, auth_server: AuthServer
) -> None:
    auth_server.replies["s"] = grant(30)
    nsqd = await make_nsqd(auth_http_addresses=[auth_server.address])
    assert nsqd.auth is not None
    clock = FakeClock()
    nsqd.auth.clock = clock
    wire, _ = await authed_wire(nsqd.tcp_port, b"s")
    await wire.send(pub("orders", b"1"))
    assert await wire.read_frame() == (0, b"OK")
    assert len(auth_server.queries) == 1, "within the TTL: no new query"
    clock.advance_ms(31_000)
    await wire.send(pub("orders", b"2") + pub("orders", b"3"))
    assert [await wire.read_frame(), await wire.read_frame()] == [(0, b"OK")] * 2
    assert len(auth_server.queries) == 2, "expired: asked again once, then cached"
    auth_server.replies["s"] = grant(
        30, {"topic": "other", "channels": [".*"], "permissions": ["publish"]}
    )
    clock.advance_ms(31_000)
    await wire.send(pub("orders", b"4"))
    assert await wire.read_frame() == (1, b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""')
    assert nsqd.broker.topics["orders"].message_count == 3

    again, _ = await authed_wire(nsqd.tcp_port, b"s")
    auth_server.replies["s"] = 500
    clock.advance_ms(31_000)
    await again.send(pub("other", b"5"))
    assert await again.read_frame() == (1, b"E_AUTH_FAILED AUTH failed")


async def test_tls_client_certificate_common_name_reaches_the_auth_server(
    make_nsqd: MakeNsqd, auth_server: AuthServer, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    auth_server.replies["s"] = grant()
    nsqd = await make_nsqd(
        auth_http_addresses=[auth_server.address],
        tls_client_auth_policy="require-verify",
        tls_root_ca_file=certs.ca,
        **tls_opts,
    )
    _wire, reply = await authed_wire(
        nsqd.tcp_port, b"s", tls_v1=True, tls_context=client_context(certs, with_cert=True)
    )
    assert reply[0] == 0
    assert auth_server.queries[-1] == {
        "common_name": certs.client_cn,
        "remote_ip": "127.0.0.1",
        "secret": "s",
        "tls": "true",
    }


async def test_403_with_https_port_is_retried_over_https(
    make_nsqd: MakeNsqd, certs: CertFiles
) -> None:
    secure = AuthServer(replies={"s": grant()})
    app = web.Application()
    app.router.add_get("/auth", secure.handle)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs.server_cert, certs.server_key)
    plain = AuthServer()
    app2 = web.Application()
    app2.router.add_get("/auth", plain.handle)
    async with serve_http(app, ctx) as https_port, serve_http(app2) as plain_port:
        plain.replies = {"s": (403, {"message": "TLS_REQUIRED", "https_port": https_port})}
        nsqd = await make_nsqd(
            auth_http_addresses=[f"127.0.0.1:{plain_port}"],
            tls_root_ca_file=certs.ca,
        )
        _, reply = await authed_wire(nsqd.tcp_port, b"s")
        assert reply[0] == 0, reply
        assert len(plain.queries) == 1 and len(secure.queries) == 1


async def test_http_publishing_is_never_auth_checked(
    make_nsqd: MakeNsqd, auth_server: AuthServer
) -> None:
    import aiohttp

    nsqd = await make_nsqd(auth_http_addresses=[auth_server.address])
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{nsqd.http_port}/pub?topic=anything", data=b"x") as resp,
    ):
        assert (resp.status, await resp.text()) == (200, "OK")
    assert auth_server.queries == [], "nsqd's HTTP API has no AUTH (SPEC 1.11)"
