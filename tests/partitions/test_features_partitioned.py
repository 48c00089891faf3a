"""The features beyond NSQ on partitioned topics (in-process nsqd, fake clock): replay per
partition or all, dead letters, TTL and depth bounds over every partition's cursor, trace
ids of PUB_TRACE/MPUB_TRACE/PUB_EXT reaching the trace store, /stats sums, and ephemeral
topics refusing partitions.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from nsqpy.broker.client import Client
from nsqpy.broker.features import spread
from nsqpy.broker.partition import LogSettings
from nsqpy.broker.topic import Topic
from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import (
    encode_mpub_ext,
    encode_mpub_trace,
    encode_pub_ext,
    encode_pub_trace,
)
from nsqpy.protocol.message import decode_message
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.storage import SyncPolicy
from nsqpy.testing import AsyncWire, FakeClock, FrameSink, eventually

from .conftest import create_topic, err, http, message, partition_of, post, stats, subscribe


async def publish(nsqd: NsqdServer, topic: str, partition: int, count: int) -> None:
    for i in range(count):
        path = f"/pub?topic={topic}&partition={partition}"
        assert await post(nsqd, path, f"{partition}-{i}".encode()) == (200, b"OK")


async def take(wire: AsyncWire, count: int, *, fin: bool = True) -> list[bytes]:
    """``count`` message bodies (FINished unless told not to)."""
    bodies = []
    for _ in range(count):
        msg = await message(wire)
        bodies.append(msg.body)
        if fin:
            await wire.send(b"FIN " + msg.id + b"\n")
    return bodies


async def set_offset(nsqd: NsqdServer, query: str, body: bytes) -> tuple[int, object]:
    status, data = await post(nsqd, f"/channel/setoffset?topic=rp&channel=c{query}", body)
    return status, json.loads(data)


async def test_replay_resets_every_partition_or_the_one_asked_for(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "rp", 3)
    for part in range(3):
        await publish(nsqd, "rp", part, 2)
    everything = {b"%d-%d" % (p, i) for p in range(3) for i in range(2)}
    s = await subscribe(nsqd.tcp_port, "SUB rp c", rdy=10)
    assert set(await take(s, 6)) == everything

    status, doc = await set_offset(nsqd, "", b"special:-2")
    assert status == 200
    assert doc == {
        "topic": "rp",
        "channel": "c",
        "partitions": [{"partition": p, "offset": 0} for p in range(3)],
    }
    assert set(await take(s, 6)) == everything  # every partition replayed

    status, doc = await set_offset(nsqd, "&partition=1", b"offset:1")
    assert (status, doc["partitions"]) == (200, [{"partition": 1, "offset": 1}])  # type: ignore[index]
    assert await take(s, 1) == [b"1-1"]  # that partition only, from its own offset 1
    assert await s.frame_within(0.2) is None

    assert await post(nsqd, "/channel/setoffset?topic=rp&channel=c&partition=3", b"offset:0") == (
        404,
        err("PARTITION_NOT_FOUND"),
    )
    # offset:3 is past every partition's end: refused whole, nothing moves
    before = [p.cursor.confirmed for p in nsqd.broker.topics["rp"].channels["c"].parts]
    assert await set_offset(nsqd, "", b"offset:3") == (400, {"message": "OFFSET_OUT_OF_RANGE"})
    assert [p.cursor.confirmed for p in nsqd.broker.topics["rp"].channels["c"].parts] == before
    assert await s.frame_within(0.2) is None


async def test_dead_letters_from_every_partition_keep_ids_trace_ids_and_keys(
    nsqd: NsqdServer,
) -> None:
    await create_topic(nsqd, "dl", 2)
    assert await post(nsqd, "/channel/create?topic=dl&channel=c") == (200, b"")
    status, _ = await post(nsqd, "/channel/setmaxattempts?topic=dl&channel=c&max_attempts=1")
    assert status == 200
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_ext("dl", {"##partition_key": "k1", "app": "x"}, b"ext", partition=0))
    assert await p.read_frame() == (0, b"OK")
    await p.send(encode_pub_trace("dl", 99, b"traced", partition=1))
    assert (await p.read_frame())[0] == 0
    s = await subscribe(nsqd.tcp_port, "SUB dl c", rdy=10)
    ids = {}
    for _ in range(2):
        msg = await message(s)
        ids[msg.body] = msg.id
        await s.send(b"REQ " + msg.id + b" 0\n")  # the one attempt failed: dead letter
    assert {partition_of(i) for i in ids.values()} == {0, 1}

    async def both_dead() -> bool:
        doc = await stats(nsqd, "dl")
        return bool(doc["channels"][0].get("dead_letter_count") == 2)

    await eventually(both_dead, what="two dead letters")
    (channel,) = (await stats(nsqd, "dl"))["channels"]
    assert [e["dead_letter_count"] for e in channel["partitions"]] == [1, 1]
    assert channel["depth"] == 0 and channel["in_flight_count"] == 0

    dead = nsqd.broker.topics["dl.dead"]
    records = dead.partitions[0].log.read(0, 10)
    found = {r.body: r for r in records}
    assert set(found) == {b"ext", b"traced"}
    for body, record in found.items():
        headers = json.loads(record.headers)
        assert headers["dead_letter_id"] == ids[body].decode()
        assert headers["dead_letter_reason"] == "requeued"
    assert json.loads(found[b"ext"].headers)["app"] == "x"
    assert found[b"ext"].partition_key == b"k1"
    assert found[b"traced"].trace_id == 99


async def test_ttl_expires_on_every_partition(nsqd: NsqdServer, clock: FakeClock) -> None:
    await create_topic(nsqd, "tt", 3)
    assert await post(nsqd, "/channel/create?topic=tt&channel=c") == (200, b"")
    assert (await post(nsqd, "/topic/setttl?topic=tt&ttl=1000"))[0] == 200
    for part in range(3):
        await publish(nsqd, "tt", part, 1)
    clock.advance_ms(2000)
    nsqd.broker.housekeeping()  # the TTL sweep (run by nsqd's ticker every 50 ticks)
    doc = await stats(nsqd, "tt")
    (channel,) = doc["channels"]
    assert (doc["expired_count"], channel["expired_count"], channel["depth"]) == (3, 3, 0)
    assert [e["expired_count"] for e in channel["partitions"]] == [1, 1, 1]


async def test_drop_oldest_takes_from_the_deepest_partitions(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "db", 2)
    assert await post(nsqd, "/channel/create?topic=db&channel=c") == (200, b"")
    path = "/topic/setmaxdepth?topic=db&max_depth=4&policy=drop_oldest"
    assert (await post(nsqd, path))[0] == 200
    await publish(nsqd, "db", 0, 3)
    await publish(nsqd, "db", 1, 1)
    for i in range(2):  # two more for partition 1: two over the bound of the whole topic
        assert await post(nsqd, "/pub?topic=db&partition=1", b"new%d" % i) == (200, b"OK")
    (channel,) = (await stats(nsqd, "db"))["channels"]
    assert [e["depth"] for e in channel["partitions"]] == [1, 3]
    assert (channel["depth"], channel["depth_dropped_count"]) == (4, 2)
    s = await subscribe(nsqd.tcp_port, "SUB db c", rdy=10)
    assert sorted(await take(s, 4)) == [b"0-2", b"1-0", b"new0", b"new1"]


def test_spread_levels_the_deepest_first() -> None:
    assert spread(2, [3, 1], 1) == [2, 0]
    assert spread(3, [2, 2, 2], 0) == [1, 1, 1]
    assert spread(2, [2, 2, 2], 0) == [1, 1, 0]
    assert spread(5, [3, 1], 1) == [3, 2]  # past what they hold: new messages of partition 1
    assert spread(4, [5], 0) == [4]


async def test_trace_ids_of_every_publish_form_reach_the_trace_store(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "tr", 2)
    assert await post(nsqd, "/channel/create?topic=tr&channel=c") == (200, b"")
    assert (await post(nsqd, "/message/trace/enable?topic=tr"))[0] == 200
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_trace("tr", 777, b"one", partition=1))
    assert (await p.read_frame())[0] == 0
    await p.send(encode_mpub_trace("tr", [(778, b"m0"), (779, b"m1")], partition=0))
    assert (await p.read_frame())[0] == 0
    await p.send(encode_pub_ext("tr", {"##trace_id": "780"}, b"ext", partition=1))
    assert (await p.read_frame())[0] == 0
    assert await post(nsqd, "/pub?topic=tr&partition=1&trace_id=781", b"http") == (200, b"OK")
    s = await subscribe(nsqd.tcp_port, "SUB tr c", rdy=10)
    assert sorted(await take(s, 5)) == [b"ext", b"http", b"m0", b"m1", b"one"]

    expected = {777: (1, 0, b"one"), 778: (0, 0, b"m0"), 779: (0, 1, b"m1"),
                780: (1, 1, b"ext"), 781: (1, 2, b"http")}  # fmt: skip
    for trace_id, (partition, offset, _body) in expected.items():

        async def traced(trace_id: int = trace_id) -> bool:
            status, data = await http(nsqd, "GET", f"/message/trace?trace_id={trace_id}")
            events = json.loads(data)["events"]
            return status == 200 and [e["event"] for e in events] == [
                "published",
                "delivered",
                "finished",
            ]

        await eventually(traced, what=f"the events of trace id {trace_id}")
        _, data = await http(nsqd, "GET", f"/message/trace?trace_id={trace_id}")
        events = json.loads(data)["events"]
        msg_id = "%016x" % (partition << 54 | offset)
        assert {(e["partition"], e["offset"], e["id"], e["trace_id"]) for e in events} == {
            (partition, offset, msg_id, trace_id)
        }
        assert events[0]["client"]  # who published it


async def test_ephemeral_topics_have_one_partition(nsqd: NsqdServer) -> None:
    path = "/topic/create?topic=e%23ephemeral&partition_num=2"
    assert await post(nsqd, path) == (400, err("INVALID_ARG_EPHEMERAL_PARTITION_NUM"))
    assert "e#ephemeral" not in nsqd.broker.topics
    assert await post(nsqd, "/topic/create?topic=e%23ephemeral&partition_num=1") == (200, b"")
    assert nsqd.broker.topics["e#ephemeral"].partition_count == 1
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(b"PUB e#ephemeral 1\n" + struct.pack(">i", 1) + b"x")
    ftype, data = await p.read_frame()
    assert ftype == 1 and data.startswith(b"E_TOPIC_NOT_EXIST")


async def test_a_refused_mpub_ext_over_partitions_stores_nothing(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "rf", 2)
    assert await post(nsqd, "/channel/create?topic=rf&channel=c") == (200, b"")
    assert (await post(nsqd, "/topic/setmaxdepth?topic=rf&max_depth=3&policy=refuse"))[0] == 200
    keys = ["a", "b", "c", "d"]
    assert {zlib.crc32(k.encode()) % 2 for k in keys} == {0, 1}  # both partitions
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_mpub_ext("rf", [({"##partition_key": k}, k.encode()) for k in keys]))
    ftype, data = await p.read_frame()
    assert ftype == 1 and data.startswith(b"E_MPUB_FAILED")
    topic = nsqd.broker.topics["rf"]
    assert [part.log.high_watermark for part in topic.partitions] == [0, 0]


def test_a_quarantined_hole_in_partition_1_is_skipped_and_confirmed(tmp_path: Path) -> None:
    """A damaged record mid-log of partition 1 (its batch fails its CRC): the record is
    lost, the rest of its batch kept; the cursor skips the lost offset and confirms it, so
    the channel delivers the rest and moves on."""
    settings = LogSettings(
        sync=SyncPolicy.parse("every:1"), segment_bytes=1 << 20, mem_queue_size=9
    )
    topic = Topic("q", tmp_path / "q", settings, partitions=2)
    topic.create_channel("c")
    part = topic.partitions[1]
    for batch in range(3):
        part.publish([b"%d" % batch * 40] * 3, timestamp=1)
        part.log.flush()
    topic.close()
    (segment,) = sorted((tmp_path / "q" / "p1").glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the middle batch (offsets 3..5): in offset 4
    segment.write_bytes(bytes(data))

    again = Topic("q", tmp_path / "q", settings, partitions=2)
    group = again.create_channel("c", listed=True)
    sink = FrameSink()
    client = Client(sink=sink, ready_count=100, state=SUBSCRIBED)
    group.add_consumer(client)
    group.pump(now=2)
    delivered = [decode_message(f[4 + 4 :]).id for f in sink.frames]
    assert [int(i, 16) for i in delivered] == [(1 << 54) | o for o in (0, 1, 2, 3, 5, 6, 7, 8)]
    for msg_id in delivered:
        n = int(msg_id, 16)
        group.finish(client, n >> 54, n & ((1 << 54) - 1), msg_id, now=3)
    assert group.parts[1].cursor.confirmed == 9 and group.depth == 0
    again.close()
