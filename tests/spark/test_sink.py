"""The nsq sink: DataFrames written to topics land there in full and can be consumed back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsqpy.testing import DaemonProcess, consume

from .conftest import log_contents, publish


def writer(df: Any, nsqd: DaemonProcess, **options: str) -> Any:
    return df.write.format("nsq").option("nsqd", nsqd.http).options(**options).mode("append")


def test_a_dataframe_written_to_a_topic_is_consumed_back_in_full(
    spark: Any, nsqd: DaemonProcess
) -> None:
    rows = [(b"row-%05d" % i,) for i in range(3000)]
    df = spark.createDataFrame(rows, "body binary").repartition(3)
    writer(df, nsqd, topic="sunk", mpubMaxBytes="4096").save()
    got = consume(nsqd.tcp_port, "sunk", "check", 3000, rdy=1000)  # a new channel: all of it
    assert sorted(got) == [r[0] for r in rows]
    assert [o for o, _, _ in log_contents(nsqd, "sunk")] == list(range(3000))  # nothing else


def test_string_bodies_topic_column_and_deferred_rows(spark: Any, nsqd: DaemonProcess) -> None:
    df = spark.createDataFrame(
        [("a1", "to-a", None), ("b1", "to-b", None), ("a2", None, None), ("late", "to-b", 60_000)],
        "body string, topic string, defer_ms long",
    ).coalesce(1)
    writer(df, nsqd, topic="to-a").save()
    assert [(b, d > 0) for _, b, d in log_contents(nsqd, "to-a")] == [
        (b"a1", False),
        (b"a2", False),
    ]
    assert sorted((b, d > 0) for _, b, d in log_contents(nsqd, "to-b")) == [
        (b"b1", False),
        (b"late", True),
    ]


@pytest.mark.parametrize(
    ("schema", "rows", "options", "message"),
    [
        ("text string", [("x",)], {"topic": "t"}, "needs a column named body"),
        ("body string", [("x",)], {}, "needs option topic or a column named topic"),
        ("body int", [(1,)], {"topic": "t"}, "body must be binary or string"),
        ("body string", [("",)], {"topic": "t"}, "empty or null body"),
        ("body string, topic string", [("x", "bad topic!")], {}, "no valid topic"),
    ],
)
def test_unpublishable_rows_fail_clearly(
    spark: Any,
    nsqd: DaemonProcess,
    schema: str,
    rows: list[tuple[Any, ...]],
    options: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(Exception, match=message):
        writer(spark.createDataFrame(rows, schema), nsqd, **options).save()


def test_streaming_sink_copies_one_topic_into_another(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    publish(nsqd, "upstream", [b"u-%d" % i for i in range(400)])
    df = spark.readStream.format("nsq").option("nsqd", nsqd.http).option("topic", "upstream")
    df = df.option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150").load()
    out = df.selectExpr("concat(body, '!') AS body").writeStream.format("nsq")
    out = out.option("nsqd", nsqd.http).option("topic", "downstream")
    query = (
        out.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = [b for _, b, _ in log_contents(nsqd, "downstream")]
    assert sorted(got) == sorted(b"u-%d!" % i for i in range(400))
