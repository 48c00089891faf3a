"""An in-process nsqd of a cluster (real etcd, topics placed by writing etcd as the
coordinator would):

- between the moment its watch brings a topic this node is to lead and the moment its
  member's round applies it, a client that asks (another client created the topic an
  instant before) is served here, not sent away with ``E_FAILED_ON_NOT_LEADER``;
- a SUB or a FIN on an ordered channel sends the channel cursors to the followers at once
  (``LeaderFeed.cursors_now``, for the FIN's partition only), a FIN on a plain channel
  waits for the periodic send.
"""

from __future__ import annotations

import asyncio

import pytest

from nsqpy.cluster.etcd import Etcd, PutOp
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import Replicas, TopicMeta
from nsqpy.nsqd.cluster import NsqdCluster
from nsqpy.nsqd.gate import HERE
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import eventually
from nsqpy.testing.wire import AsyncWire, read_message


def cluster_of(server: NsqdServer) -> NsqdCluster:
    cluster = server.cluster
    assert cluster is not None and cluster.view is not None
    return cluster


async def place(etcd: Etcd, keys: Keys, topic: str, leader: str, *, ordered: bool = False) -> None:
    """What the coordinator writes for a topic of one partition led by ``leader``."""
    meta = TopicMeta(partition_num=1, replicator=1, ordered=ordered)
    await etcd.txn(
        [],
        [
            PutOp(keys.topic_meta(topic), meta.to_json()),
            PutOp(keys.replicas(topic, 0), Replicas(leader, (leader,)).to_json()),
        ],
    )


async def test_a_topic_the_watch_brought_is_led_here_before_the_member_round_runs(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    cluster = cluster_of(server)
    topic = "raced"
    seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_change() -> None:
        # Called by the view as the watch delivers, before the member's round (which
        # only wakes up here) has applied anything: what a SUB arriving now is told.
        snap = cluster.view.snapshot() if cluster.view else None
        if snap and topic in snap.topics and snap.partitions(topic) and not seen.done():
            seen.set_result(cluster.where(topic))

    assert cluster.view is not None
    cluster.view.listeners.append(on_change)
    await place(etcd, keys, topic, cluster.node_id)
    assert await asyncio.wait_for(seen, 10) == HERE
    broker_topic = server.broker.get_topic(topic)
    assert broker_topic is not None and broker_topic.partitions[0].leading


async def test_a_fin_on_an_ordered_channel_sends_the_cursors_at_once(
    server: NsqdServer, etcd: Etcd, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = cluster_of(server)
    assert cluster.replication is not None
    feed = cluster.replication.feed
    asked: list[tuple[str, int]] = []
    real = feed.cursors_now

    def cursors_now(topic: str, partition: int = -1) -> None:
        asked.append((topic, partition))
        real(topic, partition)

    monkeypatch.setattr(feed, "cursors_now", cursors_now)
    for topic, ordered in (("plain", False), ("ordered", True)):
        await place(etcd, keys, topic, cluster.node_id, ordered=ordered)
        await eventually(lambda t=topic: cluster.where(t) == HERE, 10, what=f"{topic} led here")  # type: ignore[misc,arg-type]
        consumer = await AsyncWire.connect(server.tcp_port)
        verb = b"SUB_ORDERED" if ordered else b"SUB"
        await consumer.send(verb + b" %s c\n" % topic.encode())
        assert await consumer.read_frame() == (0, b"OK")
        await consumer.send(b"RDY 1\n")
        producer = await AsyncWire.connect(server.tcp_port)
        await producer.send(b"PUB %s\n\x00\x00\x00\x01x" % topic.encode())
        assert await producer.read_frame() == (0, b"OK")
        message = await read_message(consumer)
        before = len(asked)
        await consumer.send(b"FIN " + message.id + b"\n")
        await consumer.send(b"NOP\n")
        channel = server.broker.topics[topic].channels["c"]  # (asked in the turn taking it)
        await eventually(lambda c=channel: c.finish_count == 1, 5, what="nsqd took the FIN")  # type: ignore[misc]
        if ordered:
            assert asked[before:] == [("ordered", 0)], "the FIN asks, for its partition"
    assert asked == [("ordered", -1), ("ordered", 0)], (
        "its SUB (of no partition named) and its FIN ask; the plain channel never"
    )


async def test_internal_create_topic_fails_without_a_coordinator_or_with_auto_create_off(
    server: NsqdServer,
) -> None:
    """Topics of a cluster are created through the coordinator: youzan's
    INTERNAL_CREATE_TOPIC, with none elected (no nsqlookupd here), or on a node started with
    ``--disable-auto-create`` (youzan's nsqd refuses it in a cluster always), is answered
    with the non-fatal E_CREATE_TOPIC_FAILED, and nothing is created."""
    wire = await AsyncWire.connect(server.tcp_port)
    await wire.send(b"INTERNAL_CREATE_TOPIC made_here 0\n")
    ftype, data = await wire.read_frame()
    assert ftype == 1 and data.startswith(b"E_CREATE_TOPIC_FAILED CREATE_TOPIC made_here failed")
    assert b"no coordinator" in data
    cluster = cluster_of(server)
    cluster.opts.disable_auto_create = True
    await wire.send(b"INTERNAL_CREATE_TOPIC made_here 0\n")
    ftype, data = await wire.read_frame()
    assert ftype == 1 and data.startswith(b"E_CREATE_TOPIC_FAILED CREATE_TOPIC is not allowed")
    await wire.send(b"NOP\n")  # (the connection goes on)
    assert "made_here" not in server.broker.topics
    assert cluster.view is not None and "made_here" not in cluster.view.snapshot().topics


async def test_a_partitioned_command_waits_for_a_topic_etcd_has_and_creates_none(
    server: NsqdServer, etcd: Etcd, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """youzan's forms name a partition and create nothing: for a topic this node's view
    has not brought yet (a forwarded publish can arrive before the watch does), etcd is
    asked, and the command runs once the view has it; one etcd lacks is E_TOPIC_NOT_EXIST
    at once, and nothing is created."""
    cluster = cluster_of(server)
    assert cluster.member is not None and cluster.view is not None
    wire = await AsyncWire.connect(server.tcp_port)
    await wire.send(b"PUB nowhere 0\n\x00\x00\x00\x01x")
    ftype, data = await wire.read_frame()
    assert (ftype, data) == (1, b"E_TOPIC_NOT_EXIST"), data
    assert "nowhere" not in cluster.view.snapshot().topics

    await place(etcd, keys, "arriving", cluster.node_id)
    assert await etcd.get(keys.topic_meta("arriving")) is not None
    known = cluster.member.known_partitions
    asked: list[str] = []
    real_get = etcd.get

    async def get(key: str) -> object:
        asked.append(key)
        return await real_get(key)

    hidden = iter([True])  # (the first look: as if the watch had not brought it yet)
    monkeypatch.setattr(cluster.member, "known_partitions",
                        lambda t: 0 if next(hidden, False) else known(t))  # fmt: skip
    monkeypatch.setattr(cluster.member.etcd, "get", get)
    await cluster.prepare("arriving", create=False)
    assert asked == [keys.topic_meta("arriving")]
    topic = server.broker.get_topic("arriving")
    assert topic is not None and topic.partitions[0].leading


async def grow_watched(
    server: NsqdServer, etcd: Etcd, keys: Keys, topic: str, holder: str
) -> tuple[str, int, bool]:
    """``topic``, of one partition led here, grown to two with partition 1 held by
    ``holder``: what a publish naming partition 1 meets as the watch delivers it, before
    the member's round (``where(topic, 1)``, the local topic's partition count, whether
    partition 1 is held here then)."""
    cluster = cluster_of(server)
    assert cluster.member is not None and cluster.view is not None
    await place(etcd, keys, topic, cluster.node_id)
    await cluster.prepare(topic, create=False, partition=0)
    seen: asyncio.Future[tuple[str, int, bool]] = asyncio.get_running_loop().create_future()

    def on_change() -> None:  # (the view calls it as the watch delivers: see above)
        snap = cluster.view.snapshot() if cluster.view else None
        if snap and (topic, 1) in snap.replicas and not seen.done():
            where = cluster.where(topic, 1)
            held = server.broker.get_topic(topic)
            assert held is not None
            seen.set_result((where, held.partition_count, held.partition(1) is not None))

    cluster.view.listeners.append(on_change)
    await etcd.txn(
        [],
        [
            PutOp(keys.topic_meta(topic), TopicMeta(partition_num=2, replicator=1).to_json()),
            PutOp(keys.replicas(topic, 1), Replicas(holder, (holder,)).to_json()),
        ],
    )
    return await asyncio.wait_for(seen, 10)


async def test_a_partition_added_to_a_topic_led_here_is_taken_up_before_the_member_round(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    """A topic grows (youzan's INTERNAL_CREATE_TOPIC on another node, or the coordinator's
    expand) and this node, which leads its first partition, is to lead the new one: a
    publish naming the new partition, arriving between the watch and the member's round,
    finds it here (a node that led partition 0 used to answer E_TOPIC_NOT_EXIST); one
    naming a partition etcd does not have is E_TOPIC_NOT_EXIST, and nothing is created."""
    topic = "growing"
    assert await grow_watched(server, etcd, keys, topic, cluster_of(server).node_id) == (
        HERE,
        2,
        True,
    )
    wire = await AsyncWire.connect(server.tcp_port)
    await wire.send(f"PUB {topic} 1\n".encode() + b"\x00\x00\x00\x01x")
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"PUB {topic} 2\n".encode() + b"\x00\x00\x00\x01x")
    assert await wire.read_frame() == (1, b"E_TOPIC_NOT_EXIST")
    held = server.broker.get_topic(topic)
    assert held is not None and held.partition_count == 2


async def test_a_partition_added_elsewhere_grows_the_topic_here_before_the_member_round(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    """The same growth with the new partition placed on another node: this node, which
    leads partition 0, grows its topic to the new count as the watch brings it, so a
    publish naming the new partition is sent on to its leader rather than refused with
    E_TOPIC_NOT_EXIST by a count this node had not grown yet."""
    other = "127.0.0.1:1:2:99"  # (a node that is not running: only the count matters)
    assert await grow_watched(server, etcd, keys, "growing_elsewhere", other) == (HERE, 2, False)
