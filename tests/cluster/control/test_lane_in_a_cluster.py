"""The publish lane (``V2Connection._publish_lane``) on an in-process nsqd of a cluster (real
etcd, topics placed by writing etcd as the coordinator would): a PUB or MPUB that is a whole
read, to a topic this node leads, takes the lane and is still answered only once every ISR
member has it; one to a topic led elsewhere steps aside, and the ordinary path forwards it."""

from __future__ import annotations

import asyncio

import pytest

from nsqpy.cluster.etcd import Etcd, PutOp
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import Replicas, TopicMeta
from nsqpy.nsqd.gate import ELSEWHERE, HERE
from nsqpy.nsqd.server import NsqdServer
from nsqpy.nsqd.tcp import V2Connection
from nsqpy.testing import count_lane, eventually, mpub, pub
from nsqpy.testing.wire import AsyncWire

from .test_member_gate import cluster_of

GHOST = "ghost"  # an ISR member that never connects, so never acknowledges


async def place(etcd: Etcd, keys: Keys, topic: str, replicas: Replicas) -> None:
    await etcd.txn(
        [],
        [
            PutOp(keys.topic_meta(topic), TopicMeta(partition_num=1, replicator=1).to_json()),
            PutOp(keys.replicas(topic, 0), replicas.to_json()),
        ],
    )


async def counted_publisher(server: NsqdServer) -> tuple[AsyncWire, V2Connection, list[int]]:
    """A connection, its server side, and how many publishes its lane took (``count_lane``)."""
    before = set(server.connections)
    wire = await AsyncWire.connect(server.tcp_port)
    await eventually(lambda: len(server.connections - before) == 1)
    (conn,) = server.connections - before
    assert isinstance(conn, V2Connection)
    return wire, conn, count_lane(conn)


async def test_a_publish_to_a_topic_led_here_takes_the_lane_and_still_waits_for_the_isr(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    cluster = cluster_of(server)
    assert cluster.replication is not None
    me = cluster.node_id
    await place(etcd, keys, "t", Replicas(me, (me,)))
    await eventually(lambda: cluster.where("t") == HERE, 10, what="led here")
    wire, _, taken = await counted_publisher(server)
    await wire.send(pub("t", b"a"))  # (a name the connection has not sent yet: ordinary)
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(pub("t", b"b"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(mpub("t", [b"c", b"d"]))
    assert await wire.read_frame() == (0, b"OK")
    assert taken == [2]

    # another member joins the ISR and never acknowledges: nothing more may be answered
    topic = server.broker.get_topic("t")
    assert topic is not None
    part = topic.partitions[0]
    state = cluster.replication.state(part)
    assert state is not None
    await etcd.put(keys.replicas("t", 0), Replicas(me, (me, GHOST), epoch=2).to_json())
    await eventually(lambda: state.isr == (me, GHOST), 10, what="the ISR grown")
    await wire.send(pub("t", b"e"))
    await eventually(lambda: taken == [3], what="the lane took it")
    await eventually(lambda: part.log.flushed_offset == 5, what="written here")
    try:
        frame = await asyncio.wait_for(wire.read_frame(), 0.5)
    except TimeoutError:
        frame = None
    assert frame is None, "answered before every ISR member had it"
    # the member leaves the ISR (as the coordinator drops a dead follower): what this node
    # holds is every ISR member's now, and the publish is answered
    await etcd.put(keys.replicas("t", 0), Replicas(me, (me,), epoch=3).to_json())
    assert await wire.read_frame(timeout=10) == (0, b"OK")


async def test_a_publish_the_gate_does_not_place_here_steps_aside(
    server: NsqdServer, etcd: Etcd, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane asks the gate as the ordinary path does: a topic it does not place here
    (its view lacks it, or another node leads it) is left to the ordinary path, though the
    node still holds a partition of it that it leads."""
    cluster = cluster_of(server)
    me = cluster.node_id
    await place(etcd, keys, "t", Replicas(me, (me,)))
    await eventually(lambda: cluster.where("t") == HERE, 10, what="led here")
    wire, _, taken = await counted_publisher(server)
    for body in (b"a", b"b"):  # (the first: a name the connection had not sent)
        await wire.send(pub("t", body))
        assert await wire.read_frame() == (0, b"OK")
    assert taken == [1]
    monkeypatch.setattr(cluster, "where", lambda topic, partition=-1: ELSEWHERE)
    cluster.forwarder.patience = 0.5  # (the leader named is this node, which refuses too)
    await wire.send(pub("t", b"c"))
    ftype, data = await wire.read_frame(timeout=10)
    assert (ftype, data.split(b" ")[0]) == (1, b"E_FAILED_ON_NOT_LEADER"), data
    assert taken == [1]
    topic = server.broker.get_topic("t")
    assert topic is not None and topic.depth == 2


async def test_a_partition_in_turn_that_is_not_writable_is_refused_as_the_ordinary_path_does(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    """Of two partitions led here, one not writable (its ISR too small, as its replica
    state marks it): publishes in turn get E_FAILED_ON_NOT_WRITABLE for it and OK for the
    other, by the lane as by the ordinary path (the lane answers for the partition in turn;
    it does not leave it to the ordinary path, which would take the next one)."""
    cluster = cluster_of(server)
    me = cluster.node_id
    meta = TopicMeta(partition_num=2, replicator=1)
    await etcd.txn(
        [],
        [PutOp(keys.topic_meta("t"), meta.to_json())]
        + [PutOp(keys.replicas("t", p), Replicas(me, (me,)).to_json()) for p in (0, 1)],
    )
    await eventually(
        lambda: (
            (t := server.broker.get_topic("t")) is not None
            and all(p.leading for p in t.partitions)
            and len(t.partitions) == 2
        ),
        10,
        what="both led here",
    )
    topic = server.broker.get_topic("t")
    assert topic is not None

    async def answers(lane: bool) -> list[tuple[int, bytes]]:
        wire, conn, taken = await counted_publisher(server)
        for body in (b"first", b"second"):  # (an even number of turns: both runs alike)
            await wire.send(pub("t", body))  # (the first: a name the connection had not sent)
            assert await wire.read_frame() == (0, b"OK")
        if not lane:
            conn._lane = None
        topic.partitions[0].writable = False
        taken[0] = 0
        got = []
        for _ in range(4):
            await wire.send(pub("t", b"x"))
            got.append(await wire.read_frame())
        topic.partitions[0].writable = True
        assert taken == [4 if lane else 0]
        await wire.close()
        return got

    by_lane = await answers(lane=True)
    assert sorted(by_lane) == [(0, b"OK")] * 2 + [(1, b"E_FAILED_ON_NOT_WRITABLE")] * 2
    assert by_lane == await answers(lane=False)
