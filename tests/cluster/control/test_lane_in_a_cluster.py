"""The publish lane (``V2Connection._publish_lane``) on an in-process nsqd of a cluster (real
etcd, topics placed by writing etcd as the coordinator would): a PUB or MPUB that is a whole
read, to a topic this node leads, takes the lane and is still answered only once every ISR
member has it; one to a topic led elsewhere steps aside, and the ordinary path forwards it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nsqpy.cluster.etcd import Etcd, PutOp
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import Replicas, TopicMeta
from nsqpy.nsqd.gate import ELSEWHERE, HERE
from nsqpy.nsqd.server import NsqdServer
from nsqpy.nsqd.tcp import V2Connection
from nsqpy.testing import eventually, mpub, pub
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


async def counted_publisher(server: NsqdServer, taken: list[int]) -> AsyncWire:
    """A connection whose server side counts the publishes its lane took into ``taken``."""
    before = set(server.connections)
    wire = await AsyncWire.connect(server.tcp_port)
    await eventually(lambda: len(server.connections - before) == 1)
    (conn,) = server.connections - before
    assert isinstance(conn, V2Connection)
    inner = conn._lane
    assert inner is not None, "a cluster's connection has the lane"

    def counting(*args: object, _inner: Callable[..., bool] = inner) -> bool:
        took = _inner(*args)
        taken[0] += took
        return took

    conn._lane = counting  # type: ignore[assignment]
    return wire


async def test_a_publish_to_a_topic_led_here_takes_the_lane_and_still_waits_for_the_isr(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    cluster = cluster_of(server)
    assert cluster.replication is not None
    me = cluster.node_id
    await place(etcd, keys, "t", Replicas(me, (me,)))
    await eventually(lambda: cluster.where("t") == HERE, 10, what="led here")
    taken = [0]
    wire = await counted_publisher(server, taken)
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
    assert await asyncio.wait_for(wire.read_frame(), 10) == (0, b"OK")


async def test_a_publish_to_a_topic_led_elsewhere_steps_aside_to_be_forwarded(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    cluster = cluster_of(server)
    await place(etcd, keys, "away", Replicas(GHOST, (GHOST,)))
    await eventually(lambda: cluster.where("away") == ELSEWHERE, 10, what="led elsewhere")
    cluster.forwarder.patience = 0.5  # (the leader named is never reachable)
    taken = [0]
    wire = await counted_publisher(server, taken)
    await wire.send(pub("away", b"x"))
    ftype, data = await asyncio.wait_for(wire.read_frame(), 10)
    assert (ftype, data.split(b" ")[0]) == (1, b"E_FAILED_ON_NOT_LEADER"), data
    assert taken == [0]
    assert server.broker.get_topic("away") is None or not server.broker.get_topic("away").partitions
