"""Replication on a real cluster (issue 19, first step): a topic with two replicas per
partition; what the leader acknowledged is on the follower, and after the leader is
SIGKILLed the new leader (the other ISR member) delivers every acknowledged message."""

from __future__ import annotations

import time

from nsqpy.testing import consume, mpub

from .conftest import OwnCluster, create, leaders, stats_partitions, wire


def test_acknowledged_messages_survive_the_leaders_death(own_cluster: OwnCluster) -> None:
    cluster = own_cluster()
    topic = "replicated"
    assert create(cluster, topic, partition_num=1, replicator=2) == (200, None)
    leader = leaders(cluster, topic)[0]
    (follower,) = [cluster.node_index(n) for n in cluster.partitions(topic)[0]["isr"]
                   if cluster.node_index(n) != leader]  # fmt: skip
    cluster.wait_for(lambda: stats_partitions(cluster, follower, topic), 10, "follower holds it")

    client = wire(cluster, leader)
    sent = [f"m{i:04d}".encode() for i in range(1000)]
    for start in range(0, len(sent), 100):
        client.send(mpub(topic, sent[start : start + 100]))
        assert client.read_frame() == (0, b"OK"), "acknowledged once both replicas have it"
    client.close()
    # what was acknowledged is on the follower already (acknowledged after the ISR had it)
    assert stats_partitions(cluster, follower, topic)[0]["high_watermark"] >= len(sent)

    cluster.kill_nsqd(leader)
    killed = time.monotonic()
    cluster.wait_for(lambda: leaders(cluster, topic)[0] == follower, 15, "the follower leads")
    cluster.wait_for(
        lambda: stats_partitions(cluster, follower, topic)[0]["role"] == "leader", 10,
        "the follower takes the lead",
    )  # fmt: skip
    print(f"\nleader killed: the follower leads after {time.monotonic() - killed:.2f}s")
    got = consume(cluster.nodes[follower].ports["TCP"], topic, "after", len(sent), rdy=500)
    assert sorted(got) == sent, "every acknowledged message, from the new leader"
