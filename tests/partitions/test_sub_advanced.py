"""youzan's SUB_ADVANCED through the wire (in-process nsqd, fake clock): messages carry
youzan's detail; a start position moves the channel's cursor when the subscriber is the
channel's only consumer, and a bad one is refused before anything is subscribed.
"""

from __future__ import annotations

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import decode_traced_reply, encode_mpub_trace, encode_pub_trace
from nsqpy.protocol.message import decode_message
from nsqpy.testing import AsyncWire, FakeClock

from .conftest import create_topic, offset_of, partition_of, post, stats, subscribe


async def publish(nsqd: NsqdServer, topic: str, partition: int, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        path = f"/pub?topic={topic}&partition={partition}"
        assert await post(nsqd, path, b"%d-%d" % (partition, i)) == (200, b"OK")


async def bodies(wire: AsyncWire, count: int, partition: int) -> list[bytes]:
    """``count`` messages, each FIN'd, their detail checked against their ID."""
    out = []
    for _ in range(count):
        ftype, data = await wire.read_frame(5.0)
        assert ftype == 2, data
        msg = decode_message(data, detail=True)
        assert partition_of(msg.id) == partition
        assert (msg.queue_offset, msg.raw_size) == (offset_of(msg.id), 1)
        out.append(msg.body)
        await wire.send(b"FIN " + msg.id + b"\n")
    return out


async def test_advanced_subscribers_get_the_detail_and_start_where_asked(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    await create_topic(nsqd, "a", 2)
    for channel in ("all", "off", "end"):
        assert await post(nsqd, f"/channel/create?topic=a&channel={channel}") == (200, b"")
    for i in range(6):  # partition 1's messages one second apart: 1-i at start + i s
        await publish(nsqd, "a", 1, 1, i)
        clock.advance_ms(1000)
    await publish(nsqd, "a", 0, 3)

    plain = await subscribe(nsqd.tcp_port, "SUB_ADVANCED a all 0")
    assert await bodies(plain, 3, 0) == [b"0-0", b"0-1", b"0-2"]

    by_offset = await subscribe(nsqd.tcp_port, "SUB_ADVANCED a off 1 virtual_queue:4")
    assert await bodies(by_offset, 2, 1) == [b"1-4", b"1-5"]

    start_s = FakeClock().now // 1_000_000_000
    by_time = await subscribe(nsqd.tcp_port, f"SUB_ADVANCED a ts 1 timestamp:{start_s + 3}")
    assert await bodies(by_time, 3, 1) == [b"1-3", b"1-4", b"1-5"]

    by_count = await subscribe(nsqd.tcp_port, "SUB_ADVANCED a cnt 1 msgcount:5")
    assert await bodies(by_count, 1, 1) == [b"1-5"]

    newest = await subscribe(nsqd.tcp_port, "SUB_ADVANCED a end 1 special:-1")
    assert await newest.frame_within(0.2) is None
    await publish(nsqd, "a", 1, 1, 6)
    assert await bodies(newest, 1, 1) == [b"1-6"]
    # The other partition of a channel started in partition 1 is where it was: its three
    # messages still to read.
    doc = await stats(nsqd, "a")
    ends = {c["channel_name"]: [p["depth"] for p in c["partitions"]] for c in doc["channels"]}
    assert ends["end"] == [3, 0] and ends["off"] == [3, 0]


async def test_a_client_resumes_at_offset_plus_size_as_with_youzans(nsqd: NsqdServer) -> None:
    """Youzan's offsets count bytes and a message's detail (or a traced reply) gives the
    bytes it takes, so a client resumes after a message at offset + size. nsqpy's offsets
    count messages and the size it gives is in the same unit: resuming there is the next
    message, never one further on."""
    await create_topic(nsqd, "r", 1)
    producer = await AsyncWire.connect(nsqd.tcp_port)
    await producer.send(encode_pub_trace("r", 7, b"r-0", partition=0))
    _, reply = await producer.read_frame()
    _, _, offset, size = decode_traced_reply(reply)
    await producer.send(
        encode_mpub_trace("r", [(8, b"r-1"), (9, b"r-2"), (10, b"r-3")], partition=0)
    )
    _, reply = await producer.read_frame()
    _, _, batch_offset, batch_size = decode_traced_reply(reply)
    assert batch_offset == offset + size
    await publish(nsqd, "r", 0, 1, 4)  # (offset 4: "0-4")

    after_reply = await subscribe(
        nsqd.tcp_port, f"SUB_ADVANCED r a 0 virtual_queue:{offset + size}"
    )
    assert await bodies(after_reply, 4, 0) == [b"r-1", b"r-2", b"r-3", b"0-4"]
    after_batch = await subscribe(
        nsqd.tcp_port, f"SUB_ADVANCED r b 0 virtual_queue:{batch_offset + batch_size}"
    )
    assert await bodies(after_batch, 1, 0) == [b"0-4"]

    first = await subscribe(nsqd.tcp_port, "SUB_ADVANCED r c 0 special:-2", rdy=1)
    _, data = await first.read_frame(5.0)
    msg = decode_message(data, detail=True)
    assert msg.body == b"r-0"
    resumed = await subscribe(
        nsqd.tcp_port, f"SUB_ADVANCED r d 0 virtual_queue:{msg.queue_offset + msg.raw_size}"
    )
    assert (await bodies(resumed, 1, 0)) == [b"r-1"]


async def test_a_later_subscriber_joins_where_the_channel_is(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "j", 1)
    await publish(nsqd, "j", 0, 4)
    first = await subscribe(nsqd.tcp_port, "SUB_ADVANCED j c 0 virtual_queue:2", rdy=1)
    second = await subscribe(nsqd.tcp_port, "SUB_ADVANCED j c 0 virtual_queue:0", rdy=0)
    assert await bodies(first, 2, 0) == [b"0-2", b"0-3"]
    assert await second.frame_within(0.1) is None


async def test_bad_positions_are_fatal_and_subscribe_nothing(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "b", 1)
    await publish(nsqd, "b", 0, 2)
    for line, text in [
        (b"SUB_ADVANCED b c 0 offset\n", b"E_INVALID invalid consume position 'offset'"),
        (b"SUB_ADVANCED b c 0 special:-3\n", b"E_INVALID special position must be -1 or -2"),
        (b"SUB_ADVANCED b c 0 weekday:1\n", b"E_INVALID invalid consume position"),
        (b"SUB_ADVANCED b c 0 virtual_queue:9\n", b"E_INVALID offset 9 is outside [0, 2]"),
    ]:
        wire = await AsyncWire.connect(nsqd.tcp_port)
        await wire.send(line)
        ftype, data = await wire.read_frame()
        assert ftype == 1 and data.startswith(text), data
        await wire.expect_closed()
    # Only the out-of-range position got as far as subscribing: the channel it made is
    # where it was, with both messages still to read.
    doc = await stats(nsqd, "b")
    assert [(c["channel_name"], c["depth"]) for c in doc["channels"]] == [("c", 2)]
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(b"SUB_ADVANCED b c 3\n")
    ftype, data = await wire.read_frame()
    assert ftype == 1 and data.startswith(b"E_TOPIC_NOT_EXIST"), data
