"""A partition that is its own whole ISR (``replicator=1``) and a catch-up member being
moved onto it (a replica move, the rebalancer, a drain): once the leader has reported the
member caught up (``NodeInfo.caught_up``), nothing may be acknowledged that the member
does not hold, because the coordinator's next txn may make it the ISR and the leader in a
new epoch, and the old leader then cuts its log back to the new leader's (the rebalancer's
process test lost 5 acknowledged messages so, once in a few runs under CPU load: on no
node's disk, the consumer following every move).

Two ``Replication`` (nsqd's replication side) on two brokers, the leader's feed on
127.0.0.1:0 and the member's fetch dialling it, driven as nsqd's member round drives them:
``apply`` of the etcd snapshot, the leader's ``caught_up`` report, then ``reported``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsqpy.broker.broker import Broker
from nsqpy.broker.partition import Partition
from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.nsqd.replicas import Replication
from nsqpy.testing import FakeClock, nsqd_options
from nsqpy.testing.polling import eventually

TOPIC = "t"
LEADER, MEMBER = "L", "M"
# the move's first step: the member copies, the leader is the whole ISR of one replica
REPLICAS = Replicas(leader=LEADER, isr=(LEADER,), catchup=(MEMBER,), epoch=3, leader_epoch=1)


@dataclass
class Node:
    """One nsqd's broker and replication side, holding partition 0 of ``TOPIC``."""

    broker: Broker
    replication: Replication
    told: list[int]  # the committed offset each time the server was told to answer up to it

    @property
    def part(self) -> Partition:
        part = self.broker.topics[TOPIC].partition(0)
        assert part is not None
        return part

    def publish(self, count: int) -> None:
        """What the server does for a publish: append, flush, tell replication."""
        topic = self.broker.topics[TOPIC]
        self.broker.append(topic, [b"m%d" % i for i in range(count)], partition=0)
        flushed, failed = self.broker.flush()
        assert not failed
        for part in flushed:
            self.replication.flushed(part)


async def start_node(directory: Path, clock: FakeClock, node_id: str, role: str) -> Node:
    broker = Broker(nsqd_options(directory), clock=clock)
    broker.cluster_mode = True
    broker.hold_partition(TOPIC, 1, 0, role=role, leader_epoch=1)
    told: list[int] = []

    def replicated(part: Partition) -> None:
        told.append(part.committed_offset)

    replication = Replication(
        broker,
        node_id,
        "c1",
        lambda t, p: REPLICAS if (t, p) == (TOPIC, 0) else None,
        replicated,
    )
    await replication.start("127.0.0.1", 0)
    return Node(broker, replication, told)


@pytest.fixture
async def nodes(tmp_path: Path, clock: FakeClock) -> AsyncIterator[dict[str, Node]]:
    made: dict[str, Node] = {}
    try:
        made[LEADER] = await start_node(tmp_path / LEADER, clock, LEADER, "leader")
        made[MEMBER] = await start_node(tmp_path / MEMBER, clock, MEMBER, "follower")
        yield made
    finally:
        for node in made.values():
            await node.replication.stop()
            node.broker.close()


def snapshot(nodes: dict[str, Node]) -> Snapshot:
    infos = {}
    for node_id, node in nodes.items():
        assert node.replication.address is not None
        host, port = node.replication.address
        infos[node_id] = NodeInfo(node_id, "h", "127.0.0.1", 1, 2, f"{host}:{port}", "v", 0)
    return Snapshot(
        nodes=infos,
        topics={TOPIC: TopicMeta(partition_num=1, replicator=1)},
        replicas={(TOPIC, 0): Versioned(REPLICAS, 7)},
    )


async def test_nothing_is_acknowledged_that_a_member_reported_caught_up_lacks(
    nodes: dict[str, Node],
) -> None:
    leader, member = nodes[LEADER], nodes[MEMBER]
    snap = snapshot(nodes)
    leader.replication.apply(snap)
    member.replication.apply(snap)
    leader.publish(20)
    await eventually(lambda: member.part.log.flushed_offset == 20, what="the member copied 20")
    # alone in its ISR, the leader acknowledges at its flushed end
    assert leader.part.committed_offset == 20

    # the member round: the leader reports the member caught up, the report is in etcd
    report = await eventually(leader.replication.caught_up, what="the member reported caught up")
    assert report == {f"{TOPIC}/0": (1, (MEMBER,))}
    leader.replication.reported(8)  # (the report is in etcd, at a revision after the snapshot)

    # while the member keeps up, publishes are acknowledged once it has them
    leader.publish(10)
    await eventually(lambda: leader.part.committed_offset == 30, what="acknowledged up to 30")
    assert member.part.log.flushed_offset >= 30
    assert leader.told[-1:] == [30]  # (the server answers the publishes waiting)

    # the member stops acknowledging (its fetch ends: a stall, a lost link)
    member.replication.apply(Snapshot())
    await eventually(lambda: not member.replication.fetches, what="the member's fetch stopped")
    has = member.part.log.flushed_offset
    leader.publish(10)
    assert leader.part.log.flushed_offset == has + 10
    # the coordinator may now make the member the ISR and the leader, from its end: so
    # nothing beyond that end is acknowledged to a producer nor shown to a consumer
    assert leader.part.committed_offset <= has
