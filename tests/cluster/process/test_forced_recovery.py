"""Forced recovery on a real three-node cluster: a partition none of whose ISR members is
live stays offline until an operator asks nsqlookupd to elect the live replica with the
longest log (``POST /topic/partition/recover``); what only the dead ISR had is lost, and
the answer says from which offset. Refused while an ISR member is live.
"""

from __future__ import annotations

from urllib.parse import urlencode

from nsqpy.testing import consume, mpub
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_get

from .conftest import OwnCluster, create, leaders, stats_partitions, wire


def recover(cluster: LocalCluster, topic: str, partition: int) -> tuple[int, object]:
    query = urlencode({"topic": topic, "partition": partition})
    return cluster.post(f"/topic/partition/recover?{query}")


def offline(cluster: LocalCluster) -> bool:
    status, body, _ = http_get(f"http://{cluster.lookupd_http(0)}/metrics")
    return status == 200 and b"\nnsqlookupd_cluster_partitions_offline 1\n" in body


def publish(cluster: LocalCluster, i: int, topic: str, bodies: list[bytes]) -> None:
    """MPUB to nsqd ``i``, again while the partition is not writable yet (just led)."""

    def once() -> bool:
        client = wire(cluster, i)
        try:
            client.send(mpub(topic, bodies))
            answer = client.read_frame()
        finally:
            client.close()
        assert answer == (0, b"OK") or b"NOT_WRITABLE" in answer[1], answer
        return answer == (0, b"OK")

    cluster.wait_for(once, 20, f"a publish to nsqd {i}")


def test_a_partition_whose_isr_died_is_recovered_only_when_asked(
    own_cluster: OwnCluster,
) -> None:
    cluster = own_cluster(lookupds=1)
    topic = "forced"
    assert create(cluster, topic, partition_num=1, replicator=3) == (200, None)
    a = leaders(cluster, topic)[0]
    b, c = [i for i in range(3) if i != a]
    publish(cluster, a, topic, [b"old%d" % i for i in range(5)])
    cluster.wait_for(lambda: stats_partitions(cluster, c, topic)[0]["high_watermark"] == 5,
                     10, "every replica has the first five")  # fmt: skip
    status, body = recover(cluster, topic, 0)
    assert (status, body["message"]) == (400, "E_ISR_ALIVE"), body  # type: ignore[index]

    cluster.kill_nsqd(c)  # its lease expires: the ISR is a and b, still a majority
    isr = sorted(cluster.node_id(i) for i in (a, b))
    cluster.wait_for(lambda: sorted(cluster.partitions(topic)[0]["isr"]) == isr, 30,
                     "the ISR without c")  # fmt: skip
    publish(cluster, a, topic, [b"lost%d" % i for i in range(3)])  # (on a and b only)
    cluster.kill_nsqd(a)
    cluster.kill_nsqd(b)
    cluster.restart_nsqd(c)
    # (both leases run out, each on its own keep-alive's time: while b's still holds, b
    # may be elected and lead for that moment, so offline is waited for with both gone)
    dead = {cluster.node_id(a), cluster.node_id(b)}
    cluster.wait_for(lambda: offline(cluster) and not dead & set(cluster.live_nodes()), 30,
                     "the partition offline, a and b gone")  # fmt: skip
    for _ in range(3):  # (it stays so: nothing is elected from outside the ISR unasked)
        assert 0 not in cluster.partitions(topic)

    # c, just started, may not be registered yet: until it is, no replica is live
    cluster.wait_for(lambda: cluster.node_id(c) in cluster.live_nodes(), 30, "c registered")
    status, body = recover(cluster, topic, 0)
    assert status == 200, body
    assert body["leader"] == cluster.node_id(c) and body["offset"] == 5  # type: ignore[index]
    assert "lost" in body["warning"]  # type: ignore[index]
    cluster.wait_for(
        lambda: any("FORCED RECOVERY" in line for line in cluster.lookupds[0].log_lines),
        5,
        "the warning in the coordinator's log",
    )
    # a, back, truncates what only the dead ISR had and catches up from c: a majority
    # again, the partition takes writes.
    cluster.restart_nsqd(a)
    publish(cluster, c, topic, [b"new"])
    port = cluster.nodes[c].ports["TCP"]
    assert consume(port, topic, "c", 6) == [*(b"old%d" % i for i in range(5)), b"new"]
