"""Youzan's subscription forms on a real three-node cluster: SUB_ADVANCED from a position
on a partition's leader (its followers take up the moved cursor; a follower refuses a
subscription from a position: the cursor moves on the leader), and nsqpy's own client subscribing to one partition, ordered, found
through lookupd's per-partition answer.
"""

from __future__ import annotations

import asyncio

from nsqpy.client import Consumer, Message
from nsqpy.protocol.extend import encode_mpub_partition as mpub_partition
from nsqpy.protocol.message import decode_message
from nsqpy.testing import WireClient
from nsqpy.testing.cluster import LocalCluster

from .conftest import CREATED, create, leaders, stats_partitions, wire


def confirmed(cluster: LocalCluster, i: int, topic: str, partition: int, channel: str) -> int:
    """The confirmed offset of ``channel`` over ``partition`` on nsqd ``i`` (-1: none)."""
    doc = cluster.nsqd_json(i, f"/stats?format=json&topic={topic}&channel={channel}")
    for entry in doc["topics"] or []:
        for c in entry["channels"]:
            for p in c["partitions"]:
                if c["channel_name"] == channel and p["partition"] == partition:
                    return int(p["confirmed_offset"])
    return -1


def test_sub_advanced_moves_the_cursor_on_every_replica(
    shared: LocalCluster, topic_name: str
) -> None:
    topic = topic_name
    assert create(shared, topic, partition_num=2, replicator=3, multipart="true") == CREATED
    for i in range(3):
        shared.wait_for(lambda i=i: len(stats_partitions(shared, i, topic)) == 2, 20,  # type: ignore[misc]
                        f"nsqd {i} holds both partitions")  # fmt: skip
    lead = leaders(shared, topic)
    for p in (0, 1):
        client = wire(shared, lead[p])
        client.send(mpub_partition(topic, p, [b"%d-%d" % (p, i) for i in range(10)]))
        assert client.read_frame() == (0, b"OK")
        client.close()

    sub = WireClient(shared.nodes[lead[1]].ports["TCP"], timeout=10)
    sub.send(b"  V2" + f"SUB_ADVANCED {topic} c 1 virtual_queue:7\n".encode() + b"RDY 10\n")
    assert sub.read_frame() == (0, b"OK")
    got = []
    for _ in range(3):
        ftype, data = sub.read_frame()
        assert ftype == 2
        msg = decode_message(data, detail=True)
        got.append((msg.queue_offset, msg.body))
        sub.send(b"FIN " + msg.id + b"\n")
    assert got == [(i, b"1-%d" % i) for i in range(7, 10)]
    for i in range(3):  # the leader and, by cursor replication, both followers
        shared.wait_for(lambda i=i: confirmed(shared, i, topic, 1, "c") == 10, 10,  # type: ignore[misc]
                        f"the moved cursor on nsqd {i}")  # fmt: skip
    sub.close()

    follower = next(i for i in range(3) if i != lead[1])
    refused = wire(shared, follower)
    refused.send(f"SUB_ADVANCED {topic} c 1 special:-2\n".encode())
    ftype, data = refused.read_frame()
    assert (ftype, data.split()[0]) == (1, b"E_FAILED_ON_NOT_LEADER"), data
    refused.close()
    assert confirmed(shared, lead[1], topic, 1, "c") == 10, "the follower moved nothing"


def test_the_client_finds_one_partitions_leader_and_consumes_it_in_order(
    shared: LocalCluster, topic_name: str
) -> None:
    topic = topic_name
    assert create(shared, topic, partition_num=2, replicator=2, multipart="true") == CREATED
    lead = leaders(shared, topic)
    for p in (0, 1):
        client = wire(shared, lead[p])
        client.send(mpub_partition(topic, p, [b"%d-%d" % (p, i) for i in range(50)]))
        assert client.read_frame() == (0, b"OK")
        client.close()

    async def consume() -> tuple[list[Message], list[str]]:
        got: list[Message] = []

        async def handler(msg: Message) -> None:
            got.append(msg)

        lookupds = [shared.lookupd_http(0)]
        async with Consumer(
            topic, "c", handler, lookupd_http_addresses=lookupds, partition=0, ordered=True,
            max_in_flight=20,
        ) as consumer:  # fmt: skip
            async with asyncio.timeout(20):
                while len(got) < 50:
                    await asyncio.sleep(0.05)
            return got, [c.key for c in consumer.connections]

    got, connected = asyncio.run(consume())
    assert connected == [shared.nsqd_tcp(lead[0])], "only partition 0's leader"
    assert [(m.queue_offset, m.body) for m in got] == [(i, b"0-%d" % i) for i in range(50)]


def test_internal_create_topic_creates_and_grows_through_the_coordinator(
    shared: LocalCluster, topic_name: str
) -> None:
    """youzan's INTERNAL_CREATE_TOPIC on a cluster node (what its client's test suite
    creates every topic with): the topic is created as an implicit creation would, then
    grown to the partition asked; each answer comes once the cluster has it."""
    topic = topic_name
    client = wire(shared, 1, timeout=15)
    client.send(f"INTERNAL_CREATE_TOPIC {topic} 0\n".encode())
    assert client.read_frame() == (0, b"OK")
    # (lookupd answers from its own view of etcd, a moment behind this node's)
    shared.wait_for(lambda: 0 in shared.partitions(topic), 10, "lookupd shows the topic")
    client.send(f"INTERNAL_CREATE_TOPIC {topic} 4 true\n".encode())
    assert client.read_frame() == (0, b"OK")
    shared.wait_for(lambda: sorted(shared.partitions(topic)) == [0, 1, 2, 3, 4], 10,
                    "lookupd shows five partitions")  # fmt: skip
    client.send(f"INTERNAL_CREATE_TOPIC {topic} 2\n".encode())  # it has that one: as it is
    assert client.read_frame() == (0, b"OK")
    lead = leaders(shared, topic)
    publisher = wire(shared, lead[4])
    publisher.send(mpub_partition(topic, 4, [b"x"]))
    assert publisher.read_frame() == (0, b"OK")
    client.close()
    publisher.close()


def test_a_partition_of_an_unknown_topic_creates_nothing(
    shared: LocalCluster, topic_name: str
) -> None:
    """youzan's forms name a partition, and create nothing (as on a single nsqd): a PUB or
    SUB of a partition of a topic the cluster lacks is the fatal E_TOPIC_NOT_EXIST (youzan's
    producer then fails the publish; its consumer drops the node); a plain PUB creates it."""
    for command in (mpub_partition(topic_name, 0, [b"x"]), f"SUB {topic_name} c 0\n".encode()):
        client = wire(shared, 0)
        client.send(command)
        ftype, data = client.read_frame()
        assert (ftype, data.split()[0]) == (1, b"E_TOPIC_NOT_EXIST"), data
        client.close()
    status, _ = shared.request("GET", shared.lookupd_http(0), f"/lookup?topic={topic_name}")
    assert status == 404
    client = wire(shared, 0, timeout=15)
    client.send(f"PUB {topic_name}\n".encode() + b"\x00\x00\x00\x01x")
    assert client.read_frame() == (0, b"OK")
    client.close()
