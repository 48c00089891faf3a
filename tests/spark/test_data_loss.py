"""failOnDataLoss: offsets that retention removed fail the read, or are skipped with a warning."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.spark.fetch import FetchSettings, read_range
from nsqpy.spark.nsqhttp import NsqdHttp
from nsqpy.spark.plan import DataLoss, OffsetRange
from nsqpy.testing import DaemonProcess, WireClient, wait_for

from .conftest import publish, start_nsqd

TOPIC = "shrinking"
COUNT = 120


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = start_nsqd(
        tmp_path_factory.mktemp("nsqd"),
        "--retention=1ms",
        "--max-bytes-per-file=2048",
        "--queue-scan-interval=10ms",
    )
    yield daemon
    daemon.kill()


def watermarks(nsqd: DaemonProcess) -> tuple[int, int]:
    with NsqdHttp(nsqd.http) as conn:
        (marks,) = conn.watermarks(TOPIC) or []
    return marks.low, marks.high


@pytest.fixture(scope="module")
def low(nsqd: DaemonProcess) -> int:
    """Publish, let a channel finish everything, wait until retention deletes segments."""
    publish(nsqd, TOPIC, [b"%03d" % i + b"." * 100 for i in range(COUNT)], chunk=10)
    consumer = WireClient(nsqd.tcp_port)
    consumer.send(b"  V2")
    consumer.send(f"SUB {TOPIC} done\nRDY {COUNT}\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    for _ in range(COUNT):
        frame_type, data = consumer.read_frame()
        assert frame_type == 2
        consumer.send(b"FIN " + data[10:26] + b"\n")
    consumer.close()
    found = wait_for(lambda: watermarks(nsqd)[0], timeout=30)
    assert isinstance(found, int) and 0 < found < COUNT
    return found


def read(spark: Any, nsqd: DaemonProcess, **options: str) -> Any:
    reader = spark.read.format("nsq").option("nsqd", nsqd.http).option("topic", TOPIC)
    return reader.option("startingOffsets", json.dumps({TOPIC: {"0": 0}})).options(**options).load()


def test_batch_fails_on_data_loss_by_default(spark: Any, nsqd: DaemonProcess, low: int) -> None:
    with pytest.raises(Exception, match=rf"offsets 0\.\.{low - 1} were removed by retention"):
        read(spark, nsqd).collect()


def test_batch_skips_lost_offsets_when_told(spark: Any, nsqd: DaemonProcess, low: int) -> None:
    rows = read(spark, nsqd, failOnDataLoss="false").select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(low, COUNT))


def test_stream_fails_or_skips(spark: Any, nsqd: DaemonProcess, low: int, tmp_path: Path) -> None:
    def run(fail: str, checkpoint: Path) -> tuple[list[int], Any]:
        seen: list[int] = []
        df = spark.readStream.format("nsq").option("nsqd", nsqd.http).option("topic", TOPIC)
        df = df.option("startingOffsets", json.dumps({TOPIC: {"0": 0}})).option(
            "failOnDataLoss", fail
        )
        writer = df.load().writeStream.foreachBatch(
            lambda b, _i: seen.extend(r.offset for r in b.select("offset").collect())
        )
        query = (
            writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        try:
            query.awaitTermination(120)
        except Exception as exc:  # the query's failure, raised again by awaitTermination
            return seen, exc
        return seen, query.exception()

    seen, error = run("false", tmp_path / "skip")
    assert error is None and sorted(seen) == list(range(low, COUNT))
    seen, error = run("true", tmp_path / "fail")
    assert seen == [] and "failOnDataLoss=false" in str(error)


def test_fetch_warns_when_skipping(
    nsqd: DaemonProcess, low: int, caplog: pytest.LogCaptureFixture
) -> None:
    lost = OffsetRange(TOPIC, 0, nsqd.http, 0, COUNT)
    with caplog.at_level(logging.WARNING, logger="nsqpy.spark"):
        batches = list(read_range(lost, FetchSettings(fail_on_data_loss=False, max_count=7)))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(low, COUNT))
    assert max(b.num_rows for b in batches) <= 7
    assert [r.getMessage() for r in caplog.records] == [
        f"{TOPIC}/0 on {nsqd.http}: offsets 0..{low - 1} were removed by retention; "
        "skipped (failOnDataLoss=false)"
    ]
    with pytest.raises(DataLoss, match="set failOnDataLoss=false"):
        list(read_range(lost, FetchSettings()))
    past_end = OffsetRange(TOPIC, 0, nsqd.http, COUNT - 2, COUNT + 5)
    with pytest.raises(DataLoss, match=rf"offsets {COUNT}\.\.{COUNT + 4} are past the log's end"):
        list(read_range(past_end, FetchSettings()))
