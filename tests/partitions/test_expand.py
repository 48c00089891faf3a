"""Growing a topic's partition count on one node (``POST /topic/partition/expand``).

What was published stays in its partition; a consumer subscribed before the expansion
receives from the new partitions without subscribing again; a keyed publish hashes over
the new count; the count survives a restart (the metadata) and never shrinks.
"""

from __future__ import annotations

import json
import zlib

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import encode_pub_partition
from nsqpy.testing import AsyncWire, eventually

from .conftest import create_topic, err, message, partition_of, post, stats, subscribe


async def test_expand_keeps_old_messages_and_a_subscribed_consumer_gets_the_new_partitions(
    nsqd: NsqdServer,
) -> None:
    await create_topic(nsqd, "grow", 2)
    pub = await AsyncWire.connect(nsqd.tcp_port)
    for part in range(2):
        await pub.send(encode_pub_partition("grow", part, b"old%d" % part))
        assert await pub.read_frame() == (0, b"OK")
    consumer = await subscribe(nsqd.tcp_port, "SUB grow c", rdy=20)
    first = {(await message(consumer)).body for _ in range(2)}
    assert first == {b"old0", b"old1"}

    assert await post(nsqd, "/topic/partition/expand?topic=grow&partition_num=4") == (200, b"")
    topic = nsqd.broker.topics["grow"]
    assert topic.partition_count == 4 and len(topic.partitions) == 4
    assert [p.log.flushed_offset for p in topic.partitions][:2] == [1, 1]  # (stayed put)
    for part in (2, 3):
        await pub.send(encode_pub_partition("grow", part, b"new%d" % part))
        assert await pub.read_frame() == (0, b"OK")
    got = {}
    for _ in range(2):
        msg = await message(consumer)
        got[msg.body] = partition_of(msg.id)
    assert got == {b"new2": 2, b"new3": 3}
    doc = await stats(nsqd, "grow")
    assert doc["partition_num"] == 4 and doc["message_count"] == 4
    # keyed publishing hashes over the new count
    assert topic.partition_for(key=b"k17").number == zlib.crc32(b"k17") % 4


async def test_expand_never_shrinks_and_checks_its_arguments(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "three", 3)
    assert await post(nsqd, "/topic/partition/expand?topic=three&partition_num=2") == (
        400,
        err("E_PARTITION_NUM_REDUCED"),
    )
    for raw in ("0", "256", "x", ""):
        got = await post(nsqd, f"/topic/partition/expand?topic=three&partition_num={raw}")
        assert got == (400, err("INVALID_ARG_TOPIC_PARTITION_NUM")), raw
    assert await post(nsqd, "/topic/partition/expand?topic=three") == (
        400,
        err("MISSING_ARG_TOPIC_PARTITION_NUM"),
    )
    assert await post(nsqd, "/topic/partition/expand?topic=nope&partition_num=4") == (
        404,
        err("TOPIC_NOT_FOUND"),
    )
    assert await post(nsqd, "/topic/partition/expand?topic=three&partition_num=3") == (200, b"")
    assert nsqd.broker.topics["three"].partition_count == 3
    await post(nsqd, "/topic/create?topic=eph%23ephemeral")
    assert await post(nsqd, "/topic/partition/expand?topic=eph%23ephemeral&partition_num=2") == (
        400,
        err("INVALID_ARG_EPHEMERAL_PARTITION_NUM"),
    )


async def test_the_grown_count_is_saved_for_the_next_start(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "kept", 1)
    assert await post(nsqd, "/topic/partition/expand?topic=kept&partition_num=3") == (200, b"")
    saved = nsqd.broker.data_path / "nsqd.dat"

    def three() -> bool:
        if not saved.exists():
            return False
        entries = [t for t in json.loads(saved.read_bytes())["topics"] if t["name"] == "kept"]
        return bool(entries) and entries[0].get("partition_num") == 3

    await eventually(three)
