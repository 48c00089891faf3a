"""Faults on a real cluster, each on a cluster of its own (leases of 2 s): an nsqd SIGKILLed,
the coordinating nsqlookupd SIGKILLed, etcd stopped and started again. What is measured is
asserted with the issue's bounds (a dead node seen within a few seconds of its lease, a new
coordinator within 10 s) and printed (``-s`` shows the figures)."""

from __future__ import annotations

import time

from nsqpy.testing import pub
from nsqpy.testing.cluster import LocalCluster

from .conftest import OwnCluster, create, leaders, stats_partitions, three_replicas, wire


def producer_ids(cluster: LocalCluster, topic: str, via: int) -> set[str]:
    doc = cluster.lookupd_json(f"/lookup?topic={topic}", via)
    return {p["id"] for p in doc["producers"]}


def test_killed_nsqd_leaves_lookup_and_its_partitions_get_new_leaders(
    own_cluster: OwnCluster,
) -> None:
    cluster = own_cluster()
    topic = "failover"
    assert create(cluster, topic, partition_num=3, replicator=2, multipart="true") == (200, None)
    before = cluster.partitions(topic)
    victim = leaders(cluster, topic)[0]
    dead = cluster.node_id(victim)
    led = {p: info for p, info in before.items() if info["id"] == dead}
    assert dead in producer_ids(cluster, topic, 0)

    cluster.kill_nsqd(victim)
    killed_at = time.monotonic()
    for via in (0, 1):
        cluster.wait_for(lambda via=via: dead not in producer_ids(cluster, topic, via), 10,  # type: ignore[misc]
                         f"lookupd {via} drops {dead} from the producers")  # fmt: skip
        cluster.wait_for(
            lambda via=via: dead not in {n["id"] for n in cluster.lookupd_json(  # type: ignore[misc]
                "/cluster/stats", via)["node_stat_list"]}, 10, f"lookupd {via}: {dead} gone",
        )  # fmt: skip
    gone_after = time.monotonic() - killed_at

    def moved() -> bool:
        now = cluster.partitions(topic)
        return all(now[p]["id"] != dead for p in led)

    cluster.wait_for(moved, 10, f"new leaders for {sorted(led)}")
    moved_after = time.monotonic() - killed_at
    print(f"\nnsqd killed: gone from lookup after {gone_after:.2f}s, "
          f"partitions led again after {moved_after:.2f}s (lease 2s)")  # fmt: skip
    assert moved_after < 8.0
    after = cluster.partitions(topic)
    for p, info in led.items():
        (survivor,) = set(info["isr"]) - {dead}
        assert after[p]["id"] == survivor, "the other ISR member leads"
        assert after[p]["leader_epoch"] == info["leader_epoch"] + 1
        assert after[p]["epoch"] > info["epoch"]
        i = cluster.node_index(survivor)
        cluster.wait_for(
            lambda i=i, p=p: stats_partitions(cluster, i, topic)[p]["role"] == "leader", 10,  # type: ignore[misc]
            f"nsqd {i} leads {topic}/{p}",
        )  # fmt: skip
        assert stats_partitions(cluster, i, topic)[p]["leader_epoch"] == after[p]["leader_epoch"]
    for p in set(before) - set(led):  # partitions another node led keep their leader
        assert after[p]["id"] == before[p]["id"]
    cluster.wait_for(  # (lookupd 1's view follows a watch of its own)
        lambda: producer_ids(cluster, topic, 1) == {info["id"] for info in after.values()},
        10,
        "lookupd 1 lists the new leaders",
    )


def test_killed_coordinator_is_replaced_and_creates_work_through_either_lookupd(
    own_cluster: OwnCluster,
) -> None:
    cluster = own_cluster()
    old = cluster.coordinator_index()
    other = 1 - old
    cluster.kill_lookupd(old)
    killed_at = time.monotonic()
    # etcd names the new coordinator as soon as it holds the lock, a moment before it
    # leads: a creation sent to it then waits for its takeover (not 503 MISSING_COORDINATOR)
    cluster.wait_for(lambda: cluster.coordinator_index() == other, 10, "etcd names the other")
    took = time.monotonic() - killed_at
    print(f"\ncoordinator killed: lookupd {other} coordinates after {took:.2f}s (lease 2s)")
    assert create(
        cluster, "after_kill", other, partition_num=2, replicator=2, multipart="true"
    ) == (200, None)
    assert sorted(cluster.partitions("after_kill")) == [0, 1]

    cluster.restart_lookupd(old)  # comes back as a lookupd that does not coordinate
    cluster.wait_for(lambda: len(cluster.lookupd_json("/listlookup", old)["lookupdnodes"]) == 2,
                     10, "the restarted lookupd is listed")  # fmt: skip
    assert cluster.coordinator_index() == other
    assert create(cluster, "via_restarted", old, partition_num=1, replicator=3) == (200, None)
    for via in (0, 1):
        cluster.wait_for(lambda via=via: cluster.lookupd_json(  # type: ignore[misc]
            "/lookup?topic=via_restarted", via)["producers"], 10, f"lookupd {via} sees it")  # fmt: skip


def lease_lost(line: str) -> bool:
    return "etcd lease" in line and " lost: " in line


def test_daemons_reconnect_after_etcd_restarts(own_cluster: OwnCluster) -> None:
    cluster = own_cluster()
    pids = [p.pid for p in [*cluster.nodes, *cluster.lookupds]]
    marks = [len(p.log_lines) for p in cluster.nodes]
    cluster.etcd.stop(0)
    stopped_at = time.monotonic()
    # down for longer than a lease: every nsqd sees its lease lost
    for i, proc in enumerate(cluster.nodes):
        cluster.wait_for(lambda proc=proc, i=i: any(lease_lost(line) for line in  # type: ignore[misc]
                         proc.log_lines[marks[i]:]), 15, f"nsqd {i} loses its lease")  # fmt: skip
    marks = [len(p.log_lines) for p in cluster.nodes]
    cluster.etcd.restart(0)
    cluster.etcd.wait_healthy()
    restarted_at = time.monotonic()

    for i, proc in enumerate(cluster.nodes):
        cluster.wait_for(lambda proc=proc, i=i: any("registered in cluster" in line  # type: ignore[misc]
                         for line in proc.log_lines[marks[i]:]), 15, f"nsqd {i} registers again")  # fmt: skip
    cluster.wait_ready(15)
    cluster.wait_for(
        lambda: create(cluster, "after_etcd", partition_num=3, replicator=2,
                       multipart="true") == (200, None), 15, "a topic create succeeds",
    )  # fmt: skip
    back = time.monotonic() - restarted_at
    print(f"\netcd down {restarted_at - stopped_at:.2f}s; cluster usable {back:.2f}s after")
    parts = cluster.partitions("after_etcd")
    for i in range(3):
        mine = {p for p, info in parts.items() if cluster.node_id(i) in info["isr"]}
        assert mine, "3 partitions x 2 replicas over 3 nodes: every node holds some"
        cluster.wait_for(lambda i=i, mine=mine: set(stats_partitions(  # type: ignore[misc]
            cluster, i, "after_etcd")) == mine, 10, f"nsqd {i} takes {sorted(mine)}")  # fmt: skip
    for via in (0, 1):
        assert set(cluster.live_nodes()) == {cluster.node_id(i) for i in range(3)}
        doc = cluster.lookupd_json("/listlookup", via)
        assert len(doc["lookupdnodes"]) == 2 and doc["lookupdleader"]
    assert [p.pid for p in [*cluster.nodes, *cluster.lookupds]] == pids, "no daemon restarted"
    assert all(cluster.running(p) for p in [*cluster.nodes, *cluster.lookupds])


def test_a_leader_whose_lease_runs_out_leads_nothing_at_once(own_cluster: OwnCluster) -> None:
    """Found with the Jepsen harness: a leader cut off from etcd stopped leading only when
    its pending etcd call gave up (a 5 s deadline), seconds after its lease had run out,
    and held its clients' publishes that long. It must lead nothing from the moment its
    lease is gone (CLUSTER.md: a node without a lease acknowledges nothing)."""
    cluster = own_cluster()
    topic = "lease_out"
    leader = three_replicas(cluster, topic)
    client = wire(cluster, leader)
    client.send(pub(topic, b"before"))
    assert client.read_frame() == (0, b"OK")
    client.close()
    cluster.etcd.pause(0)  # (a frozen etcd: calls hang rather than fail)
    paused = time.monotonic()
    try:
        cluster.wait_for(
            lambda: stats_partitions(cluster, leader, topic)[0]["role"] != "leader", 15,
            "the old leader steps down",
        )  # fmt: skip
        after = time.monotonic() - paused
        print(f"\netcd frozen: the leader stepped down after {after:.2f}s (lease 2s)")
        # within its lease (2 s) and a report, on a busy machine too; before the fix it
        # stepped down only when a call pending since the pause gave up (5 s)
        assert after < 4.5, "within its lease (2 s) and a report, not an etcd deadline later"
    finally:
        cluster.etcd.resume(0)

    def leading() -> int | None:
        for i in range(3):
            if stats_partitions(cluster, i, topic).get(0, {}).get("role") == "leader":
                return i
        return None

    def published() -> bool:
        now = leading()
        if now is None:
            return False
        client = wire(cluster, now)
        try:
            client.send(pub(topic, b"after"))
            return client.read_frame() == (0, b"OK")  # (NOT_WRITABLE until the ISR is back)
        finally:
            client.close()

    cluster.wait_for(published, 30, "a leader again, taking writes")


def test_a_partition_a_node_cannot_store_leaves_its_other_partitions_taken_up(
    own_cluster: OwnCluster,
) -> None:
    """nsqd 0 cannot make the directories of topics ``a_bad0``-``a_bad2`` (a file stands
    where each goes): it logs that once for each and holds every other partition given to
    it all the same, those of ``b_good`` (taken up after them in a pass) too. Each bad one
    is led and written by the other two: where nsqd 0 was to lead it, it reports it cannot
    (``NodeInfo.failing``) and another ISR member is elected; where it was to follow, its
    leader leaves it out of the ISR."""
    cluster = own_cluster(lookupds=1)
    topics = cluster.directory / "nsqd0" / "topics"
    topics.mkdir(parents=True, exist_ok=True)
    bad = [f"a_bad{n}" for n in range(3)]  # (placed evenly: nsqd 0 likely leads one)
    for topic in bad:
        (topics / f"topic-{topic}").write_bytes(b"not a directory")
    for topic in [*bad, "b_good"]:
        assert create(cluster, topic, partition_num=1, replicator=3) == (200, None)
    for i in range(3):
        cluster.wait_for(lambda i=i: stats_partitions(cluster, i, "b_good"), 15,  # type: ignore[misc]
                         f"nsqd {i} holds b_good")  # fmt: skip
    node0 = cluster.node_id(0)
    for topic in bad:
        for i in (1, 2):
            cluster.wait_for(lambda i=i, t=topic: stats_partitions(cluster, i, t), 15,  # type: ignore[misc]
                             f"nsqd {i} holds {topic}")  # fmt: skip
        cluster.wait_for(lambda t=topic: node0 not in cluster.partitions(t)[0]["isr"]  # type: ignore[misc]
                         and leaders(cluster, t)[0] != 0, 30, f"{topic} without nsqd 0")  # fmt: skip
        assert not stats_partitions(cluster, 0, topic)
        lines = [ln for ln in cluster.nodes[0].log_lines if f"cannot hold {topic}/0" in ln]
        assert len(lines) == 1, lines

        def published(t: str = topic) -> bool:
            client = wire(cluster, leaders(cluster, t)[0])
            try:
                client.send(pub(t, b"still writable"))
                return client.read_frame() == (0, b"OK")
            finally:
                client.close()

        cluster.wait_for(published, 15, f"a publish to {topic}")
