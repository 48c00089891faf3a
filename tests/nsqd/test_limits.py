"""nsqd's limits over the wire: sizes, RDY, timeouts, IDENTIFY ranges, sampling (SPEC 1.6, 1.10)."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    dpub,
    eventually,
    identify,
    mpub,
    nsqd_options,
    pub,
    publisher,
    read_message,
    subscriber,
)

ERR = 1
MAX_MSG, MAX_BODY, MAX_RDY = 100, 1000, 50
MAX_MSG_TIMEOUT, MAX_REQ = 10_000, 5_000


@pytest.fixture
async def limited(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServer]:
    opts = nsqd_options(
        tmp_path,
        max_msg_size=MAX_MSG,
        max_body_size=MAX_BODY,
        max_rdy_count=MAX_RDY,
        max_msg_timeout_ms=MAX_MSG_TIMEOUT,
        max_req_timeout_ms=MAX_REQ,
    )
    server = NsqdServer(opts, clock=clock)
    await server.start()
    yield server
    await server.stop()


async def fatal(port: int, command: bytes) -> bytes:
    """Send ``command`` on a fresh connection; the error frame's text (the server then closes)."""
    wire = await AsyncWire.connect(port)
    await wire.send(command)
    ftype, data = await wire.read_frame()
    assert ftype == ERR, data
    await wire.expect_closed()
    return data


async def ok(port: int, command: bytes) -> None:
    wire = await AsyncWire.connect(port)
    await wire.send(command)
    assert await wire.read_frame() == (0, b"OK")


async def negotiate(port: int, fields: dict[str, object]) -> tuple[AsyncWire, dict[str, object]]:
    wire = await AsyncWire.connect(port)
    await wire.send(identify({"feature_negotiation": True, **fields}))
    ftype, data = await wire.read_frame()
    assert ftype == 0, data
    return wire, json.loads(data)


async def test_max_msg_size_bounds_pub_and_dpub(limited: NsqdServer) -> None:
    port = limited.tcp_port
    await ok(port, pub("t", b"x" * MAX_MSG))
    assert (
        await fatal(port, pub("t", b"x" * (MAX_MSG + 1)))
        == b"E_BAD_MESSAGE PUB message too big 101 > 100"
    )
    big = dpub("t", 10, b"x" * (MAX_MSG + 1))
    assert await fatal(port, big) == b"E_BAD_MESSAGE DPUB message too big 101 > 100"


async def test_max_body_size_bounds_mpub(limited: NsqdServer) -> None:
    port = limited.tcp_port
    # 4 (count) + 10 x (4 + 96) = 1004 bytes > 1000
    assert (
        await fatal(port, mpub("t", [b"y" * 96] * 10))
        == b"E_BAD_BODY MPUB body too big 1004 > 1000"
    )
    await ok(port, mpub("t", [b"y" * 95] * 10))  # 4 + 10 x 99 = 994
    too_big_message = mpub("t", [b"z" * (MAX_MSG + 1)])
    assert await fatal(port, too_big_message) == b"E_BAD_MESSAGE MPUB message too big 101 > 100"
    many = struct.pack(">i", 4) + struct.pack(">i", (MAX_BODY - 4) // 5 + 1)
    assert await fatal(port, b"MPUB t\n" + many) == b"E_BAD_BODY MPUB invalid message count 200"


async def test_max_rdy_count(limited: NsqdServer) -> None:
    wire, reply = await negotiate(limited.tcp_port, {})
    assert reply["max_rdy_count"] == MAX_RDY
    await wire.send(b"SUB t c\n")
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(b"RDY 50\nNOP\n")
    await eventually(
        lambda: limited.broker.topics["t"].channels["c"].consumers[0].ready_count == 50
    )
    await wire.send(b"RDY 51\n")
    assert await wire.read_frame() == (ERR, b"E_INVALID RDY count 51 out of range 0-50")
    await wire.expect_closed()


async def test_max_msg_timeout_bounds_identify(limited: NsqdServer) -> None:
    _, reply = await negotiate(limited.tcp_port, {"msg_timeout": MAX_MSG_TIMEOUT})
    assert (reply["msg_timeout"], reply["max_msg_timeout"]) == (MAX_MSG_TIMEOUT, MAX_MSG_TIMEOUT)
    text = await fatal(limited.tcp_port, identify({"msg_timeout": MAX_MSG_TIMEOUT + 1}))
    assert text == b"E_BAD_BODY IDENTIFY msg timeout (10001) is invalid"
    assert await fatal(limited.tcp_port, identify({"msg_timeout": 999})) == (
        b"E_BAD_BODY IDENTIFY msg timeout (999) is invalid"
    )


async def test_client_msg_timeout_drives_the_in_flight_timeout(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("mt", [b"short", b"default"]))
    assert await p.read_frame() == (0, b"OK")
    short, reply = await negotiate(nsqd.tcp_port, {"msg_timeout": 2000})
    assert reply["msg_timeout"] == 2000
    await short.send(b"SUB mt c\nRDY 1\n")
    assert await short.read_frame() == (0, b"OK")
    _, _, short_id, _ = await read_message(short)
    default = await subscriber(nsqd.tcp_port, "mt", "c", rdy=1)  # msg_timeout 60 s
    _, _, default_id, _ = await read_message(default)
    clock.advance_ms(1999)
    with pytest.raises(TimeoutError):
        await short.read_frame(timeout=0.2)
    clock.advance_ms(2)
    # The short client's message timed out; it comes back to whichever client has room.
    _, attempts, again, _ = await read_message(short)
    assert (again, attempts) == (short_id, 2)
    channel = nsqd.broker.topics["mt"].channels["c"]
    assert channel.timeout_count == 1
    assert channel.in_flight[int(default_id, 16)].attempts == 1  # 60 s: still in flight


async def test_a_shorter_msg_timeout_after_a_longer_one_still_times_out_first(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    """In flight out of deadline order (a 60 s entry before a 2 s one): the scan still finds
    the 2 s one at its time, and the 60 s one stays."""
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("mt2", [b"default", b"short"]))
    assert await p.read_frame() == (0, b"OK")
    default = await subscriber(nsqd.tcp_port, "mt2", "c", rdy=1)  # msg_timeout 60 s
    _, _, default_id, _ = await read_message(default)
    short, _ = await negotiate(nsqd.tcp_port, {"msg_timeout": 2000})
    await short.send(b"SUB mt2 c\nRDY 1\n")
    assert await short.read_frame() == (0, b"OK")
    _, _, short_id, _ = await read_message(short)
    clock.advance_ms(2001)
    _, attempts, again, _ = await read_message(short)
    assert (again, attempts) == (short_id, 2)
    channel = nsqd.broker.topics["mt2"].channels["c"]
    assert channel.timeout_count == 1
    assert channel.in_flight[int(default_id, 16)].attempts == 1
    await short.send(b"FIN " + again + b"\n")
    # while out of order, the heap stays proportional to what is in flight
    from nsqpy.broker.inflight import TIMEOUT_SLACK

    total = 3 * TIMEOUT_SLACK // 1000 * 1000
    for start in range(0, total, 1000):
        await p.send(mpub("mt2", [b"%d" % i for i in range(start, start + 1000)]))
        assert await p.read_frame() == (0, b"OK")
    await short.send(b"RDY 50\n")
    for _ in range(total):
        _, _, msg_id, _ = await read_message(short)
        await short.send(b"FIN " + msg_id + b"\n")
    part = channel.parts[0]
    await eventually(lambda: part.finish_count == total + 1)
    assert part._timeouts is not None and len(part._timeouts) <= 2 * 50 + TIMEOUT_SLACK + 1
    await default.send(b"FIN " + default_id + b"\n")
    await eventually(lambda: channel.in_flight_count == 0)


async def test_touch_never_extends_beyond_max_msg_timeout(
    limited: NsqdServer, clock: FakeClock
) -> None:
    p = await publisher(limited.tcp_port)
    await p.send(pub("touch", b"m"))
    assert await p.read_frame() == (0, b"OK")
    wire, _ = await negotiate(limited.tcp_port, {"msg_timeout": 8000})
    await wire.send(b"SUB touch c\nRDY 1\n")
    assert await wire.read_frame() == (0, b"OK")
    _, _, msg_id, _ = await read_message(wire)
    clock.advance_ms(7000)
    await wire.send(b"TOUCH " + msg_id + b"\n")
    channel = limited.broker.topics["touch"].channels["c"]
    delivered = channel.in_flight[0].delivered
    await eventually(
        lambda: channel.in_flight[0].deadline == delivered + MAX_MSG_TIMEOUT * 1_000_000
    )
    clock.advance_ms(3001)  # 10.001 s after delivery: past the ceiling, not past now + 8 s
    _, attempts, again, _ = await read_message(wire)
    assert (again, attempts) == (msg_id, 2)


async def test_req_timeout_above_max_is_clamped_dpub_is_refused(
    limited: NsqdServer, clock: FakeClock
) -> None:
    p = await publisher(limited.tcp_port)
    await p.send(pub("rq", b"again"))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(limited.tcp_port, "rq", "c")
    _, _, msg_id, _ = await read_message(s)
    await s.send(b"REQ " + msg_id + b" 999999999\n")  # clamped to 5000 ms, no error
    channel = limited.broker.topics["rq"].channels["c"]
    await eventually(lambda: channel.deferred_count == 1)
    clock.advance_ms(MAX_REQ - 1)
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    clock.advance_ms(2)
    _, attempts, again, _ = await read_message(s)
    assert (again, attempts) == (msg_id, 2)
    text = await fatal(limited.tcp_port, dpub("rq", MAX_REQ + 1, b"late"))
    assert text == b"E_INVALID DPUB timeout 5001 out of range 0-5000"
    await ok(limited.tcp_port, dpub("rq", MAX_REQ, b"late"))
    async with aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{limited.http_port}/pub?topic=rq&defer="
        async with session.post(base + str(MAX_REQ + 1), data=b"x") as resp:
            assert (resp.status, await resp.json()) == (400, {"message": "INVALID_DEFER"})
        async with session.post(base + str(MAX_REQ), data=b"x") as resp:
            assert (resp.status, await resp.read()) == (200, b"OK")


@pytest.mark.parametrize(
    ("size", "timeout", "reply_size", "reply_timeout"),
    [
        (0, 0, 16384, 250),  # defaults
        (-1, 0, 1, 0),  # unbuffered: size 1 and no timed flush
        (0, -1, 16384, 0),  # timed flush disabled
        (64, 25, 64, 25),  # the lower bounds
        (65536, 30000, 65536, 30000),  # the upper bounds
    ],
)
async def test_output_buffer_settings_in_range(
    nsqd: NsqdServer,
    clock: FakeClock,
    size: int,
    timeout: int,
    reply_size: int,
    reply_timeout: int,
) -> None:
    wire, reply = await negotiate(
        nsqd.tcp_port, {"output_buffer_size": size, "output_buffer_timeout": timeout}
    )
    assert (reply["output_buffer_size"], reply["output_buffer_timeout"]) == (
        reply_size,
        reply_timeout,
    )
    await wire.send(b"SUB ob c\nRDY 5\n")
    assert await wire.read_frame() == (0, b"OK")
    await ok(nsqd.tcp_port, pub("ob", b"later"))
    if reply_timeout >= 30000:  # still ready for more: the message waits in the buffer
        with pytest.raises(TimeoutError):
            await wire.read_frame(timeout=0.2)
    if reply_size > 1 and reply_timeout > 0:
        clock.advance_ms(reply_timeout)  # (unbuffered settings: it came at once)
    assert (await read_message(wire))[3] == b"later"


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"output_buffer_size": 63}, b"output buffer size (63) is invalid"),
        ({"output_buffer_size": 65537}, b"output buffer size (65537) is invalid"),
        ({"output_buffer_size": -2}, b"output buffer size (-2) is invalid"),
        ({"output_buffer_timeout": 24}, b"output buffer timeout (24) is invalid"),
        ({"output_buffer_timeout": 30001}, b"output buffer timeout (30001) is invalid"),
        ({"sample_rate": 100}, b"sample rate (100) is invalid"),
        ({"sample_rate": -1}, b"sample rate (-1) is invalid"),
    ],
)
async def test_identify_values_out_of_range_are_fatal(
    nsqd: NsqdServer, fields: dict[str, object], text: bytes
) -> None:
    assert await fatal(nsqd.tcp_port, identify(fields)) == b"E_BAD_BODY IDENTIFY " + text


async def test_sample_rate_delivers_a_plausible_fraction_and_discards_the_rest(
    nsqd: NsqdServer,
) -> None:
    total, rate = 400, 30
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("sampled", [b"%d" % i for i in range(total)]))
    assert await p.read_frame() == (0, b"OK")
    wire, reply = await negotiate(nsqd.tcp_port, {"sample_rate": rate})
    assert reply["sample_rate"] == rate
    await wire.send(f"SUB sampled c\nRDY {total}\n".encode())
    assert await wire.read_frame() == (0, b"OK")
    channel = nsqd.broker.topics["sampled"].channels["c"]
    await eventually(lambda: channel.depth == 0)
    got = len(channel.in_flight)
    for _ in range(got):
        _, _, msg_id, _ = await read_message(wire)
        await wire.send(b"FIN " + msg_id + b"\n")
    await eventually(lambda: channel.cursor.confirmed == total)
    # A message is kept when rand(0..99) <= rate: p = 0.31, sd 9.2 over 400; +-5.8 sd bounds.
    assert 70 <= got <= 178, got
    assert channel.message_count == total and channel.depth == 0
    with pytest.raises(TimeoutError):  # the skipped ones are discarded, never requeued
        await wire.read_frame(timeout=0.2)
