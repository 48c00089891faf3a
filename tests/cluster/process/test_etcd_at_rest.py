"""A cluster at rest writes nothing to etcd: each nsqd's report (``nodes/<id>``) is written
when it changes, not on a timer; its lease is kept alive by etcd's keep-alive. A
partition's new end is still written, within the period for ends (10 s). A busy cluster
writes its ends, and the coordinator's compaction keeps etcd's database from growing."""

from __future__ import annotations

import time

import pytest

from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import NodeInfo
from nsqpy.testing import http_request
from nsqpy.testing.cluster import LocalCluster

from .conftest import OwnCluster, create, leaders

TOPIC = "resting"


def stable(cluster: LocalCluster) -> bool:
    doc = cluster.lookupd_json("/cluster/stats")
    parts = cluster.partitions(TOPIC)
    return (
        bool(doc.get("stable"))
        and len(parts) == 4
        and all(len(p["isr"]) == 3 for p in parts.values())
    )


def reports_written(cluster: LocalCluster) -> list[int]:
    return [int(cluster.nsqd_json(i, "/info")["node_reports_written"]) for i in range(3)]


def test_a_cluster_at_rest_writes_nothing_to_etcd(own_cluster: OwnCluster) -> None:
    cluster = own_cluster(nodes=3, lookupds=1)
    assert create(cluster, TOPIC, partition_num=4, replicator=3, multipart="true") == (200, None)
    leader = leaders(cluster, TOPIC)[0]
    for n in range(20):
        status, _, _ = http_request(
            "POST", f"http://{cluster.nsqd_http(leader)}/pub?topic={TOPIC}&partition=0",
            b"m%d" % n, 10.0,
        )  # fmt: skip
        assert status == 200
    cluster.wait_for(lambda: stable(cluster), 30, "every partition's ISR full, cluster stable")
    keys = [Keys(cluster.cluster_id).node(cluster.nsqd_json(i, "/info")["node_id"])
            for i in range(3)]  # fmt: skip
    key = keys[leader]

    def reported_end(key: str = key) -> int:
        found = cluster.etcd.get(key)
        got = NodeInfo.from_json(found[0]).end(TOPIC, 0) if found is not None else None
        return got[1] if got is not None else -1

    # every holder's end after the 20 messages: in etcd within the period for ends (10 s;
    # sooner when the report changed for another reason, an ISR member joining)
    cluster.wait_for(lambda: all(reported_end(k) == 20 for k in keys), 15, "the ends in etcd")
    # the last changes' reports (each within a report period, 0.4 s; later on a busy
    # machine): at rest once a second passed with none
    quiet_by = time.monotonic() + 15
    while True:
        before = reports_written(cluster)
        time.sleep(1.0)
        if reports_written(cluster) == before:
            break
        assert time.monotonic() < quiet_by, "nsqd kept writing reports"

    revision = cluster.etcd.revision()
    time.sleep(4.0)  # ten report periods: ten writes per node on a timer
    assert cluster.etcd.revision() - revision <= 2, "etcd written at rest"  # (a lag may come, go)
    written = reports_written(cluster)  # (what nsqd's /info says)
    time.sleep(1.0)
    assert sum(reports_written(cluster)) - sum(written) <= 1

    # what changes is written: the leader's new end of partition 0, within 10 s
    status, _, _ = http_request(
        "POST", f"http://{cluster.nsqd_http(leader)}/pub?topic={TOPIC}&partition=0", b"new", 10.0
    )
    assert status == 200
    cluster.wait_for(lambda: reported_end() == 21, 15, "the leader's new end in etcd")


BUSY = "busy"


def db_in_use(cluster: LocalCluster) -> int:
    status = cluster.etcd.status(0, timeout=5.0)
    assert status is not None
    return int(str(status["dbSizeInUse"]))


def publish_for(cluster: LocalCluster, seconds: float) -> None:
    """MPUBs of 10 messages to every partition in turn, for ``seconds``."""
    lead = leaders(cluster, BUSY)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p, i in lead.items():
            status, _, _ = http_request(
                "POST", f"http://{cluster.nsqd_http(i)}/mpub?topic={BUSY}&partition={p}",
                b"x" * 100 + b"\n" * 10, 10.0,
            )  # fmt: skip
            assert status == 200


@pytest.mark.parametrize("compact", ["1s", "0"], ids=["compacted", "never-compacted"])
def test_a_busy_clusters_etcd_database_stays_flat_when_the_coordinator_compacts(
    own_cluster: OwnCluster, compact: str
) -> None:
    """A busy cluster writes its partitions' ends (here every 100 ms instead of 10 s, so
    seconds stand for hours): with the coordinator compacting (``--etcd-compact-interval``,
    1 s here) the history behind it is gone and etcd's database in use stops growing; with
    compaction off (the control: the measure can see growth) it grows with every write."""
    cluster = own_cluster(
        nodes=3, lookupds=1, nsqd_flags=["--etcd-report-ends-interval=100ms"],
        lookupd_flags=[f"--etcd-compact-interval={compact}"],
    )  # fmt: skip
    assert create(cluster, BUSY, partition_num=48, replicator=3, multipart="true") == (200, None)
    publish_for(cluster, 4.0)  # (etcd's pages for the cluster's keys)
    start, used = cluster.etcd.revision(), db_in_use(cluster)
    publish_for(cluster, 12.0)
    time.sleep(2.0)  # (a compaction after the last write)
    end = cluster.etcd.revision()
    grown = db_in_use(cluster) - used
    assert end - start >= 60, "the busy cluster wrote too little to etcd to tell"
    if compact == "0":
        assert cluster.etcd.get(Keys(cluster.cluster_id).root, revision=start) is None
        assert grown > 256 << 10, f"{grown} bytes: the control shows no growth"
    else:
        with pytest.raises(RuntimeError, match="compacted"):
            cluster.etcd.get(Keys(cluster.cluster_id).root, revision=start)
        assert grown <= 64 << 10, f"etcd's database in use grew {grown} bytes while compacted"
