"""Replication on a real cluster (issue 19, first step): a topic with two replicas per
partition; what the leader acknowledged is on the follower, and after the leader is
SIGKILLed the new leader (the other ISR member) delivers every acknowledged message."""

from __future__ import annotations

import time

from nsqpy.testing import consume, http_request, mpub

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


def test_too_small_an_isr_stops_writes_until_the_old_leader_rejoins(
    own_cluster: OwnCluster,
) -> None:
    """replicator=2 with one replica left: not a majority, so writes are refused with
    E_FAILED_ON_NOT_WRITABLE (the connection stays open); the killed node, restarted,
    catches up from the new leader, joins the ISR, and writes are taken again."""
    cluster = own_cluster()
    topic = "majority"
    assert create(cluster, topic, partition_num=1, replicator=2) == (200, None)
    leader = leaders(cluster, topic)[0]
    (follower,) = [cluster.node_index(n) for n in cluster.partitions(topic)[0]["isr"]
                   if cluster.node_index(n) != leader]  # fmt: skip
    client = wire(cluster, leader)
    client.send(mpub(topic, [b"before"] * 10))
    assert client.read_frame() == (0, b"OK")
    client.close()

    cluster.kill_nsqd(leader)
    cluster.wait_for(lambda: leaders(cluster, topic)[0] == follower, 15, "the follower leads")
    client = wire(cluster, follower)

    lonely: list[bytes] = []  # taken in the moment before the new leader knew its ISR

    def refused() -> bool:
        client.send(mpub(topic, [b"lonely"]))
        answer = client.read_frame()
        if answer == (0, b"OK"):
            lonely.append(b"lonely")
        return answer == (1, b"E_FAILED_ON_NOT_WRITABLE")

    cluster.wait_for(refused, 10, "writes refused with one replica of two")
    client.send(b"NOP\n")  # still open: not fatal
    status, body, _ = http_request(
        "POST", f"http://{cluster.nsqd_http(follower)}/pub?topic={topic}", b"x"
    )
    assert (status, body) == (400, b'{"message":"E_FAILED_ON_NOT_WRITABLE"}')

    cluster.restart_nsqd(leader)  # the old leader comes back, catches up, rejoins
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 2, 20, "ISR of 2")

    def taken() -> bool:
        client.send(mpub(topic, [b"after"]))
        return client.read_frame() == (0, b"OK")

    cluster.wait_for(taken, 10, "writes taken again")
    client.close()
    want = [b"before"] * 10 + lonely + [b"after"]
    got = consume(cluster.nodes[follower].ports["TCP"], topic, "all", len(want))
    assert got == want
