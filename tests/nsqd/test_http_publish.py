"""HTTP publishing as nsqd reads it: /mpub text and binary modes, /pub bodies and defer bounds."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import FakeClock, nsqd_options, read_message, subscriber

MAX_MSG, MAX_BODY = 100, 1000


@pytest.fixture
async def small(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServer]:
    server = NsqdServer(
        nsqd_options(tmp_path, max_msg_size=MAX_MSG, max_body_size=MAX_BODY), clock=clock
    )
    await server.start()
    yield server
    await server.stop()


async def post(server: NsqdServer, path: str, body: bytes) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.post(url, data=body) as resp:
        return resp.status, await resp.read()


def err(code: str) -> bytes:
    return json.dumps({"message": code}, separators=(",", ":")).encode()


async def drain(server: NsqdServer, topic: str, expect: int) -> list[bytes]:
    wire = await subscriber(server.tcp_port, topic, "c", rdy=100)
    got = [(await read_message(wire))[3] for _ in range(expect)]
    with pytest.raises(TimeoutError):
        await wire.read_frame(timeout=0.2)
    return got


def binary(*bodies: bytes, count: int | None = None) -> bytes:
    n = len(bodies) if count is None else count
    return struct.pack(">i", n) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


@pytest.mark.parametrize(
    ("body", "messages"),
    [
        (b"a\nb", [b"a", b"b"]),
        (b"a\nb\n", [b"a", b"b"]),  # a trailing newline adds nothing
        (b"\n\na\n\n\nb\n\n", [b"a", b"b"]),  # empty lines are skipped
        (b"a\r\nb\r\n", [b"a\r", b"b\r"]),  # "\r" is kept
        (b" \n\t", [b" ", b"\t"]),  # whitespace is a message
    ],
)
async def test_mpub_text_mode(small: NsqdServer, body: bytes, messages: list[bytes]) -> None:
    assert await post(small, "/mpub?topic=text", body) == (200, b"OK")
    assert await drain(small, "text", len(messages)) == messages


async def test_mpub_text_mode_without_messages_succeeds_and_creates_the_topic(
    small: NsqdServer,
) -> None:
    assert await post(small, "/mpub?topic=none", b"\n\n\n") == (200, b"OK")
    assert await post(small, "/mpub?topic=none2", b"") == (200, b"OK")
    topics = small.broker.topics
    assert topics["none"].message_count == 0 and "none2" in topics


async def test_mpub_text_mode_limits(small: NsqdServer) -> None:
    line = b"x" * MAX_MSG
    assert await post(small, "/mpub?topic=lim", line + b"\n" + line) == (200, b"OK")
    assert await post(small, "/mpub?topic=lim", line + b"x\nok") == (413, err("MSG_TOO_BIG"))
    nine = (line + b"\n") * 9 + b"y" * 91  # exactly 1000 bytes
    assert await post(small, "/mpub?topic=lim", nine) == (200, b"OK")
    assert await post(small, "/mpub?topic=lim", nine + b"z") == (413, err("BODY_TOO_BIG"))
    assert small.broker.topics["lim"].message_count == 12  # nothing of the refused ones


@pytest.mark.parametrize("flag", ["true", "1", "yes", "anything"])  # unknown values mean binary
async def test_mpub_binary_mode(small: NsqdServer, flag: str) -> None:
    body = binary(b"one", b"t\nwo", b"\x00\xff")
    assert await post(small, f"/mpub?topic=bin&binary={flag}", body) == (200, b"OK")
    assert await drain(small, "bin", 3) == [b"one", b"t\nwo", b"\x00\xff"]


async def test_binary_false_means_text(small: NsqdServer) -> None:
    assert await post(small, "/mpub?topic=txt&binary=false", b"a\nb") == (200, b"OK")
    assert await post(small, "/mpub?topic=txt&binary=0", b"c") == (200, b"OK")
    assert await drain(small, "txt", 3) == [b"a", b"b", b"c"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"\x00\x00\x00", "BAD_BODY"),  # no count
        (binary(count=0), "BAD_BODY"),
        (binary(b"a", count=-1), "BAD_BODY"),
        (binary(b"a", count=(MAX_BODY - 4) // 5 + 1), "BAD_BODY"),
        (struct.pack(">ii", 1, 0), "BAD_MESSAGE"),  # empty message
        (struct.pack(">ii", 1, -5), "BAD_MESSAGE"),
        (binary(b"x" * (MAX_MSG + 1)), "BAD_MESSAGE"),
        (binary(b"abc")[:-1], "BAD_MESSAGE"),  # cut short
        (binary(b"a", b"b", count=3), "BAD_MESSAGE"),  # fewer than counted
    ],
)
async def test_mpub_binary_errors(small: NsqdServer, body: bytes, code: str) -> None:
    assert await post(small, "/mpub?topic=bad&binary=true", body) == (413, err(code))
    assert small.broker.topics["bad"].message_count == 0


async def test_mpub_binary_ignores_trailing_bytes(small: NsqdServer) -> None:
    assert await post(small, "/mpub?topic=trail&binary=1", binary(b"a") + b"junk") == (200, b"OK")
    assert await drain(small, "trail", 1) == [b"a"]


async def test_mpub_checks_content_length_before_the_topic(small: NsqdServer) -> None:
    assert await post(small, "/mpub", b"x" * (MAX_BODY + 1)) == (413, err("BODY_TOO_BIG"))
    assert await post(small, "/mpub", b"x") == (400, err("MISSING_ARG_TOPIC"))


async def test_pub_checks_the_body_before_the_topic(small: NsqdServer) -> None:
    assert await post(small, "/pub", b"") == (400, err("MSG_EMPTY"))
    assert await post(small, "/pub?topic=bad!", b"x" * (MAX_MSG + 1)) == (413, err("MSG_TOO_BIG"))
    assert await post(small, "/pub?topic=bad!", b"x") == (400, err("INVALID_TOPIC"))
    assert await post(small, "/pub?topic=ok", b"x" * MAX_MSG) == (200, b"OK")


async def test_a_large_pub_body_arrives_whole(nsqd: NsqdServer) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB, the default --max-msg-size
    assert await post(nsqd, "/pub?topic=large", body) == (200, b"OK")
    assert await drain(nsqd, "large", 1) == [body]
    assert await post(nsqd, "/pub?topic=large", body + b"!") == (413, err("MSG_TOO_BIG"))


@pytest.mark.parametrize(
    ("defer", "status"),
    [
        ("0", 200),
        ("3600000", 200),  # --max-req-timeout
        ("+5", 200),  # Go's ParseInt takes a sign
        ("3600001", 400),
        ("-1", 400),
        ("1.5", 400),
        ("", 400),
        ("1_000", 400),
        (" 5", 400),
        ("99999999999999999999", 400),
    ],
)
async def test_pub_defer_bounds(small: NsqdServer, defer: str, status: int) -> None:
    from urllib.parse import quote

    got = await post(small, f"/pub?topic=defer&defer={quote(defer)}", b"m")
    assert got == ((200, b"OK") if status == 200 else (400, err("INVALID_DEFER")))


async def test_pub_defer_delays_delivery(small: NsqdServer, clock: FakeClock) -> None:
    wire = await subscriber(small.tcp_port, "later", "c")
    assert await post(small, "/pub?topic=later&defer=3000", b"m") == (200, b"OK")
    channel = small.broker.topics["later"].channels["c"]
    assert channel.deferred_count == 1
    with pytest.raises(TimeoutError):
        await wire.read_frame(timeout=0.2)
    clock.advance_ms(3001)
    assert (await read_message(wire))[3] == b"m"
