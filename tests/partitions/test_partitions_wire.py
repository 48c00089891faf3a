"""Topics with several partitions on one node, through the wire (in-process nsqd).

Plain NSQ clients see one topic: SUB gets every partition, FIN/REQ/TOUCH find the
partition in the message ID, /stats shows totals (with per-partition detail in extra
fields) and the log-read API serves every partition.
"""

from __future__ import annotations

import json
import zlib

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import encode_mpub_partition, encode_pub_partition
from nsqpy.testing import AsyncWire, FakeClock, eventually

from .conftest import (
    create_topic,
    err,
    http,
    message,
    offset_of,
    partition_of,
    post,
    stats,
    subscribe,
)


async def test_topic_created_with_partitions_has_a_log_per_partition(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "four", 4)
    topic = nsqd.broker.topics["four"]
    assert topic.partition_count == 4
    folder = nsqd.broker.data_path / "topics" / "topic-four"
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("p")) == [
        "p0",
        "p1",
        "p2",
        "p3",
    ]
    # the same count again is fine; another count is refused and nothing changes
    await create_topic(nsqd, "four", 4)
    got = await post(nsqd, "/topic/create?topic=four&partition_num=2")
    assert got == (400, err("PARTITION_NUM_MISMATCH"))
    assert nsqd.broker.topics["four"].partition_count == 4
    saved = nsqd.broker.data_path / "nsqd.dat"
    await eventually(saved.exists)  # (written by the next tick after the creation)
    meta = json.loads(saved.read_bytes())
    (entry,) = [t for t in meta["topics"] if t["name"] == "four"]
    assert entry["partition_num"] == 4 and len(entry["partitions"]) == 4


async def test_bad_partition_counts_are_refused(nsqd: NsqdServer) -> None:
    for raw in ("0", "-1", "256", "x", "1.5", "", "9" * 30):
        got = await post(nsqd, f"/topic/create?topic=bad&partition_num={raw}")
        assert got == (400, err("INVALID_ARG_TOPIC_PARTITION_NUM")), raw
    assert await post(nsqd, "/topic/create?topic=bad&ordered=maybe") == (
        400,
        err("INVALID_ARG_ORDERED"),
    )
    assert "bad" not in nsqd.broker.topics


async def test_partitioned_pub_and_plain_sub_sees_every_partition(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "t", 3)
    p = await AsyncWire.connect(nsqd.tcp_port)
    for part in range(3):
        await p.send(encode_pub_partition("t", part, b"m%d" % part))
        assert await p.read_frame() == (0, b"OK")
    await p.send(encode_mpub_partition("t", 2, [b"x", b"y"]))
    assert await p.read_frame() == (0, b"OK")
    logs = [part.log.flushed_offset for part in nsqd.broker.topics["t"].partitions]
    assert logs == [1, 1, 3]
    s = await subscribe(nsqd.tcp_port, "SUB t c")
    got = {}
    for _ in range(5):
        msg = await message(s)
        got[msg.body] = (partition_of(msg.id), offset_of(msg.id))
    assert got == {
        b"m0": (0, 0),
        b"m1": (1, 0),
        b"m2": (2, 0),
        b"x": (2, 1),
        b"y": (2, 2),
    }


async def test_fin_req_touch_route_by_the_partition_in_the_id(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    await create_topic(nsqd, "r", 2)
    assert await post(nsqd, "/pub?topic=r&partition=1", b"one") == (200, b"OK")
    s = await subscribe(nsqd.tcp_port, "SUB r c")
    msg = await message(s)
    assert partition_of(msg.id) == 1 and msg.attempts == 1
    await s.send(b"TOUCH " + msg.id + b"\n")
    await s.send(b"REQ " + msg.id + b" 0\n")
    again = await message(s)
    assert (again.id, again.attempts) == (msg.id, 2)
    # the same offset in the other partition is not in flight
    other = b"%016x" % offset_of(msg.id)
    await s.send(b"FIN " + other + b"\n")
    assert await s.read_frame() == (1, b"E_FIN_FAILED FIN " + other + b" failed ID not in flight")
    # nor is a partition the topic does not have
    missing = b"%016x" % ((5 << 54) | offset_of(msg.id))
    await s.send(b"FIN " + missing + b"\n")
    assert (await s.read_frame())[0] == 1
    await s.send(b"FIN " + again.id + b"\n")
    channel = nsqd.broker.topics["r"].channels["c"]
    await eventually(lambda: channel.finish_count == 1)
    assert channel.parts[1].cursor.confirmed == 1 and channel.in_flight_count == 0


async def test_partition_key_is_stable_and_unkeyed_publishes_take_turns(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "k", 4)
    for key in (b"alice", b"bob", b"carol"):
        for i in range(3):
            path = f"/pub?topic=k&partition_key={key.decode()}"
            assert await post(nsqd, path, b"%s-%d" % (key, i)) == (200, b"OK")
    parts = nsqd.broker.topics["k"].partitions
    for key in (b"alice", b"bob", b"carol"):
        records = parts[zlib.crc32(key) % 4].log.read(0, 100)
        assert [r.body for r in records if r.partition_key == key] == [
            b"%s-%d" % (key, i) for i in range(3)
        ]
    before = [p.log.flushed_offset for p in parts]
    for i in range(8):
        assert await post(nsqd, "/pub?topic=k", b"plain%d" % i) == (200, b"OK")
    after = [p.log.flushed_offset for p in parts]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 2, 2, 2]


async def test_bad_partition_numbers_are_refused_and_nothing_is_stored(nsqd: NsqdServer) -> None:
    """Not a partition number: E_BAD_PARTITION; a partition the topic lacks, or any
    partition of a topic that does not exist: E_TOPIC_NOT_EXIST, as youzan's nsqd (whose
    consumer drops that node on it), and nothing is created; both fatal."""
    await create_topic(nsqd, "b", 2)
    for line, code in (
        (b"PUB b 2\n", b"E_TOPIC_NOT_EXIST"),
        (b"PUB b x\n", b"E_BAD_PARTITION"),
        (b"PUB b -2\n", b"E_BAD_PARTITION"),
        (b"PUB b 1024\n", b"E_BAD_PARTITION"),
        (b"PUB fresh 1\n", b"E_TOPIC_NOT_EXIST"),
        (b"PUB fresh 0\n", b"E_TOPIC_NOT_EXIST"),  # (a PUB naming no partition creates it)
        (encode_mpub_partition("b", 9, [b"x"]), b"E_TOPIC_NOT_EXIST"),
        (b"SUB b c 7\n", b"E_TOPIC_NOT_EXIST"),
        (b"SUB_ORDERED fresh c 0\n", b"E_TOPIC_NOT_EXIST"),
        (b"SUB_ORDERED b c z\n", b"E_BAD_PARTITION"),
    ):
        w = await AsyncWire.connect(nsqd.tcp_port)
        body = b"\x00\x00\x00\x01x" if line.startswith(b"PUB") else b""
        await w.send(line + body)
        ftype, data = await w.read_frame()
        assert ftype == 1 and data.startswith(code), (line, data)
        await w.expect_closed()
    for path, status, name in (
        ("/pub?topic=b&partition=2", 404, "PARTITION_NOT_FOUND"),
        ("/pub?topic=b&partition=x", 400, "INVALID_ARG_PARTITION"),
        ("/pub?topic=b&partition=-5", 400, "INVALID_ARG_PARTITION"),
        ("/mpub?topic=b&partition=3", 404, "PARTITION_NOT_FOUND"),
        ("/pub?topic=fresh2&partition=1", 404, "PARTITION_NOT_FOUND"),
    ):
        assert await post(nsqd, path, b"m") == (status, err(name)), path
    topic = nsqd.broker.topics["b"]
    assert [p.log.flushed_offset for p in topic.partitions] == [0, 0]
    assert "fresh" not in nsqd.broker.topics and "fresh2" not in nsqd.broker.topics
    assert "fresh" not in nsqd.broker.topics and "fresh2" not in nsqd.broker.topics
    assert not topic.channels


async def test_stats_aggregate_partitions_and_add_detail(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "st", 3)
    assert await post(nsqd, "/channel/create?topic=st&channel=c") == (200, b"")
    for part, n in ((0, 1), (1, 2), (2, 3)):
        for i in range(n):
            assert await post(nsqd, f"/pub?topic=st&partition={part}", b"%d" % i) == (200, b"OK")
    s = await subscribe(nsqd.tcp_port, "SUB st c", rdy=2)
    await message(s)
    await message(s)
    doc = await stats(nsqd, "st")
    assert doc["message_count"] == 6 and doc["depth"] == 0
    assert doc["partition_num"] == 3
    assert [p["message_count"] for p in doc["partitions"]] == [1, 2, 3]
    (channel,) = doc["channels"]
    assert channel["depth"] == 4 and channel["in_flight_count"] == 2
    assert channel["message_count"] == 6 and len(channel["clients"]) == 1
    assert sum(p["in_flight_count"] for p in channel["partitions"]) == 2
    # a single-partition topic keeps NSQ's exact fields
    assert await post(nsqd, "/pub?topic=plain", b"x") == (200, b"OK")
    plain = await stats(nsqd, "plain")
    assert "partitions" not in plain and "partition_num" not in plain


async def test_log_read_api_serves_every_partition(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "lr", 3)
    for i in range(4):
        assert await post(nsqd, "/pub?topic=lr&partition=2", b"p2-%d" % i) == (200, b"OK")
    assert await post(nsqd, "/pub?topic=lr&partition=1", b"p1") == (200, b"OK")
    status, body = await http(nsqd, "GET", "/log/watermarks?topic=lr")
    assert status == 200
    marks = json.loads(body)["partitions"]
    assert [(m["partition"], m["low"], m["high"]) for m in marks] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 0, 4),
    ]
    status, body = await http(nsqd, "GET", "/log/read?topic=lr&partition=2&offset=1&max_count=10")
    assert status == 200
    assert body.count(b"p2-") == 3
    status, _ = await http(nsqd, "GET", "/log/read?topic=lr&partition=3&offset=0")
    assert status == 404


async def test_channels_start_per_partition_and_pause_holds_every_partition(
    nsqd: NsqdServer,
) -> None:
    await create_topic(nsqd, "pz", 2)
    assert await post(nsqd, "/pub?topic=pz&partition=0", b"early0") == (200, b"OK")
    assert await post(nsqd, "/pub?topic=pz&partition=1", b"early1") == (200, b"OK")
    assert await post(nsqd, "/topic/pause?topic=pz") == (200, b"")
    assert await post(nsqd, "/pub?topic=pz&partition=1", b"held") == (200, b"OK")
    s = await subscribe(nsqd.tcp_port, "SUB pz first")
    got = {(await message(s)).body, (await message(s)).body}
    assert got == {b"early0", b"early1"}  # the first channel gets what was buffered
    assert (await stats(nsqd, "pz"))["depth"] == 1
    assert await post(nsqd, "/topic/unpause?topic=pz") == (200, b"")
    assert (await message(s)).body == b"held"


async def test_internal_create_topic_makes_the_partition_it_names(nsqd: NsqdServer) -> None:
    """youzan's INTERNAL_CREATE_TOPIC (its client's test suite creates every topic so):
    partition P exists after it, the topic created with P + 1 partitions or grown to them,
    never shrunk; OK each time, in any state. A partition past the limit, or a second one of
    an ephemeral topic: the non-fatal E_CREATE_TOPIC_FAILED, and the connection goes on."""
    w = await AsyncWire.connect(nsqd.tcp_port)
    for line in (b"t 0", b"t 2 true", b"t 1", b"e#ephemeral 0"):
        await w.send(b"INTERNAL_CREATE_TOPIC " + line + b"\n")
        assert await w.read_frame() == (0, b"OK"), line
    assert nsqd.broker.topics["t"].partition_count == 3
    assert nsqd.broker.topics["e#ephemeral"].partition_count == 1
    for line in (b"t 255", b"e#ephemeral 1"):
        await w.send(b"INTERNAL_CREATE_TOPIC " + line + b"\n")
        ftype, data = await w.read_frame()
        assert ftype == 1 and data.startswith(b"E_CREATE_TOPIC_FAILED"), data
    await w.send(b"PUB t 2\n\x00\x00\x00\x01x")  # the connection goes on
    assert await w.read_frame() == (0, b"OK")
    assert nsqd.broker.topics["t"].partition_count == 3
