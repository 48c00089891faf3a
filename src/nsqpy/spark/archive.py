"""The archive pipeline's stream: tasks write Parquet themselves, the driver publishes it.

Owns ``NsqArchiveSource`` (``format("nsq_archive")``, option ``path``: the output as
``nsqpy.spark.parquetfiles.location`` gives it): the ``nsq`` stream with the same
offsets, options and checkpoint, but each task writes its offset range straight to
Parquet with pyarrow (``parquetfiles.write_dated``) and hands Spark one row per file
written (``FILES_SCHEMA``) instead of one row per message, so the messages never go
through Spark's Arrow-to-row conversion and row-based Parquet writer. ``PublishFiles``
is the query's ``foreachBatch`` function: it runs the micro-batch (collecting the file
rows) and publishes the files on the driver (``parquetfiles.publish``), exactly once per
micro-batch given Spark's offset log. Imports pyspark, pyarrow and ``nsqpy.spark``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from nsqpy.errors import ConfigError
from nsqpy.spark.options import SourceOptions, source_options
from nsqpy.spark.source import NsqDataSource, NsqStreamReader, read_partition

FILES_SCHEMA = StructType(
    [
        StructField("path", StringType()),
        StructField("date", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("first_offset", LongType()),
        StructField("last_offset", LongType()),
        StructField("rows", LongType()),
        StructField("bytes", LongType()),
    ]
)
# Spark's local properties naming the query and micro-batch a task or foreachBatch runs for
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


class NsqArchiveSource(NsqDataSource):
    """The ``nsq`` stream, written to Parquet by its own tasks (the archive pipeline's source)."""

    @classmethod
    def name(cls) -> str:
        return "nsq_archive"

    def schema(self) -> StructType:
        return FILES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        raise ConfigError("nsq_archive is the archive pipeline's stream; read topics with nsq")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        path = next((v for k, v in self.options.items() if k.lower() == "path"), None)
        if not path:
            raise ConfigError("nsq_archive needs option path (the archive's output)")
        return NsqArchiveReader(source_options(self.options, streaming=True), path)


class NsqArchiveReader(NsqStreamReader):
    """Plans like the ``nsq`` stream; each task writes its range under the output's staging."""

    def __init__(self, opts: SourceOptions, path: str) -> None:
        super().__init__(opts)
        self.path = path

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        from nsqpy.spark.parquetfiles import Target, staging_dir, write_dated

        ctx = TaskContext.get()
        query = (ctx.getLocalProperty(QUERY_ID) if ctx else None) or "unknown"
        batch = (ctx.getLocalProperty(BATCH_ID) if ctx else None) or "0"
        files = write_dated(
            read_partition(partition, self.opts), Target.of(self.path), staging_dir(query, batch)
        )
        return iter([f.row() for f in files])


class PublishFiles:
    """``foreachBatch``: run the micro-batch, then move its files into ``date=`` directories."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from nsqpy.spark.parquetfiles import StagedFile, Target, publish

        files = [StagedFile(*row) for row in df.collect()]
        query = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID)
        if not query:
            raise RuntimeError("foreachBatch ran without Spark naming its streaming query")
        publish(Target.of(self.path), query, batch_id, files)
