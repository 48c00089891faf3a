"""The ``nsq`` source and sink over an nsqpy cluster (etcd, two nsqlookupd, three nsqd).

Partitions are found through lookupd and read from their leaders, up to the committed
offset, keyed by the cluster (``cluster:<id>``) so that offsets stay good when another node
takes the lead; the sink publishes through lookupd. The archive pipeline (Spark's file
sink) runs as its own process against the cluster while the leader of a partition is
killed, is killed itself, and still writes every message exactly once.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.protocol.message import encode_message_id
from nsqpy.spark.nsqhttp import NsqdHttp
from nsqpy.testing import http_request, wait_for
from nsqpy.testing.cluster import LocalCluster

from .test_pipelines import commits, committed_offsets, start_archive

TOPIC = "orders"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("spark-cluster")) as started:
        yield started


def create(cluster: LocalCluster, topic: str) -> None:
    status, body = cluster.post(
        f"/topic/create?topic={topic}&partition_num=2&replicator=3&multipart=true"
    )
    assert status == 200, body
    cluster.wait_for(
        lambda: (
            len(parts := cluster.partitions(topic)) == 2
            and all(len(p["isr"]) == 3 for p in parts.values())
        ),
        20,
        f"{topic} in sync",
    )


def publish(cluster: LocalCluster, topic: str, partition: int, bodies: list[bytes]) -> None:
    """MPUB to nsqd 0, which forwards what it does not lead to the partition's leader."""
    live = next(i for i in range(3) if cluster.running(cluster.nodes[i]))
    for i in range(0, len(bodies), 200):
        part = bodies[i : i + 200]
        payload = struct.pack(">i", len(part)) + b"".join(
            struct.pack(">i", len(b)) + b for b in part
        )
        url = (
            f"http://{cluster.nsqd_http(live)}/mpub?topic={topic}&partition={partition}&binary=true"
        )
        status, body, _ = http_request("POST", url, payload)
        assert (status, body) == (200, b"OK"), body


def test_a_batch_read_finds_the_leaders_through_lookupd_and_reads_each_message_once(
    cluster: LocalCluster, spark: Any
) -> None:
    topic = "batch"
    create(cluster, topic)
    sent = {p: [b"p%d-%04d" % (p, i) for i in range(300)] for p in (0, 1)}
    for p, bodies in sent.items():
        publish(cluster, topic, p, bodies)
    # a follower serves no partition to readers; the leader says which cluster it is
    for p, info in cluster.partitions(topic).items():
        follower = next(n for n in info["isr"] if n != info["id"])
        with NsqdHttp(cluster.nsqd_http(cluster.node_index(follower)), 10) as conn:
            marks = {m.partition: m for m in conn.watermarks(topic) or []}
        assert marks[p].leader is False and marks[p].node == "cluster:test"
    rows = (
        spark.read.format("nsq")
        .option("lookupd", ",".join(cluster.lookupd_https()))
        .option("topic", topic)
        .load()
        .select("partition", "offset", "body")
        .collect()
    )
    got = {p: sorted((r.offset, bytes(r.body)) for r in rows if r.partition == p) for p in (0, 1)}
    for p in (0, 1):
        assert [o for o, _ in got[p]] == list(range(300)), p  # each offset once
        assert [b for _, b in got[p]] == sent[p]


def test_the_sink_publishes_through_lookupd(cluster: LocalCluster, spark: Any) -> None:
    topic = "sunk"
    create(cluster, topic)
    frame = spark.createDataFrame([(b"s%03d" % i, f"k{i % 7}") for i in range(100)],
                                  "body binary, partition_key string")  # fmt: skip
    (
        frame.write.format("nsq")
        .option("lookupd", ",".join(cluster.lookupd_https()))
        .option("topic", topic)
        .mode("append")
        .save()
    )
    total = 0
    for p, info in cluster.partitions(topic).items():
        doc = cluster.nsqd_json(cluster.node_index(info["id"]), f"/stats?format=json&topic={topic}")
        (entry,) = [e for e in doc["topics"][0]["partitions"] if e["partition"] == p]
        total += entry["message_count"]
    assert total == 100


@pytest.mark.timeout(480)
def test_archive_through_sparks_file_sink_is_exactly_once_across_a_leader_kill_and_its_own(
    cluster: LocalCluster, spark: Any, tmp_path: Path
) -> None:
    """``--writer spark`` (Spark's Parquet file sink, what a Hadoop output gets): partition
    0's leader is SIGKILLed mid-stream, then the job's whole process group, and a new run
    goes on from the checkpoint to the end. Read back through Spark (its file sink's log
    says which files count), every message is there once."""
    create(cluster, TOPIC)
    sent = {p: [b"o%d-%05d" % (p, i) for i in range(1500)] for p in (0, 1)}
    for p, bodies in sent.items():
        publish(cluster, TOPIC, p, bodies)
    out, checkpoint, log = tmp_path / "archive", tmp_path / "checkpoint", tmp_path / "spark.log"
    args = [
        "pipeline", "archive", f"--lookupd={','.join(cluster.lookupd_https())}",
        f"--topic={TOPIC}", f"--output={out}", f"--checkpoint={checkpoint}", "--writer=spark",
        "--master=local[2]", "--quiet", "--conf=spark.ui.enabled=false",
        "--conf=spark.sql.shuffle.partitions=2",
        "--conf=spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "--max-offsets-per-trigger=200", "--trigger=0 seconds",
    ]  # fmt: skip
    proc = start_archive(args, log)
    victim = -1
    try:
        wait_for(lambda: commits(checkpoint) >= 2 or proc.poll() is not None, timeout=150)
        assert proc.poll() is None, log.read_text()[-3000:]
        victim = cluster.node_index(cluster.partitions(TOPIC)[0]["id"])
        cluster.kill_nsqd(victim)  # the leader of partition 0, in the middle of the stream
        cluster.wait_for(
            lambda: cluster.partitions(TOPIC)[0]["id"] != cluster.node_id(victim),
            20,
            "partition 0 led again",
        )
        more = {p: [b"o%d-%05d" % (p, i) for i in range(1500, 1700)] for p in (0, 1)}
        for p, bodies in more.items():
            publish(cluster, TOPIC, p, bodies)
            sent[p] += bodies
        before = commits(checkpoint)
        wait_for(lambda: commits(checkpoint) >= before + 3 or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, log.read_text()[-3000:]  # the query survived the failover
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started
        proc.wait()
        if victim >= 0:
            cluster.restart_nsqd(victim)
    total = sum(len(bodies) for bodies in sent.values())
    read = sum(committed_offsets(checkpoint, TOPIC).values())
    assert read < total, "killed in the middle of the stream, not at its end"
    final = start_archive([*args, "--once"], log)
    assert final.wait(timeout=240) == 0, log.read_text()[-3000:]
    assert "batch " in log.read_text()  # progress lines were shown

    rows = spark.read.parquet(str(out)).select("partition", "offset", "body", "id", "date")
    rows = rows.collect()
    for p in (0, 1):
        mine = sorted((r.offset, bytes(r.body)) for r in rows if r.partition == p)
        assert [o for o, _ in mine] == list(range(1700)), p  # each offset exactly once
        assert [b for _, b in mine] == sent[p]
    assert all(r.id == encode_message_id(r.partition, r.offset).decode() for r in rows), rows[:3]
    today = dt.datetime.now(dt.UTC).date()
    assert {r.date for r in rows} <= {today, today - dt.timedelta(days=1)}
    assert {p.name for p in out.iterdir() if p.name.startswith("date=")}
    assert (out / "_spark_metadata").is_dir()  # Spark's file sink wrote it
