"""nsqd over TCP, read as wire transcripts against an in-process daemon with a fake clock."""

from __future__ import annotations

import json
import re

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


async def test_wrong_magic_gets_bad_protocol_and_close(nsqd: NsqdServer) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port, magic=False)
    await wire.send(b"  V1")
    assert await wire.read_frame() == (ERR, b"E_BAD_PROTOCOL")
    await wire.expect_closed()


async def test_identify_plain_ok_and_feature_negotiation_json(nsqd: NsqdServer) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(identify({"client_id": "a", "hostname": "h"}))
    assert await wire.read_frame() == (0, b"OK")
    other = await AsyncWire.connect(nsqd.tcp_port)
    await other.send(identify({"feature_negotiation": True, "msg_timeout": 5000}))
    ftype, data = await other.read_frame()
    reply = json.loads(data)
    assert ftype == 0
    assert reply["max_rdy_count"] == 2500
    assert reply["msg_timeout"] == 5000
    assert reply["version"] == "1.3.0"
    assert list(reply)[:3] == ["max_rdy_count", "version", "max_msg_timeout"]


async def test_pub_sub_fin_delivers_with_id_attempts_and_timestamp(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(pub("orders", b"hello"))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(nsqd.tcp_port, "orders", "ch")
    ts, attempts, msg_id, body = await read_message(s)
    assert (attempts, body) == (1, b"hello")
    assert re.fullmatch(rb"[0-9a-f]{16}", msg_id)
    assert ts == clock.now
    await s.send(b"FIN " + msg_id + b"\n")
    channel = nsqd.broker.topics["orders"].channels["ch"]
    await eventually(lambda: channel.finish_count == 1)
    assert channel.in_flight_count == 0


async def test_each_channel_gets_every_message_and_consumers_share_one(nsqd: NsqdServer) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(pub("t", b"warmup"))
    assert await p.read_frame() == (0, b"OK")
    a1 = await subscriber(nsqd.tcp_port, "t", "a")
    a2 = await subscriber(nsqd.tcp_port, "t", "a")
    b1 = await subscriber(nsqd.tcp_port, "t", "b")
    bodies = [f"m{i}".encode() for i in range(20)]
    await p.send(mpub("t", bodies))
    assert await p.read_frame() == (0, b"OK")
    # "a" was the topic's first channel and took the buffered warmup; "b" starts at the tail.
    got_b = []
    for _ in range(20):
        _, _, msg_id, body = await read_message(b1)
        got_b.append(body)
        await b1.send(b"FIN " + msg_id + b"\n")
    assert sorted(got_b) == sorted(bodies)
    got_a: dict[int, list[bytes]] = {0: [], 1: []}
    for _ in range(30):
        for i, wire in enumerate((a1, a2)):
            try:
                _, _, msg_id, body = await read_message(wire, timeout=0.3)
            except TimeoutError:
                continue
            got_a[i].append(body)
            await wire.send(b"FIN " + msg_id + b"\n")
        if len(got_a[0]) + len(got_a[1]) == 21:
            break
    assert sorted(got_a[0] + got_a[1]) == sorted([b"warmup", *bodies])
    assert got_a[0] and got_a[1], "both consumers of channel a get a share"


async def test_rdy_is_a_window_not_a_credit(nsqd: NsqdServer) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("w", [b"1", b"2", b"3"]))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(nsqd.tcp_port, "w", "c", rdy=1)
    _, _, id1, _ = await read_message(s)
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    await s.send(b"FIN " + id1 + b"\n")
    _, _, id2, body2 = await read_message(s)  # no new RDY: the window reopens on FIN
    assert body2 == b"2"
    await s.send(b"FIN " + id2 + b"\n")
    assert (await read_message(s))[3] == b"3"


async def test_req_redelivers_same_id_with_more_attempts(nsqd: NsqdServer) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(pub("r", b"x"))
    await p.read_frame()
    s = await subscriber(nsqd.tcp_port, "r", "c")
    _, a1, id1, _ = await read_message(s)
    await s.send(b"REQ " + id1 + b" 0\n")
    _, a2, id2, body = await read_message(s)
    assert (a1, a2, id1, body) == (1, 2, id2, b"x")
    assert nsqd.broker.topics["r"].channels["c"].requeue_count == 1


async def test_req_with_delay_is_deferred_until_due(nsqd: NsqdServer, clock: FakeClock) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(pub("d", b"later"))
    await p.read_frame()
    s = await subscriber(nsqd.tcp_port, "d", "c")
    _, _, msg_id, _ = await read_message(s)
    await s.send(b"REQ " + msg_id + b" 5000\n")
    channel = nsqd.broker.topics["d"].channels["c"]
    await eventually(lambda: channel.deferred_count == 1)
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    clock.advance_ms(5001)
    _, attempts, again, body = await read_message(s)
    assert (again, attempts, body) == (msg_id, 2, b"later")
    await s.send(b"FIN " + again + b"\n")
    await eventually(lambda: channel.deferred.count() == 0)


async def test_dpub_waits_for_its_delay(nsqd: NsqdServer, clock: FakeClock) -> None:
    s = await subscriber(nsqd.tcp_port, "dp", "c")
    p = await publisher(nsqd.tcp_port)
    await p.send(dpub("dp", 2000, b"deferred"))
    assert await p.read_frame() == (0, b"OK")
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    assert nsqd.broker.topics["dp"].channels["c"].deferred_count == 1
    clock.advance_ms(2001)
    assert (await read_message(s))[3] == b"deferred"


async def test_in_flight_timeout_requeues_and_touch_extends(
    tmp_path: object, clock: FakeClock
) -> None:
    server = NsqdServer(nsqd_options(tmp_path, msg_timeout_ms=1000), clock=clock)  # type: ignore[arg-type]
    await server.start()
    try:
        p = await publisher(server.tcp_port)
        await p.send(pub("to", b"slow"))
        await p.read_frame()
        s = await subscriber(server.tcp_port, "to", "c")
        _, _, msg_id, _ = await read_message(s)
        clock.advance_ms(800)
        await s.send(b"TOUCH " + msg_id + b"\n")  # (no answer: the time moves once nsqd read it)
        (conn,) = [c for c in server.connections if c.client.channel is not None]
        await eventually(lambda: conn.last_recv == clock(), 5, what="nsqd read the TOUCH")
        clock.advance_ms(800)  # 1600 ms after delivery, 800 after the touch: still in flight
        with pytest.raises(TimeoutError):
            await s.read_frame(timeout=0.2)
        channel = server.broker.topics["to"].channels["c"]
        assert channel.timeout_count == 0  # (redelivered, it would wait in the output buffer)
        clock.advance_ms(300)
        _, attempts, again, _ = await read_message(s)
        assert (again, attempts) == (msg_id, 2)
        assert channel.timeout_count == 1
    finally:
        await server.stop()


async def test_fin_of_unknown_id_is_not_fatal(nsqd: NsqdServer) -> None:
    s = await subscriber(nsqd.tcp_port, "f", "c")
    await s.send(b"FIN 0000000000000001\n")
    ftype, data = await s.read_frame()
    assert ftype == ERR and data.startswith(b"E_FIN_FAILED")
    await s.send(pub("other", b"still here"))
    assert await s.read_frame() == (0, b"OK")


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (b"FOO\n", b"E_INVALID"),
        (b"RDY 5\n", b"E_INVALID"),
        (b"PUB bad!topic\n\x00\x00\x00\x01x", b"E_BAD_TOPIC"),
        (b"SUB t bad!chan\n", b"E_BAD_CHANNEL"),
        (b"PUB t\n\x00\x00\x00\x00", b"E_BAD_MESSAGE"),
        (b"FIN short\n", b"E_INVALID"),
    ],
)
async def test_fatal_errors_close_the_connection(
    nsqd: NsqdServer, command: bytes, code: bytes
) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(command)
    ftype, data = await wire.read_frame()
    assert ftype == ERR and data.split(b" ")[0] == code, data
    await wire.expect_closed()


async def test_rdy_out_of_range_is_fatal(nsqd: NsqdServer) -> None:
    s = await subscriber(nsqd.tcp_port, "x", "c", rdy=0)
    await s.send(b"RDY 2501\n")
    ftype, data = await s.read_frame()
    assert (ftype, data) == (ERR, b"E_INVALID RDY count 2501 out of range 0-2500")
    await s.expect_closed()


async def test_cls_stops_delivery_ignores_rdy_and_still_takes_fin(nsqd: NsqdServer) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("cls", [b"a", b"b", b"c"]))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(nsqd.tcp_port, "cls", "c", rdy=1)
    _, _, msg_id, body = await read_message(s)
    assert body == b"a"
    await s.send(b"CLS\n")
    assert await s.read_frame() == (0, b"CLOSE_WAIT")
    channel = nsqd.broker.topics["cls"].channels["c"]
    (client,) = channel.consumers
    assert client.ready_count == 0
    # RDY after CLS is dropped without a reply, as nsqd does ("ignoring RDY after CLS"):
    # the PUB sent behind it is answered next, nothing was delivered before its OK.
    await s.send(b"RDY 10\n" + pub("cls", b"d"))
    assert await s.read_frame() == (0, b"OK")
    assert client.ready_count == 0
    # What it has in flight can still be finished.
    await s.send(b"FIN " + msg_id + b"\n")
    await eventually(lambda: channel.finish_count == 1 and channel.depth == 3)
    other = await subscriber(nsqd.tcp_port, "cls", "c", rdy=10)
    assert sorted([(await read_message(other))[3] for _ in range(3)]) == [b"b", b"c", b"d"]
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.3)  # the closing client got none of them
    await s.send(b"CLS\n")  # a second CLS: the state no longer allows it (fatal)
    assert await s.read_frame() == (ERR, b"E_INVALID cannot CLS in current state")
    await s.expect_closed()


async def test_heartbeats_sent_and_silent_client_closed(nsqd: NsqdServer, clock: FakeClock) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    wire.answer_heartbeats = False
    await wire.send(identify({"heartbeat_interval": 1000}))
    assert await wire.read_frame() == (0, b"OK")
    with pytest.raises(TimeoutError):  # the heartbeat follows the server's clock, not time
        await wire.read_frame(timeout=0.3)
    clock.advance_ms(1000)
    assert await wire.read_frame(timeout=3) == (0, b"_heartbeat_")
    clock.advance_ms(999)
    with pytest.raises(TimeoutError):
        await wire.read_frame(timeout=0.3)  # not yet 2 heartbeats without a command
    await wire.send(b"NOP\n")  # any command resets the read deadline
    # (once nsqd has read it: the ticker may run in this very turn of the loop, before the
    # NOP is read, and would see the time below with no command since IDENTIFY)
    (conn,) = nsqd.connections
    await eventually(lambda: conn.last_recv == clock(), 5, what="nsqd read the NOP")
    clock.advance_ms(1500)
    assert await wire.read_frame(timeout=3) == (0, b"_heartbeat_")
    clock.advance_ms(2001)
    await wire.expect_closed(timeout=5)


async def test_first_channel_gets_buffered_messages_later_ones_start_at_tail(
    nsqd: NsqdServer,
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("buf", [b"early1", b"early2"]))
    await p.read_frame()
    first = await subscriber(nsqd.tcp_port, "buf", "first")
    assert [(await read_message(first))[3] for _ in range(2)] == [b"early1", b"early2"]
    second = await subscriber(nsqd.tcp_port, "buf", "second")
    await p.send(pub("buf", b"late"))
    await p.read_frame()
    assert (await read_message(second))[3] == b"late"


async def test_ephemeral_channel_goes_away_with_its_last_client(nsqd: NsqdServer) -> None:
    s = await subscriber(nsqd.tcp_port, "e", "tmp#ephemeral")
    topic = nsqd.broker.topics["e"]
    assert "tmp#ephemeral" in topic.channels
    await s.close()
    await eventually(lambda: "tmp#ephemeral" not in topic.channels)


async def test_restart_keeps_messages_cursor_and_metadata(
    tmp_path: object, clock: FakeClock
) -> None:
    opts = nsqd_options(tmp_path)  # type: ignore[arg-type]
    server = NsqdServer(opts, clock=clock)
    await server.start()
    p = await publisher(server.tcp_port)
    await p.send(mpub("keep", [b"a", b"b", b"c"]))
    await p.read_frame()
    s = await subscriber(server.tcp_port, "keep", "c", rdy=1)
    _, _, msg_id, body = await read_message(s)
    assert body == b"a"
    await s.send(b"FIN " + msg_id + b"\n")
    channel = server.broker.topics["keep"].channels["c"]
    await eventually(lambda: channel.finish_count == 1)
    server.broker.topics["keep"].channels["c"].paused = True
    await server.stop()

    again = NsqdServer(nsqd_options(tmp_path, tcp_address="127.0.0.1:0"), clock=clock)  # type: ignore[arg-type]
    await again.start()
    try:
        assert again.broker.topics["keep"].channels["c"].paused is True
        again.broker.topics["keep"].channels["c"].paused = False
        s2 = await subscriber(again.tcp_port, "keep", "c")
        got = [(await read_message(s2))[3] for _ in range(2)]
        assert got == [b"b", b"c"]
    finally:
        await again.stop()


async def test_a_burst_of_fins_in_one_packet_answers_each_refusal_in_order(
    nsqd: NsqdServer,
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("burst", [b"m0", b"m1", b"m2", b"m3"]))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(nsqd.tcp_port, "burst", "c")
    ids = [(await read_message(s))[2] for _ in range(4)]
    other = await subscriber(nsqd.tcp_port, "burst", "c")
    unknown = b"%016x" % (int(ids[3], 16) + 100)
    await s.send(b"".join(b"FIN " + i + b"\n" for i in (ids[0], unknown, ids[1], ids[0], ids[2])))
    await other.send(b"FIN " + ids[3] + b"\n")
    errors = [await s.read_frame(), await s.read_frame()]
    assert errors == [
        (ERR, b"E_FIN_FAILED FIN " + unknown + b" failed ID not in flight"),
        (ERR, b"E_FIN_FAILED FIN " + ids[0] + b" failed ID not in flight"),
    ]
    assert await other.read_frame() == (
        ERR,
        b"E_FIN_FAILED FIN " + ids[3] + b" failed client does not own message",
    )
    channel = nsqd.broker.topics["burst"].channels["c"]
    assert (channel.finish_count, channel.in_flight_count) == (3, 1)
    await s.send(b"FIN " + ids[3] + b"\n")  # the owner still can, the connection is fine
    await eventually(lambda: (channel.finish_count, channel.in_flight_count) == (4, 0), 5)


async def test_finished_messages_do_not_pile_up_in_the_timeout_heap(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    """Memory follows what is in flight, not what was delivered within one msg_timeout;
    a message held across the heap's rebuilds still times out."""
    total = 12_000
    p = await publisher(nsqd.tcp_port)
    for start in range(0, total, 1000):
        await p.send(mpub("heap", [b"%d" % i for i in range(start, start + 1000)]))
        assert await p.read_frame() == (0, b"OK")
    s = await subscriber(nsqd.tcp_port, "heap", "c", rdy=50)
    _, _, held, _ = await read_message(s)  # never FIN'd
    for _ in range(total - 1):
        _, _, msg_id, _ = await read_message(s)
        await s.send(b"FIN " + msg_id + b"\n")
    part = nsqd.broker.topics["heap"].channels["c"].parts[0]
    await eventually(lambda: part.finish_count == total - 1)
    # one msg_timeout for every client: the in-flight table is in deadline order, no heap
    assert part._timeouts is None and len(part.in_flight) == 1
    assert part.in_flight_count == 1
    half = nsqd.opts.msg_timeout_ms // 2
    clock.advance_ms(half)  # (in two steps, answering heartbeats between them)
    await s.send(b"NOP\n")
    (conn,) = [c for c in nsqd.connections if c.client.channel is not None]
    await eventually(lambda: conn.last_recv == clock(), 5, what="nsqd read the NOP")
    clock.advance_ms(half + 1)
    ftype, data = await s.read_frame()
    while data == b"_heartbeat_":
        await s.send(b"NOP\n")
        ftype, data = await s.read_frame()
    assert ftype == 2 and (data[10:26], data[8:10]) == (held, b"\x00\x02")
