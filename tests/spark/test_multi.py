"""Reads spanning several nsqd (found through nsqlookupd) and several topics at once.

A topic on two nsqd is two separate logs, both with a partition 0 and offsets from 0: the
source keys each by node and partition (``"127.0.0.1:<http port>/0"``), in batch plans
and in the streaming checkpoint, so a restarted stream goes on per node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.errors import ConfigError
from nsqpy.spark.options import source_options
from nsqpy.spark.plan import plan_batch
from nsqpy.testing import DaemonProcess, http_get, lookupd_process, wait_for

from .conftest import publish, start_nsqd

Cluster = tuple[DaemonProcess, DaemonProcess, DaemonProcess]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One nsqlookupd and two nsqd registered with it."""
    lookupd = lookupd_process().start()
    nodes: list[DaemonProcess] = []
    try:
        for name in ("a", "b"):
            register = f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
            nodes.append(start_nsqd(tmp_path_factory.mktemp(f"nsqd-{name}"), register))
        yield lookupd, nodes[0], nodes[1]
    finally:
        for daemon in nodes:
            daemon.kill()
        lookupd.kill()


def node(daemon: DaemonProcess) -> str:
    return f"127.0.0.1:{daemon.http_port}"


def producers(lookupd: DaemonProcess, topic: str) -> int:
    status, body, _ = http_get(f"{lookupd.http}/lookup?topic={topic}")
    return len(json.loads(body)["producers"]) if status == 200 else 0


def publish_on_both(cluster: Cluster, topic: str, count: int, start: int = 0) -> None:
    lookupd, a, b = cluster
    publish(a, topic, [b"a-%d" % i for i in range(start, start + count)])
    publish(b, topic, [b"b-%d" % i for i in range(start, start + count)])
    wait_for(lambda: producers(lookupd, topic) == 2, timeout=30)


def rows(df: Any) -> list[tuple[str, int, int, str]]:
    got = df.selectExpr("topic", "partition", "offset", "cast(body AS string) AS b").collect()
    return sorted((r.topic, r.partition, r.offset, r.b) for r in got)


def test_batch_reads_a_topic_from_every_nsqd_lookupd_names(spark: Any, cluster: Cluster) -> None:
    lookupd, a, b = cluster
    publish_on_both(cluster, "spread", 30)

    def reader() -> Any:  # a new one each time: DataFrameReader.option changes the reader
        return spark.read.format("nsq").option("lookupd", lookupd.http).option("topic", "spread")

    expected = sorted(
        [("spread", 0, i, f"a-{i}") for i in range(30)]
        + [("spread", 0, i, f"b-{i}") for i in range(30)]
    )
    assert rows(reader().load()) == expected
    # a bare partition number applies on every node; node/partition on that node only
    starting = {"spread": {"0": 20, f"{node(b)}/0": 25}}
    got = rows(reader().option("startingOffsets", json.dumps(starting)).load())
    assert got == sorted(
        [("spread", 0, i, f"a-{i}") for i in range(20, 30)]
        + [("spread", 0, i, f"b-{i}") for i in range(25, 30)]
    )
    ending = {"spread": {f"{node(a)}/0": 3, f"{node(b)}/0": 1}}
    got = rows(reader().option("endingOffsets", json.dumps(ending)).load())
    assert sorted(r[3] for r in got) == ["a-0", "a-1", "a-2", "b-0"]
    with pytest.raises(Exception, match=r"names spread partition 127.0.0.1:1/0, which does not"):
        reader().option("startingOffsets", '{"spread": {"127.0.0.1:1/0": 0}}').load().collect()


def test_one_nsqd_given_twice_is_refused(cluster: Cluster) -> None:
    _, a, _ = cluster
    publish(a, "twice", [b"x"])
    opts = source_options(
        {"nsqd": f"127.0.0.1:{a.http_port},localhost:{a.http_port}", "topic": "twice"},
        streaming=False,
    )
    with pytest.raises(ConfigError, match=rf"are the same nsqd \({node(a)}\)"):
        plan_batch(opts)


@pytest.mark.timeout(300)  # two streaming runs; slow under load
def test_stream_keeps_offsets_per_node_across_restarts(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    lookupd, a, b = cluster
    publish_on_both(cluster, "flow", 40)
    seen: list[str] = []
    df = (
        spark.readStream.format("nsq")
        .option("lookupd", lookupd.http)
        .option("topic", "flow")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30")
        .load()
    )

    def run() -> Any:
        writer = df.selectExpr("cast(body AS string) AS b").writeStream.foreachBatch(
            lambda batch, _id: seen.extend(r.b for r in batch.collect())
        )
        query = writer.option("checkpointLocation", str(tmp_path / "ck"))
        query = query.trigger(availableNow=True).start()
        assert query.awaitTermination(120) and query.exception() is None
        return query

    query = run()
    assert sorted(seen) == sorted([f"a-{i}" for i in range(40)] + [f"b-{i}" for i in range(40)])
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 30 and sum(sizes) == 80
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {"flow": {f"{node(a)}/0": 40, f"{node(b)}/0": 40}}

    seen.clear()
    publish(b, "flow", [b"b-%d" % i for i in range(40, 45)])  # only on one node
    query = run()  # from the checkpoint: only what is new, on the node that has it
    assert sorted(seen) == [f"b-{i}" for i in range(40, 45)]
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {"flow": {f"{node(a)}/0": 40, f"{node(b)}/0": 45}}


def test_several_topics_in_one_read(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    _, a, _ = cluster
    publish(a, "left", [b"l-%d" % i for i in range(12)])
    publish(a, "right", [b"r-%d" % i for i in range(7)])

    def reader() -> Any:
        return spark.read.format("nsq").option("nsqd", a.http).option("topic", "left,right")

    expected = sorted(
        [("left", 0, i, f"l-{i}") for i in range(12)]
        + [("right", 0, i, f"r-{i}") for i in range(7)]
    )
    assert rows(reader().load()) == expected
    starting = {"left": {"0": 10}, "right": {"0": 5}}
    got = rows(reader().option("startingOffsets", json.dumps(starting)).load())
    assert got == [
        ("left", 0, 10, "l-10"),
        ("left", 0, 11, "l-11"),
        ("right", 0, 5, "r-5"),
        ("right", 0, 6, "r-6"),
    ]

    df = (
        spark.readStream.format("nsq")
        .option("nsqd", a.http)
        .option("topic", "left,right")
        .option("startingOffsets", json.dumps({"left": {"0": 2}, "right": {"0": -2}}))
        .load()
    )
    seen: list[tuple[str, int]] = []
    writer = df.writeStream.foreachBatch(
        lambda batch, _id: seen.extend((r.topic, r.offset) for r in batch.collect())
    )
    query = writer.option("checkpointLocation", str(tmp_path / "ck"))
    query = query.trigger(availableNow=True).start()
    assert query.awaitTermination(120) and query.exception() is None
    assert sorted(seen) == [("left", i) for i in range(2, 12)] + [("right", i) for i in range(7)]
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {"left": {f"{node(a)}/0": 12}, "right": {f"{node(a)}/0": 7}}
