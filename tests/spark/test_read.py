"""Batch reads through Spark: ranges, timestamps, splits, schema, bad options."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nsqpy.testing import DaemonProcess, http_get, lookupd_process, wait_for

from .conftest import log_contents, publish, start_nsqd


def read(spark: Any, nsqd: DaemonProcess, topic: str, **options: str) -> Any:
    reader = spark.read.format("nsq").option("nsqd", f"127.0.0.1:{nsqd.http_port}")
    return reader.option("topic", topic).options(**options).load()


def test_batch_read_equals_what_was_published(spark: Any, nsqd: DaemonProcess) -> None:
    bodies = [b"message-%04d" % i for i in range(500)]
    publish(nsqd, "orders", bodies)
    df = read(spark, nsqd, "orders")
    assert df.schema.simpleString() == (
        "struct<topic:string,partition:int,offset:bigint,timestamp:timestamp,id:string,"
        "body:binary,trace_id:string,headers:map<string,string>>"
    )
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(500))
    assert [bytes(r.body) for r in rows] == bodies
    assert [r.id for r in rows] == [f"{i:016x}" for i in range(500)]
    assert {(r.topic, r.partition, r.trace_id, r.headers) for r in rows} == {
        ("orders", 0, None, None)
    }
    now = time.time()
    assert all(now - 120 < r.timestamp.timestamp() <= now + 1 for r in rows)


def test_offset_ranges_and_min_partitions(spark: Any, nsqd: DaemonProcess) -> None:
    publish(nsqd, "ranges", [b"%d" % i for i in range(100)])
    df = read(
        spark,
        nsqd,
        "ranges",
        startingOffsets=json.dumps({"ranges": {"0": 10}}),
        endingOffsets=json.dumps({"ranges": {"0": 60}}),
        minPartitions="4",
    )
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(10, 60))
    latest = read(spark, nsqd, "ranges", startingOffsets="latest")
    assert latest.count() == 0
    beyond = read(spark, nsqd, "ranges", endingOffsets=json.dumps({"ranges": {"0": 10_000}}))
    assert beyond.count() == 100  # an end past the high watermark reads to it


def test_starting_timestamp(spark: Any, nsqd: DaemonProcess) -> None:
    publish(nsqd, "stamped", [b"early-%d" % i for i in range(5)])
    time.sleep(0.01)  # publish times are per call; make the two calls 10 ms apart
    cut_ms = time.time_ns() // 1_000_000
    time.sleep(0.01)
    publish(nsqd, "stamped", [b"late-%d" % i for i in range(3)])
    df = read(spark, nsqd, "stamped", startingTimestamp=str(cut_ms))
    rows = df.orderBy("offset").collect()
    assert [(r.offset, bytes(r.body)) for r in rows] == [
        (5, b"late-0"),
        (6, b"late-1"),
        (7, b"late-2"),
    ]


def test_sql_over_the_source(spark: Any, nsqd: DaemonProcess) -> None:
    publish(nsqd, "words", [b"a", b"bb", b"a", b"ccc", b"a"])
    read(spark, nsqd, "words").createOrReplaceTempView("words")
    counts = spark.sql(
        "SELECT cast(body AS string) AS word, count(*) AS n FROM words GROUP BY 1 ORDER BY 1"
    ).collect()
    assert [(r.word, r.n) for r in counts] == [("a", 3), ("bb", 1), ("ccc", 1)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "nosuchtopic"}, "topic nosuchtopic not found"),
        ({"topic": "orders", "startingOffsets": "{bad"}, "startingOffsets must be earliest"),
        ({"topic": "orders", "maxOffsetsPerTrigger": "5"}, "for streaming reads only"),
        ({"topic": "orders", "startingOffsets": '{"other": {"0": 1}}'}, "not being read"),
        ({"topic": "bad name!"}, "not a valid topic name"),
    ],
)
def test_bad_options_fail_with_a_clear_message(
    spark: Any, nsqd: DaemonProcess, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("nsq").option("nsqd", f"127.0.0.1:{nsqd.http_port}")
    with pytest.raises(Exception, match=message):
        reader.options(**options).load().collect()


@pytest.fixture(scope="module")
def lookupd_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """An nsqlookupd and an nsqd registered with it."""
    lookupd = lookupd_process().start()
    try:
        daemon = start_nsqd(
            tmp_path_factory.mktemp("nsqd"), f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
        )
        yield lookupd, daemon
        daemon.kill()
    finally:
        lookupd.kill()


def test_reads_and_writes_through_lookupd(
    spark: Any, lookupd_stack: tuple[DaemonProcess, DaemonProcess]
) -> None:
    lookupd, daemon = lookupd_stack
    publish(daemon, "found", [b"one", b"two"])
    wait_for(lambda: http_get(f"{lookupd.http}/lookup?topic=found")[0] == 200)
    df = spark.read.format("nsq").option("lookupd", lookupd.http).option("topic", "found").load()
    assert [bytes(r.body) for r in df.orderBy("offset").collect()] == [b"one", b"two"]
    df.select("body").write.format("nsq").option("lookupd", lookupd.http).option(
        "topic", "copied"
    ).mode("append").save()
    assert sorted(b for _, b, _ in log_contents(daemon, "copied")) == [b"one", b"two"]
    with pytest.raises(Exception, match="topic nowhere not found on any nsqd known to"):
        spark.read.format("nsq").option("lookupd", lookupd.http).option(
            "topic", "nowhere"
        ).load().collect()
