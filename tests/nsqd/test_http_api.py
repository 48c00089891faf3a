"""nsqd's HTTP API against an in-process daemon: statuses, bodies, headers, actions."""

from __future__ import annotations

import struct

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import FakeClock, read_message, subscriber

V1 = "nsq; version=1.0"


async def call(
    http: tuple[aiohttp.ClientSession, str], method: str, path: str, data: bytes | None = None
) -> tuple[int, bytes, CIMultiDictProxy[str]]:
    session, base = http
    async with session.request(method, base + path, data=data) as resp:
        return resp.status, await resp.read(), resp.headers


async def test_ping_and_info(http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer) -> None:
    status, body, _ = await call(http, "GET", "/ping")
    assert (status, body) == (200, b"OK")
    status, body, headers = await call(http, "GET", "/info")
    assert status == 200 and headers["X-NSQ-Content-Type"] == V1
    info = __import__("json").loads(body)
    assert info["tcp_port"] == nsqd.tcp_port and info["http_port"] == nsqd.http_port
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert info["version"] == "1.3.0"


async def test_pub_mpub_and_stats_counts(http: tuple[aiohttp.ClientSession, str]) -> None:
    assert (await call(http, "POST", "/pub?topic=h", b"one"))[:2] == (200, b"OK")
    assert (await call(http, "POST", "/mpub?topic=h", b"two\nthree\n\n"))[:2] == (200, b"OK")
    binary = struct.pack(">i", 2) + struct.pack(">i", 1) + b"4" + struct.pack(">i", 1) + b"5"
    assert (await call(http, "POST", "/mpub?topic=h&binary=true", binary))[:2] == (200, b"OK")
    status, body, headers = await call(http, "GET", "/stats?format=json&topic=h")
    assert status == 200
    doc = __import__("json").loads(body)
    assert headers["Content-Type"].startswith("application/json")
    (topic,) = doc["topics"]
    assert topic["topic_name"] == "h" and topic["message_count"] == 5 and topic["depth"] == 5
    assert list(doc)[:4] == ["version", "health", "start_time", "topics"]


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/pub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("/pub?topic=bad!", b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=t", b"", 400, "MSG_EMPTY"),
        ("/pub?topic=t&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=abc", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t", b"x" * (1048576 + 1), 413, "MSG_TOO_BIG"),
        ("/mpub?topic=t&binary=true", b"\x00\x00", 413, "BAD_BODY"),
        ("/mpub?topic=t&binary=true", b"\x00\x00\x00\x01\x00\x00\x00\x09ab", 413, "BAD_MESSAGE"),
        ("/topic/delete?topic=nope", b"", 404, "TOPIC_NOT_FOUND"),
        ("/channel/create?topic=nope&channel=c", b"", 404, "TOPIC_NOT_FOUND"),
        ("/channel/create?topic=t", b"", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/create?topic=t&channel=bad!", b"", 400, "INVALID_ARG_CHANNEL"),
        ("/nothing/here", b"", 404, "NOT_FOUND"),
    ],
)
async def test_errors_are_v1_json_with_nsq_codes(
    http: tuple[aiohttp.ClientSession, str], path: str, body: bytes, status: int, message: str
) -> None:
    got, data, headers = await call(http, "POST", path, body)
    assert got == status
    assert __import__("json").loads(data) == {"message": message}
    assert headers["X-NSQ-Content-Type"] == V1


async def test_wrong_method_is_405(http: tuple[aiohttp.ClientSession, str]) -> None:
    status, data, _ = await call(http, "GET", "/pub?topic=t")
    assert status == 405 and b"METHOD_NOT_ALLOWED" in data


async def test_channel_pause_empty_delete(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    await call(http, "POST", "/topic/create?topic=pe")
    assert (await call(http, "POST", "/channel/create?topic=pe&channel=c"))[0] == 200
    await call(http, "POST", "/mpub?topic=pe", b"1\n2\n3")
    channel = nsqd.broker.topics["pe"].channels["c"]
    assert channel.depth == 3
    assert (await call(http, "POST", "/channel/pause?topic=pe&channel=c"))[0] == 200
    assert channel.paused
    s = await subscriber(nsqd.tcp_port, "pe", "c")
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    assert (await call(http, "POST", "/channel/unpause?topic=pe&channel=c"))[0] == 200
    assert (await read_message(s))[3] == b"1"
    assert (await call(http, "POST", "/channel/empty?topic=pe&channel=c"))[0] == 200
    assert channel.depth == 0 and channel.in_flight_count == 0
    assert (await call(http, "POST", "/channel/delete?topic=pe&channel=c"))[0] == 200
    assert "c" not in nsqd.broker.topics["pe"].channels
    await s.expect_closed()


async def test_topic_pause_holds_messages_and_persists(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    s = await subscriber(nsqd.tcp_port, "tp", "c")
    assert (await call(http, "POST", "/topic/pause?topic=tp"))[0] == 200
    await call(http, "POST", "/pub?topic=tp", b"held")
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    meta = (nsqd.broker.data_path / "nsqd.dat").read_text()
    assert '"paused":true' in meta
    assert (await call(http, "POST", "/topic/unpause?topic=tp"))[0] == 200
    assert (await read_message(s))[3] == b"held"


async def test_http_defer(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer, clock: FakeClock
) -> None:
    s = await subscriber(nsqd.tcp_port, "hd", "c")
    assert (await call(http, "POST", "/pub?topic=hd&defer=1000", b"later"))[0] == 200
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    clock.advance_ms(1001)
    assert (await read_message(s))[3] == b"later"


async def test_config_get_and_put(http: tuple[aiohttp.ClientSession, str]) -> None:
    status, body, _ = await call(http, "GET", "/config/max_msg_size")
    assert (status, body) == (200, b"1048576")
    status, body, _ = await call(http, "GET", "/config/msg_timeout")
    assert (status, body) == (200, b"60000000000")
    assert (await call(http, "GET", "/config/nope"))[0] == 400
    status, body, _ = await call(http, "PUT", "/config/log_level", b"debug")
    assert (status, body) == (200, b"1")
    assert (await call(http, "PUT", "/config/log_level", b"loud"))[0] == 400


async def test_stats_text_format(http: tuple[aiohttp.ClientSession, str]) -> None:
    await call(http, "POST", "/pub?topic=txt", b"x")
    status, body, _ = await call(http, "GET", "/stats")
    assert status == 200
    text = body.decode()
    assert "Health: OK" in text and "[txt" in text
