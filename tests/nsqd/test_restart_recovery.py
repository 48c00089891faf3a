"""Restarting over damaged state: a channel whose cursor is lost still gets its backlog."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import aiohttp
import pytest

from nsqpy.broker.client import Client
from nsqpy.broker.partition import LogSettings
from nsqpy.broker.topic import Topic
from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.message import decode_message
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.storage import DelayedStore, SyncPolicy
from nsqpy.testing import (
    FakeClock,
    FrameSink,
    cursor_path,
    eventually,
    mpub,
    nsqd_options,
    publisher,
    read_message,
    subscriber,
)


async def consume(port: int, topic: str, channel: str, n: int) -> list[bytes]:
    s = await subscriber(port, topic, channel, rdy=n)
    got = []
    for _ in range(n):
        _, _, msg_id, body = await read_message(s)
        await s.send(b"FIN " + msg_id + b"\n")
        got.append(body)
    await s.close()
    return got


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
async def test_a_channel_whose_cursor_is_lost_restarts_at_the_low_watermark(
    tmp_path: Path, clock: FakeClock, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await first.start()
    p = await publisher(first.tcp_port)
    await p.send(mpub("t", [b"m%d" % i for i in range(10)]))
    assert await p.read_frame() == (0, b"OK")
    assert await consume(first.tcp_port, "t", "c", 4) == [b"m0", b"m1", b"m2", b"m3"]
    channel = first.broker.topics["t"].channels["c"]
    await eventually(lambda: channel.cursor.confirmed == 4)
    await first.stop()

    path = cursor_path(tmp_path / "data", "t", "c")
    if damage == "corrupt":
        path.write_bytes(b"\x00garbage" + path.read_bytes()[8:])
    else:
        path.unlink()
    again = NsqdServer(nsqd_options(tmp_path), clock=clock)
    with caplog.at_level(logging.ERROR, "nsqpy"):
        await again.start()
    try:
        assert "restarting it at the log's low watermark 0" in caplog.text
        # Nothing is skipped: the whole log comes again (duplicates allowed, losses not).
        got = await consume(again.tcp_port, "t", "c", 10)
        assert got == [b"m%d" % i for i in range(10)]
    finally:
        await again.stop()


async def test_a_corrupt_batch_mid_log_is_skipped_by_channels_and_the_log_read_api(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    first = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await first.start()
    p = await publisher(first.tcp_port)
    for b in range(5):  # one batch each: every MPUB is acknowledged before the next
        await p.send(mpub("t", [b"b%d-%d" % (b, i) for i in range(3)]))
        assert await p.read_frame() == (0, b"OK")
    await first.stop()
    (seg,) = (tmp_path / "data" / "topics" / "topic-t" / "p0").glob("*.log")
    data = bytearray(seg.read_bytes())
    where = data.index(b"b2-1")  # a body byte of the third batch (offsets 6..8)
    data[where] ^= 0xFF
    seg.write_bytes(bytes(data))

    again = NsqdServer(nsqd_options(tmp_path), clock=clock)
    with caplog.at_level(logging.ERROR, "nsqpy"):
        await again.start()
    try:
        # only the damaged record is lost: the rest of its batch still held and is kept
        assert "offsets 6..8 less the 2 kept are lost" in caplog.text
        kept = [b"b%d-%d" % (b, i) for b in range(5) for i in range(3) if (b, i) != (2, 1)]
        assert await consume(again.tcp_port, "t", "c", 14) == kept
        channel = again.broker.topics["t"].channels["c"]
        await eventually(lambda: channel.cursor.confirmed == 15)  # the lost offsets do not pin it
        url = f"http://127.0.0.1:{again.http_port}/log/read?topic=t&offset=4"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200
            body = await resp.read()
            assert resp.headers["X-NSQ-Next-Offset"] == "15"
        (n,) = struct.unpack_from("<I", body, 8)
        assert struct.unpack_from(f"<{n}Q", body, 16) == (4, 5, 6, 8, 9, 10, 11, 12, 13, 14)
    finally:
        await again.stop()


@pytest.mark.parametrize("number", [0, 1])
def test_deferred_entries_stay_out_of_the_cursor_window_on_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, number: int
) -> None:
    """A crash between the delayed store's commit and the cursor's save: the reloaded
    channel confirms what the store holds (the log must not deliver it again), and drops an
    entry past the log's end instead of confirming offsets that do not exist yet. In a
    partitioned topic, each partition's cursor against its own delayed store."""
    settings = LogSettings(
        sync=SyncPolicy.parse("every:1"), segment_bytes=1 << 20, mem_queue_size=100
    )
    topic = Topic("t", tmp_path / "t", settings, partitions=number + 1)
    topic.create_channel("c")
    part = topic.partitions[number]
    part.publish([b"m0", b"m1", b"m2"], timestamp=1)
    part.log.flush()
    topic.close()  # the cursor says: nothing confirmed
    store = DelayedStore(tmp_path / "t" / f"p{number}" / "delayed.sqlite")
    store.put("c", 1, deliver_at=1 << 62, attempts=1)  # REQ'd with a delay before the crash
    store.put("c", 7, deliver_at=1 << 62, attempts=1)  # its record was lost with the tail
    store.close()

    again = Topic("t", tmp_path / "t", settings, partitions=number + 1)
    with caplog.at_level(logging.ERROR, "nsqpy"):
        channel = again.create_channel("c", listed=True).parts[number]
    assert channel.deferred.offsets() == [1]
    assert "1 deferred entries whose records the log lost" in caplog.text
    # the read skips offset 1 (the deferred set delivers it) and confirms it in order
    assert channel.depth == 2 and channel.deferred_count == 1
    sink = FrameSink()
    client = Client(sink=sink, ready_count=10, state=SUBSCRIBED)
    channel.add_consumer(client)
    channel.pump(now=2)
    assert [decode_message(f[8:]).body for f in sink.frames] == [b"m0", b"m2"]
    assert channel.cursor.is_confirmed(1) and not channel.cursor.is_confirmed(0)
    assert not channel.cursor.is_confirmed(7) and channel.cursor.ranges == [(1, 2)]
    again.close()
