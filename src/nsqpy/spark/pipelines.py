"""The ready-made pipelines: archive a topic to Parquet, replay Parquet, transform a topic.

Owns the Spark jobs behind ``nsqpy pipeline``: ``archive`` (a stream from the topic into
Parquet partitioned by UTC ``date``, exactly-once through the checkpoint and either the
archive's own manifests, when its tasks write the files with pyarrow, or Spark's file
sink log), ``replay`` (a batch from Parquet into a topic, in publish order unless told
otherwise) and ``transform`` (a stream from a topic through Spark SQL expressions into
another topic, at-least-once). Each takes a SparkSession with ``nsq`` registered and
plain arguments; ``run_stream`` drives a streaming query and prints its progress.
Imports pyspark and ``nsqpy.spark``; argument parsing lives in ``nsqpy.spark.cli``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from nsqpy.errors import ConfigError
from nsqpy.spark.options import source_options

ORDER_COLUMNS = ("timestamp", "partition", "offset")
WRITERS = ("auto", "arrow", "spark")
# the name of the archive's observed metrics: messages and files of each micro-batch
ARCHIVE_METRICS = "archive"
# the UTC date of the ``timestamp`` column (86,400,000,000 microseconds a day)
UTC_DATE = "date_from_unix_date(CAST(floor(unix_micros(timestamp) / 86400000000) AS INT))"


@dataclass
class Endpoint:
    """Where the topics are: nsqd or nsqlookupd HTTP addresses (comma-separated)."""

    nsqd: str = ""
    lookupd: str = ""
    ssl: dict[str, str] = field(default_factory=dict)  # nsq.ssl.* options, HTTPS to nsqd

    def options(self) -> dict[str, str]:
        where = {"nsqd": self.nsqd} if self.nsqd else {"lookupd": self.lookupd}
        return {**where, **self.ssl}


@dataclass
class StreamSettings:
    """How a streaming pipeline reads and triggers."""

    checkpoint: str
    once: bool = False
    trigger: str = "5 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    extra: dict[str, str] = field(default_factory=dict)


def stream_options(endpoint: Endpoint, topic: str, s: StreamSettings) -> dict[str, str]:
    """The source options of a streaming pipeline, checked here so mistakes fail early."""
    options = {**endpoint.options(), "topic": topic, "startingOffsets": s.starting_offsets}
    options["failOnDataLoss"] = str(s.fail_on_data_loss).lower()
    if s.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(s.max_offsets_per_trigger)
    options.update(s.extra)
    source_options(options, streaming=True)  # ConfigError naming the bad option
    return options


def read_stream(
    spark: SparkSession,
    endpoint: Endpoint,
    topic: str,
    s: StreamSettings,
    fmt: str = "nsq",
    **more: str,
) -> DataFrame:
    """The source (``fmt``, with ``more`` options); each micro-batch is split into as many
    tasks as Spark has cores (``minPartitions``, unless given) so a topic of one
    partition keeps every core busy."""
    options = stream_options(endpoint, topic, s)
    if not any(key.lower() == "minpartitions" for key in options):
        options["minPartitions"] = str(max(1, spark.sparkContext.defaultParallelism))
    return spark.readStream.format(fmt).options(**options, **more).load()


# The checkpoint file manager that renames with FileSystem.rename (its package moved
# in Spark 4.1). Spark's default goes through FileContext, whose local implementation
# starts a `readlink` process for each path it checks around a rename (Hadoop's shell
# fallback without its native library): 8 at a query's start and 5 at each micro-batch's
# commit, measured with strace. On a local disk a rename is atomic either way.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FS_CHECKPOINT_MANAGERS = tuple(
    f"org.apache.spark.sql.execution.streaming.{pkg}FileSystemBasedCheckpointFileManager"
    for pkg in ("checkpointing.", "")
)
# Parquet files a task may keep open at once (one per date) instead of sorting its rows
# by date first; a micro-batch spanning more dates than this falls back to the sort.
ARCHIVE_OPEN_FILES = 2


def _trigger(writer: DataStreamWriter, s: StreamSettings) -> DataStreamWriter:
    if s.once:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=s.trigger)


def _local_path(spark: SparkSession, path: str) -> bool:
    """True when ``path`` is on the local file system (``file:``, or no scheme while
    Hadoop's default file system is the local one)."""
    scheme = urlparse(path).scheme
    if scheme:
        return scheme == "file"
    try:
        default = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS")  # type: ignore[union-attr]
    except Exception:  # no JVM conf to ask (Spark Connect): assume the remote default
        return False
    return not default or str(default).startswith("file:")


def _fs_checkpoint_manager(spark: SparkSession) -> str | None:
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return None
    for name in FS_CHECKPOINT_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:  # not in this Spark version
            continue
        return name
    return None


@contextmanager
def _query_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in the session while a query starts (it keeps its own copy of the
    session's settings from ``start()``), then the session's own values back."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _start(
    spark: SparkSession, writer: DataStreamWriter, s: StreamSettings, **settings: str
) -> StreamingQuery:
    """Start the query with ``settings`` and, when the checkpoint is on a local disk and
    the user chose no manager, the FileSystem-based checkpoint file manager."""
    if spark.conf.get(CHECKPOINT_MANAGER, None) is None and _local_path(spark, s.checkpoint):
        manager = _fs_checkpoint_manager(spark)
        if manager:
            settings[CHECKPOINT_MANAGER] = manager
    with _query_settings(spark, settings):
        return _trigger(writer, s).start()


def archive_writer(spark: SparkSession, output: str, writer: str = "auto") -> str:
    """``arrow`` or ``spark``: who writes the archive's Parquet. ``auto`` is ``arrow`` for
    an output on the local file system and ``spark`` elsewhere (HDFS, S3 through Hadoop),
    and keeps to the writer a local output was started with: Spark's reader reads only the
    files listed in ``_spark_metadata`` when that log is there, so the two cannot mix."""
    if writer not in WRITERS:
        raise ConfigError(f"archive writer must be one of {', '.join(WRITERS)}, got {writer!r}")
    local = _local_path(spark, output)
    marks = {"spark": False, "arrow": False}
    if local:
        from nsqpy.spark.parquetfiles import MANIFESTS, location

        root = location(output)
        marks = {
            "spark": os.path.isdir(os.path.join(root, "_spark_metadata")),
            "arrow": os.path.isdir(os.path.join(root, MANIFESTS)),
        }
    if writer == "auto":
        return "arrow" if local and not marks["spark"] else "spark"
    other = "arrow" if writer == "spark" else "spark"
    if marks[other]:
        raise ConfigError(
            f"{output} holds an archive written by the {other} writer; "
            f"Spark would not read both together, so archive there with --writer {other}"
        )
    return writer


def archive(
    spark: SparkSession,
    endpoint: Endpoint,
    topic: str,
    output: str,
    s: StreamSettings,
    writer: str = "auto",
) -> StreamingQuery:
    """Start the archive stream: every message once in ``output``/date=YYYY-MM-DD/*.parquet.

    ``date`` is the UTC date of the publish time. With the ``arrow`` writer (the default
    for a local output) the source's tasks write the files with pyarrow and the query's
    foreachBatch publishes them (``nsqpy.spark.archive``); the messages never become
    Spark rows, which is what made the archive slower than Spark writing Parquet from
    memory. Spark's progress counts files there, so the messages of each micro-batch are
    in its observed metrics (``ARCHIVE_METRICS``). With the ``spark`` writer, Spark's
    Parquet file sink writes them and its ``_spark_metadata`` log makes them exactly-once.
    """
    if archive_writer(spark, output, writer) == "spark":
        return _archive_with_spark(spark, endpoint, topic, output, s)
    from nsqpy.spark.archive import NsqArchiveSource, PublishFiles
    from nsqpy.spark.parquetfiles import location

    path = location(output)
    spark.dataSource.register(NsqArchiveSource)
    df = read_stream(spark, endpoint, topic, s, "nsq_archive", path=path)
    df = df.observe(
        ARCHIVE_METRICS, F.sum("rows").alias("messages"), F.count(F.lit(1)).alias("files")
    )
    query = (
        df.writeStream.foreachBatch(PublishFiles(path))
        .option("checkpointLocation", s.checkpoint)
        .queryName(f"archive_{topic}")
    )
    return _start(spark, query, s)


def _archive_with_spark(
    spark: SparkSession, endpoint: Endpoint, topic: str, output: str, s: StreamSettings
) -> StreamingQuery:
    """The archive through Spark's Parquet file sink. ``date`` is worked out from the
    microseconds since the epoch: UTC whatever the session's time zone, and about twice
    as fast as ``to_date`` with its time-zone rules."""
    df = read_stream(spark, endpoint, topic, s)
    df = df.withColumn("date", F.expr(UTC_DATE))
    writer = (
        df.writeStream.format("parquet")
        .partitionBy("date")
        .option("path", output)
        .option("checkpointLocation", s.checkpoint)
        .queryName(f"archive_{topic}")
    )
    # a micro-batch's rows are written without a sort when they span few dates (usually one)
    return _start(
        spark, writer, s, **{"spark.sql.maxConcurrentOutputFileWriters": _open_files(spark)}
    )


def _open_files(spark: SparkSession) -> str:
    """``ARCHIVE_OPEN_FILES``, unless the session asks for more concurrent writers."""
    mine = spark.conf.get("spark.sql.maxConcurrentOutputFileWriters", "0") or "0"
    return str(max(ARCHIVE_OPEN_FILES, int(mine)))


def transform(
    spark: SparkSession,
    endpoint: Endpoint,
    topic: str,
    target: Endpoint,
    to_topic: str,
    selects: Sequence[str],
    where: str | None,
    s: StreamSettings,
) -> StreamingQuery:
    """Start the transform stream: ``SELECT selects FROM topic WHERE where`` into ``to_topic``."""
    df = read_stream(spark, endpoint, topic, s)
    if where:
        df = df.where(where)
    df = df.selectExpr(*selects)
    writer = (
        df.writeStream.format("nsq")
        .options(**target.options())
        .option("topic", to_topic)
        .option("checkpointLocation", s.checkpoint)
        .queryName(f"transform_{topic}_to_{to_topic}")
    )
    return _start(spark, writer, s)


def replay(
    spark: SparkSession,
    source: str,
    endpoint: Endpoint,
    topic: str,
    where: str | None = None,
    ordered: bool = True,
) -> int:
    """Publish the ``body`` of every Parquet row under ``source`` to ``topic``; returns rows."""
    df = spark.read.parquet(source)
    if where:
        df = df.where(where)
    order = [c for c in ORDER_COLUMNS if c in df.columns]
    if ordered and order:
        df = df.repartition(1).sortWithinPartitions(*order)
    total = df.count()
    writer = df.select("body").write.format("nsq").options(**endpoint.options())
    writer.option("topic", topic).mode("append").save()
    return int(total)


class StopFlag:
    """Set by SIGINT/SIGTERM while a stream runs, so it stops between two polls."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, frame: FrameType | None) -> None:
            self.event.set()

        for sig in old:
            signal.signal(sig, handler)

        def restore() -> None:
            for sig, h in old.items():
                signal.signal(sig, h)

        return restore


def progress_messages(progress: Any) -> int:
    """The messages a micro-batch read: the archive's observed count when it has one
    (its source's rows are files), else Spark's input rows."""
    metrics = (progress.get("observedMetrics") or {}).get(ARCHIVE_METRICS)
    if metrics is not None and metrics["messages"] is not None:
        return int(metrics["messages"])
    return int(progress.get("numInputRows", 0) or 0)


def progress_line(progress: Any) -> str:
    """One line per micro-batch: batch id, messages, their rate and the end offsets."""
    sources = progress.get("sources") or [{}]
    end = sources[0].get("endOffset")
    if isinstance(end, str):  # Spark hands the source's offset over as its JSON text
        try:
            end = json.loads(end)
        except ValueError:
            pass
    messages = progress_messages(progress)
    seconds = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    rate = messages / seconds if seconds > 0 else progress.get("processedRowsPerSecond", 0.0)
    return (
        f"batch {progress.get('batchId')}: {messages} rows, {rate:.0f} rows/s, "
        f"offsets {json.dumps(end, separators=(',', ':'))}"
    )


def run_stream(query: StreamingQuery, out: TextIO | None = None, poll: int = 1) -> None:
    """Wait for ``query`` (until it ends, or a signal stops it), printing each batch's
    progress (to stderr unless ``out``)."""
    out = out or sys.stderr
    stop = StopFlag()
    restore = stop.install()
    shown = -1
    try:
        while True:
            finished = query.awaitTermination(poll)
            for progress in query.recentProgress:
                if progress.get("batchId", -1) > shown and progress.get("numInputRows", 0) >= 0:
                    shown = progress["batchId"]
                    print(progress_line(progress), file=out, flush=True)
            if finished:
                break
            if stop.event.is_set():
                print("stopping the query…", file=out, flush=True)
                query.stop()
                break
    finally:
        restore()
    error = query.exception()
    if error is not None:
        raise error
