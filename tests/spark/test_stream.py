"""Streaming reads: checkpointed restarts, maxOffsetsPerTrigger, AvailableNow, live publishing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsqpy.testing import DaemonProcess, wait_for

from .conftest import high_watermark, publish


def stream(spark: Any, nsqd: DaemonProcess, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("nsq").option("nsqd", nsqd.http).option("topic", topic)
    return reader.options(**options).load()


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def archived_offsets(spark: Any, path: Path) -> list[int]:
    return sorted(r.offset for r in spark.read.parquet(str(path)).select("offset").collect())


def test_restart_from_checkpoint_has_no_duplicates_and_no_gaps(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    publish(nsqd, "clicks", [b"c%d" % i for i in range(600)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(spark, nsqd, "clicks", startingOffsets="earliest", maxOffsetsPerTrigger="150")

    def start(**trigger: Any) -> Any:
        writer = df.writeStream.format("parquet").option("path", str(out))
        return writer.option("checkpointLocation", str(checkpoint)).trigger(**trigger).start()

    query = start(processingTime="100 milliseconds")
    wait_for(lambda: len(batch_sizes(query)) >= 2, timeout=90)
    query.stop()  # mid-stream: some offsets done, some not
    first_run = archived_offsets(spark, out)
    assert first_run == list(range(len(first_run))) and 300 <= len(first_run) < 600

    publish(nsqd, "clicks", [b"c%d" % i for i in range(600, 700)])
    query = start(availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert batch_sizes(query) and max(batch_sizes(query)) <= 150
    assert sum(batch_sizes(query)) == 700 - len(first_run)
    assert archived_offsets(spark, out) == list(range(700))
    bodies = spark.read.parquet(str(out)).selectExpr("offset", "cast(body as string) b").collect()
    assert all(r.b == f"c{r.offset}" for r in bodies)


def test_available_now_terminates_while_publishing_goes_on(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    publish(nsqd, "live", [b"x"] * 200)
    seen: list[int] = []

    def collect_and_publish_more(batch: Any, _id: int) -> None:
        seen.extend(r.offset for r in batch.collect())
        publish(nsqd, "live", [b"y"] * 50)  # new messages keep coming while the query runs

    df = stream(spark, nsqd, "live", startingOffsets="earliest", maxOffsetsPerTrigger="120")
    writer = df.select("offset").writeStream.foreachBatch(collect_and_publish_more)
    query = (
        writer.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(seen) == list(range(200))  # exactly what was there when it started
    assert batch_sizes(query) == [120, 80]
    assert high_watermark(nsqd, "live") == 300


def test_stream_follows_publishing_and_latest_skips_the_past(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    publish(nsqd, "ticks", [b"old"] * 50)
    seen: list[tuple[int, bytes]] = []
    sizes: list[int] = []

    def collect(batch: Any, _id: int) -> None:
        rows = batch.collect()
        sizes.append(len(rows))
        seen.extend((r.offset, bytes(r.body)) for r in rows)

    df = stream(spark, nsqd, "ticks", startingOffsets="latest", maxOffsetsPerTrigger="40")
    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
    query = writer.trigger(processingTime="50 milliseconds").start()
    try:
        wait_for(lambda: query.lastProgress is not None, timeout=60)
        for round_ in range(5):
            publish(nsqd, "ticks", [b"new-%d-%d" % (round_, i) for i in range(30)])
        wait_for(lambda: len(seen) >= 150, timeout=90)
    finally:
        query.stop()
    assert [o for o, _ in seen] == list(range(50, 200))
    assert all(body.startswith(b"new-") for _, body in seen)
    assert max(sizes) <= 40
