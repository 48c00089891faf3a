"""The ``nsq`` PySpark data source: batch and streaming reads of topics by offset range.

Owns ``NsqDataSource`` (register it with ``spark.dataSource.register(NsqDataSource)``,
then ``spark.read.format("nsq")``/``readStream``/``write``/``writeStream``), its output
schema, and the readers: ``NsqBatchReader`` plans [startingOffsets, endingOffsets) once;
``NsqStreamReader`` keeps ``{topic: {"node/partition": offset}}`` dicts as its offsets in
Spark's checkpoint, so a restarted query goes on exactly where its last committed batch
ended; it bounds micro-batches with ``maxOffsetsPerTrigger`` (ReadMaxRows) and supports
Trigger.AvailableNow. Reads come back as Arrow record batches. The writers live in
``nsqpy.spark.sink``. This package is the only one importing pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from nsqpy.spark.options import SourceOptions, sink_options, source_options
from nsqpy.spark.plan import OffsetRange, StreamPlanner, plan_batch

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("id", StringType()),
        StructField("body", BinaryType()),
        StructField("trace_id", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
    ]
)


def read_partition(partition: InputPartition, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one planned partition (an ``OffsetRange``), in offset order."""
    # Imported here: only tasks read (numpy and the decoder stay out of the driver's
    # planning process, which starts for every streaming query).
    from nsqpy.spark.fetch import FetchSettings, read_cluster_range, read_range
    from nsqpy.spark.nsqhttp import CLUSTER_NODE

    r = partition.value
    if r is None:  # Spark plans one empty partition when a read has nothing to read
        return iter(())
    assert isinstance(r, OffsetRange)
    settings = FetchSettings(
        fail_on_data_loss=opts.fail_on_data_loss,
        max_count=opts.fetch_max_count,
        max_bytes=opts.fetch_max_bytes,
        timeout=opts.timeout,
        tls=opts.tls,
    )
    if r.node.startswith(CLUSTER_NODE) and opts.lookupd:
        return read_cluster_range(r, settings, opts.lookupd)
    return read_range(r, settings)


class NsqDataSource(DataSource):
    """Topics of nsqd as a Spark data source (``format("nsq")``); options in docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return NsqBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NsqStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from nsqpy.spark.sink import NsqBatchWriter

        return NsqBatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from nsqpy.spark.sink import NsqStreamWriter

        return NsqStreamWriter(sink_options(self.options), schema)


class NsqBatchReader(DataSourceReader):
    """A batch read: the offset ranges are fixed when Spark plans the query."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(r) for r in plan_batch(self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition, self.opts)


class NsqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream: offsets per partition in the checkpoint, bounded micro-batches."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.planner = StreamPlanner(opts)

    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial()  # type: ignore[return-value]

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self.planner.latest(start, max_rows)  # type: ignore[return-value]

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self.planner.latest_reported()  # type: ignore[return-value]

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return [InputPartition(r) for r in self.planner.ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition, self.opts)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: nsqd keeps no state for Spark; the checkpoint has the offsets."""
