"""``nsqpy pipeline``: archive, replay and transform, in-process through
``nsqpy.spark.cli.main`` on the module's session; ``start_archive`` runs the real command
as a subprocess of its own process group, for the tests that kill it.

The archive's exactly-once across the kill of its whole process group (Python driver, JVM,
Python workers) in the middle of the stream is shown on a cluster whose leader is killed
too: with Spark's file sink in ``test_cluster.py`` (local mode), with the default writer
in ``test_standalone.py`` (a standalone Spark cluster).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import DateType

from nsqpy.errors import ConfigError
from nsqpy.protocol.extend import encode_pub_ext, encode_pub_trace
from nsqpy.spark import pipelines as pl
from nsqpy.spark.cli import main
from nsqpy.testing import DaemonProcess, WireClient, http_request
from nsqpy.testing.spark import java_tool_options

from .conftest import log_contents, publish

NSQPY = str(Path(sys.executable).with_name("nsqpy"))


def commits(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.is_dir() else 0


def committed_offsets(checkpoint: Path, topic: str) -> dict[str, int]:
    """The source's end offsets (next offset per partition) of the streaming query's last
    committed micro-batch: Spark's checkpoint has them in ``offsets/N`` (its last line),
    N the highest batch in ``commits/``; {} before the first commit."""
    folder = checkpoint / "commits"
    done = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    if not done:
        return {}
    last = (checkpoint / "offsets" / str(max(done))).read_text().splitlines()[-1]
    found: dict[str, int] = json.loads(last)[topic]
    return found


def archive_args(
    nsqd: DaemonProcess, out: Path, checkpoint: Path, *extra: str, topic: str = "audit"
) -> list[str]:
    return [
        "pipeline",
        "archive",
        f"--nsqd={nsqd.http}",
        f"--topic={topic}",
        f"--output={out}",
        f"--checkpoint={checkpoint}",
        "--master=local[2]",
        "--quiet",
        "--conf=spark.ui.enabled=false",
        "--conf=spark.sql.shuffle.partitions=2",
        "--conf=spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        *extra,
    ]


def start_archive(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``nsqpy <args>`` in a process group of its own, its output appended to ``log``, its
    JVM's temporary files beside ``log`` (a killed JVM leaves them)."""
    env = {**os.environ, "JAVA_TOOL_OPTIONS": java_tool_options(log.parent / "jvm-tmp")}
    with log.open("ab") as sink:
        return subprocess.Popen(
            [NSQPY, *args], stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


def test_replay_publishes_parquet_rows_in_publish_order(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    rows = [
        (dt.datetime(2024, 1, 1, 0, 0, i // 10, tzinfo=dt.UTC), 0, i, b"r%02d" % i)
        for i in range(40)
    ]
    df = spark.createDataFrame(rows, "timestamp timestamp, partition int, offset long, body binary")
    source = tmp_path / "parquet"
    df.repartition(4).write.parquet(str(source))  # rows spread over files in no order

    assert main(["replay", f"--nsqd={nsqd.http}", f"--input={source}", "--topic=replayed"]) == 0
    assert [b for _, b, _ in log_contents(nsqd, "replayed")] == [r[3] for r in rows]

    args = [
        "replay",
        f"--nsqd={nsqd.http}",
        f"--input={source}",
        "--topic=some",
        "--where=offset < 5",
    ]
    assert main(args) == 0
    assert [b for _, b, _ in log_contents(nsqd, "some")] == [b"r00", b"r01", b"r02", b"r03", b"r04"]


def test_transform_streams_a_topic_through_sql_into_another(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    publish(nsqd, "raw", [b"word%d" % i for i in range(10)])
    args = [
        "transform",
        f"--nsqd={nsqd.http}",
        "--topic=raw",
        "--to-topic=cooked",
        "--select=upper(cast(body AS string)) AS body",
        "--where=offset % 2 = 0",
        f"--checkpoint={tmp_path / 'ck'}",
        "--once",
    ]
    assert main(args) == 0
    assert sorted(b for _, b, _ in log_contents(nsqd, "cooked")) == [
        b"WORD%d" % i for i in (0, 2, 4, 6, 8)
    ]
    publish(nsqd, "raw", [b"word10", b"word11", b"word12"])
    assert main(args) == 0  # the checkpoint goes on where the last run stopped
    got = sorted(b for _, b, _ in log_contents(nsqd, "cooked"))
    assert got == sorted(b"WORD%d" % i for i in (0, 2, 4, 6, 8, 10, 12))


def test_pipeline_errors_are_reported(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = archive_args(nsqd, tmp_path / "o", tmp_path / "c", "--starting-offsets={oops", "--once")
    assert main(args[1:]) == 1
    assert "startingOffsets must be earliest, latest or JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["archive", "--topic=t"])
    assert exit_info.value.code == 2


def test_spark_written_archive_renames_its_checkpoint_through_the_file_system_and_writes_unsorted(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    """A local checkpoint gets the FileSystem-based manager (no readlink/chmod process per
    rename) and the archive through Spark's file sink concurrent date writers (no sort);
    the session keeps its own settings, and a manager the user chose is left alone."""
    publish(nsqd, "settings", [b"x%d" % i for i in range(50)])
    user_choice = "spark.sql.maxConcurrentOutputFileWriters"
    spark.conf.set(user_choice, "1")
    try:
        settings = pl.StreamSettings(checkpoint=str(tmp_path / "ck"), once=True)
        query = pl.archive(
            spark, pl.Endpoint(nsqd=nsqd.http), "settings", str(tmp_path / "o"), settings, "spark"
        )
        query.awaitTermination()
        assert query.exception() is None
        assert (tmp_path / "o" / "_spark_metadata").is_dir()  # Spark's file sink wrote it
        stream = query._jsq.streamingQuery()
        for log in (stream.offsetLog(), stream.commitLog()):
            assert log.fileManager().getClass().getName() in pl.FS_CHECKPOINT_MANAGERS
        own = stream.sparkSessionForStream().conf()
        assert own.get(user_choice) == str(pl.ARCHIVE_OPEN_FILES)
        assert spark.conf.get(user_choice) == "1"  # restored
        assert spark.conf.get(pl.CHECKPOINT_MANAGER, None) is None
        assert spark.read.parquet(str(tmp_path / "o")).count() == 50

        chosen = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        spark.conf.set(pl.CHECKPOINT_MANAGER, chosen)
        settings = pl.StreamSettings(checkpoint=str(tmp_path / "ck2"), once=True)
        query = pl.archive(
            spark, pl.Endpoint(nsqd=nsqd.http), "settings", str(tmp_path / "o2"), settings
        )
        query.awaitTermination()
        assert query._jsq.streamingQuery().offsetLog().fileManager().getClass().getName() == chosen
    finally:
        spark.conf.unset(user_choice)
        spark.conf.unset(pl.CHECKPOINT_MANAGER)


def test_only_local_checkpoints_get_the_file_system_manager(spark: Any) -> None:
    assert pl._local_path(spark, "/tmp/ck") and pl._local_path(spark, "file:///tmp/ck")
    assert not pl._local_path(spark, "hdfs://namenode:8020/ck")
    assert not pl._local_path(spark, "s3a://bucket/ck")


def test_archive_written_by_its_tasks_reads_back_like_the_topic(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default (arrow) archive: every column as the ``nsq`` source reads it, Spark's
    types, UTC date directories, nothing staged left over, and progress in messages."""
    status, _, _ = http_request("POST", f"{nsqd.http}/topic/create?topic=kept&partition_num=2")
    assert status == 200
    wire = WireClient(nsqd.tcp_port)
    wire.send(b"  V2")
    wire.send(encode_pub_ext("kept", {"app": "shop"}, b"with headers", partition=0))
    wire.send(encode_pub_trace("kept", 0xABC, b"traced", partition=1))
    assert [wire.read_frame()[0] for _ in range(2)] == [0, 0]
    publish(nsqd, "kept", [b"plain-%d" % i for i in range(300)])
    out, checkpoint = tmp_path / "archive", tmp_path / "ck"
    args = ["archive", f"--nsqd={nsqd.http}", "--topic=kept", f"--output={out}"]
    assert main([*args, f"--checkpoint={checkpoint}", "--once"]) == 0
    assert "batch 0: 302 rows" in capsys.readouterr().err

    archived = spark.read.parquet(str(out))
    source = spark.read.format("nsq").option("nsqd", nsqd.http).option("topic", "kept").load()
    assert [(f.name, f.dataType) for f in archived.schema.fields] == [
        *((f.name, f.dataType) for f in source.schema.fields),
        ("date", DateType()),
    ]
    today = dt.datetime.now(dt.UTC).date()
    assert {r.date for r in archived.select("date").collect()} <= {today, today - dt.timedelta(1)}
    key = ["partition", "offset"]
    assert archived.drop("date").sort(key).collect() == source.sort(key).collect()
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert list((out / "_staging").rglob("*")) == [out / "_staging" / query_id]  # emptied
    assert [p.name for p in (out / "_manifests" / query_id).iterdir()] == ["0.json"]
    assert not (out / "_spark_metadata").exists()


def test_the_archive_writer_follows_the_output(spark: Any, tmp_path: Path) -> None:
    """Local outputs get the arrow writer, Hadoop ones Spark's; an output keeps the
    writer it was started with, since Spark reads only ``_spark_metadata``'s files."""
    assert pl.archive_writer(spark, str(tmp_path / "new")) == "arrow"
    assert pl.archive_writer(spark, f"file://{tmp_path}/new") == "arrow"
    assert pl.archive_writer(spark, "hdfs://namenode:8020/archive") == "spark"
    assert pl.archive_writer(spark, str(tmp_path / "new"), "spark") == "spark"
    (tmp_path / "by-spark" / "_spark_metadata").mkdir(parents=True)
    assert pl.archive_writer(spark, str(tmp_path / "by-spark")) == "spark"
    with pytest.raises(ConfigError, match=r"written by the spark writer.*--writer spark"):
        pl.archive_writer(spark, str(tmp_path / "by-spark"), "arrow")
    (tmp_path / "by-arrow" / "_manifests").mkdir(parents=True)
    assert pl.archive_writer(spark, str(tmp_path / "by-arrow")) == "arrow"
    with pytest.raises(ConfigError, match="written by the arrow writer"):
        pl.archive_writer(spark, str(tmp_path / "by-arrow"), "spark")
    with pytest.raises(ConfigError, match="must be one of auto, arrow, spark"):
        pl.archive_writer(spark, str(tmp_path), "parquet")
