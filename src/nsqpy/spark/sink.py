"""The ``nsq`` sink: batch and streaming writers that publish rows to nsqd.

Owns ``NsqBatchWriter`` and ``NsqStreamWriter`` (Arrow writers: each Spark task gets
record batches and publishes them through ``nsqpy.spark.publish.Publisher``) and the
choice of nsqd for a task (the ``nsqd`` addresses, or every nsqd nsqlookupd knows,
spread by task partition). Delivery is at-least-once: a retried task or a micro-batch
replayed after a crash publishes its rows again; commit and abort cannot take messages
back, so they only log the counts. Imports pyspark, pyarrow and ``nsqpy.spark``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from nsqpy.errors import ConfigError
from nsqpy.spark.nsqhttp import NsqdHttp, lookup_nsqd
from nsqpy.spark.options import SinkOptions
from nsqpy.spark.publish import Publisher, check_sink_columns

log = logging.getLogger("nsqpy.spark")


@dataclass
class PublishedMessage(WriterCommitMessage):
    """A task's commit message: how many rows it published and in how many calls."""

    messages: int
    deferred: int
    calls: int


def _check(opts: SinkOptions, schema: StructType) -> None:
    arrow = to_arrow_schema(schema, timezone="UTC")
    check_sink_columns(arrow.names, {f.name: f.type for f in arrow}, opts.topic is not None)


def publish_task(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> PublishedMessage:
    """Publish every batch of one task to one nsqd, chosen by the task's partition."""
    addresses = list(opts.nsqd) or lookup_nsqd(opts.lookupd, None, opts.timeout)
    if not addresses:
        raise ConfigError(f"no nsqd registered with nsqlookupd {','.join(opts.lookupd)}")
    ctx = TaskContext.get()
    index = ctx.partitionId() if ctx is not None else 0
    with NsqdHttp(addresses[index % len(addresses)], opts.timeout, opts.tls) as conn:
        publisher = Publisher(conn, opts.topic, opts.mpub_max_bytes)
        for batch in batches:
            publisher.add(batch)
        counts = publisher.flush()
    return PublishedMessage(counts.messages, counts.deferred, counts.calls)


def _total(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, PublishedMessage)]
    return sum(m.messages + m.deferred for m in done), sum(m.calls for m in done)


class NsqBatchWriter(DataSourceArrowWriter):
    """``df.write.format("nsq")``: every row becomes one message (at-least-once)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessage:
        return publish_task(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        rows, calls = _total(messages)
        log.info("nsq sink: published %d messages in %d calls", rows, calls)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        rows, _ = _total(messages)
        log.warning("nsq sink: write aborted; %d messages were already published", rows)


class NsqStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("nsq")``: a replayed micro-batch is published again."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessage:
        return publish_task(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        rows, calls = _total(messages)
        log.info("nsq sink: batch %d published %d messages in %d calls", batchId, rows, calls)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        rows, _ = _total(messages)
        log.warning("nsq sink: batch %d aborted; %d messages already published", batchId, rows)
