"""Cluster health in the daemons' Prometheus ``/metrics`` on a real cluster: each nsqd's
partitions (leader, ISR, offsets) and its followers' lag; each lookupd's view of the
cluster (coordinator, offline and under-replicated partitions), through a follower's
SIGKILL and its restart.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from nsqpy.protocol.extend import encode_mpub_partition
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_get

from .conftest import CREATED, OwnCluster, create, leaders, stats_partitions, wire

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(address: str) -> Samples:
    status, body, _ = http_get(f"http://{address}/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def at(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_partitions_and_followers_in_nsqd_metrics(shared: LocalCluster, topic_name: str) -> None:
    topic = topic_name
    assert create(shared, topic, partition_num=2, replicator=3, multipart="true") == CREATED
    for i in range(3):
        shared.wait_for(lambda i=i: len(stats_partitions(shared, i, topic)) == 2, 20,  # type: ignore[misc]
                        f"nsqd {i} holds both partitions")  # fmt: skip
    lead = leaders(shared, topic)
    client = wire(shared, lead[0])
    client.send(encode_mpub_partition(topic, 0, [b"m"] * 7))
    assert client.read_frame() == (0, b"OK")
    client.close()
    node_ids = [shared.node_id(i) for i in range(3)]

    def settled() -> bool:
        s = scrape(shared.nsqd_http(lead[0]))
        lags = [at(s, "nsqd_partition_follower_lag_messages", topic=topic, partition="0",
                   follower=n) for n in node_ids if n != node_ids[lead[0]]]  # fmt: skip
        return lags == [0.0, 0.0]

    shared.wait_for(settled, 10, "both followers of partition 0 caught up")
    for i in range(3):
        s = scrape(shared.nsqd_http(i))
        for p in (0, 1):
            labels = {"topic": topic, "partition": str(p)}
            assert at(s, "nsqd_partition_leader", **labels) == float(lead[p] == i)
            assert at(s, "nsqd_partition_isr", **labels) == 3.0
        assert at(s, "nsqd_partition_end_offset", topic=topic, partition="0") == 7.0
        assert at(s, "nsqd_cluster_live") == 1.0
        left = at(s, "nsqd_cluster_lease_remaining_seconds")
        assert left is not None and 0 < left <= 2.0  # (the test cluster's leases: 2 s)
        puts = at(s, "nsqd_etcd_call_duration_seconds_count", call="put")
        assert puts is not None and puts >= 1  # (its registration, at least)
        within = at(s, "nsqd_etcd_call_duration_seconds_bucket", call="put", le="+Inf")
        assert within == puts
    s = scrape(shared.lookupd_http(0))
    txns = at(s, "nsqlookupd_etcd_call_duration_seconds_count", call="txn")
    assert txns is not None and txns >= 1  # (its coordinator election, topic creations)
    s = scrape(shared.nsqd_http(lead[0]))
    assert at(s, "nsqd_partition_committed_offset", topic=topic, partition="0") == 7.0
    for n in node_ids:
        silent = at(s, "nsqd_partition_follower_silent_seconds", topic=topic, partition="0",
                    follower=n)  # fmt: skip
        if n == node_ids[lead[0]]:
            assert silent is None  # (a leader has no lag of its own)
        else:
            assert silent is not None and 0 <= silent < 5


def test_a_followers_death_shows_as_under_replicated_until_it_is_back(
    own_cluster: OwnCluster,
) -> None:
    cluster = own_cluster(lookupds=2)
    topic = "watched"
    assert create(cluster, topic, partition_num=1, replicator=3) == CREATED
    leader = leaders(cluster, topic)[0]
    follower = next(i for i in range(3) if i != leader)

    def under(i: int) -> float | None:
        return at(scrape(cluster.lookupd_http(i)), "nsqlookupd_cluster_partitions_under_replicated")

    cluster.wait_for(lambda: under(0) == under(1) == 0.0, 20, "every ISR full")
    coordinators = [at(scrape(cluster.lookupd_http(i)), "nsqlookupd_cluster_coordinator")
                    for i in range(2)]  # fmt: skip
    assert coordinators in ([0.0, 1.0], [1.0, 0.0]), "one coordinator"
    cluster.kill_nsqd(follower)
    cluster.wait_for(lambda: under(0) == under(1) == 1.0, 30, "seen under-replicated")
    s = scrape(cluster.lookupd_http(0))
    assert at(s, "nsqlookupd_cluster_topic_partitions_under_replicated", topic=topic) == 1.0
    assert at(s, "nsqlookupd_cluster_partitions_offline") == 0.0
    assert at(s, "nsqlookupd_cluster_nodes") == 2.0
    stats = cluster.lookupd_json("/cluster/stats", 1)  # (what nsqadmin shows in red)
    assert stats["under_replicated_partitions"] == [f"{topic}/0"]
    assert stats["offline_partitions"] == []
    cluster.restart_nsqd(follower)
    cluster.wait_for(lambda: under(0) == under(1) == 0.0, 60, "the ISR full again")

    def counted(name: str) -> float:  # (only the coordinator counts what it writes)
        return sum(at(scrape(cluster.lookupd_http(i)), name) or 0.0 for i in range(2))

    # (the coordinator counts a change once its txn has answered; the lookupds' views, the
    # under-replicated gauge among them, may have it from their watches a moment before)
    for name in ("nsqlookupd_cluster_isr_shrinks_total", "nsqlookupd_cluster_isr_expands_total"):
        cluster.wait_for(lambda n=name: counted(n) >= 1, 10, f"{name} counted")  # type: ignore[misc]
    assert counted("nsqlookupd_cluster_leader_elections_total") == 0
    cluster.kill_nsqd(leader)
    cluster.wait_for(lambda: counted("nsqlookupd_cluster_leader_elections_total") == 1, 30,
                     "the leader's death counted as an election")  # fmt: skip
