"""Reading one offset range in a Spark task: ``/log/read`` calls -> Arrow record batches.

Owns ``read_range``: it reads [start, end) of a partition from its nsqd in bounded
requests (``fetchMaxCount``/``fetchMaxBytes``) of the log's own batches
(``format=batches``: nsqd sends them as stored), yields one Arrow batch per reply, never
returns a record at or past ``end``, and handles offsets that are gone: removed by
retention (416 below the low watermark), skipped by the log (a quarantined segment) or
beyond the log's end (the topic was recreated). With ``failOnDataLoss`` those raise
``DataLoss``; without, they are logged as warnings and skipped. ``read_cluster_range``
reads a partition of an nsqpy cluster: when its node stops serving it in the middle (the
leader died, or handed the lead over and lags the committed offset as a follower), it asks
lookupd for the partition's leader and goes on from the next offset, for up to the read
timeout, so a leader change never loses or repeats a record of the range. Imports the
standard library, pyarrow, ``nsqpy.protocol`` and the pure ``nsqpy.spark`` modules; never
pyspark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from nsqpy.protocol.logread import BATCHES
from nsqpy.spark.nsqhttp import NsqdHttp, NsqHttpError
from nsqpy.spark.options import EARLIEST, TlsOptions
from nsqpy.spark.plan import DataLoss, OffsetRange
from nsqpy.spark.wire import decode_batches, to_record_batch

log = logging.getLogger("nsqpy.spark")


@dataclass(frozen=True)
class FetchSettings:
    """How a task reads: the per-request bounds, the timeout and the data-loss policy."""

    fail_on_data_loss: bool = True
    max_count: int = 20_000
    max_bytes: int = 4 << 20
    timeout: float = 30.0
    tls: TlsOptions | None = None  # HTTPS to nsqd (``nsq.ssl.*``)


def _lost(r: OffsetRange, first: int, last: int, why: str, settings: FetchSettings) -> None:
    message = f"{r.topic}/{r.partition} on {r.address}: offsets {first}..{last} {why}"
    if settings.fail_on_data_loss:
        raise DataLoss(message + "; set failOnDataLoss=false to skip lost offsets with a warning")
    log.warning("%s; skipped (failOnDataLoss=false)", message)


class Behind(Exception):
    """The node asked does not have the range's records (any more, or yet): a cluster
    partition's leader has changed."""


RETRY_S = 0.5


def read_cluster_range(
    r: OffsetRange, settings: FetchSettings, lookupd: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    """``read_range`` of a cluster partition, following its leader (module docstring)."""
    deadline = time.monotonic() + settings.timeout
    part = r
    while True:
        try:
            for batch in read_range(part, settings, cluster=True):
                part = replace(part, start=int(batch.column("offset")[-1].as_py()) + 1)
                yield batch
            return
        except (Behind, NsqHttpError) as exc:
            if isinstance(exc, NsqHttpError) and exc.status not in (0, 404, 503):
                raise
            if time.monotonic() >= deadline:
                raise DataLoss(f"{r.topic}/{r.partition}: no node served offsets from "
                               f"{part.start} within {settings.timeout}s ({exc})") from exc  # fmt: skip
            log.info("%s/%d: %s (%s); asking lookupd for its leader", r.topic, r.partition,
                     part.address, exc)  # fmt: skip
            time.sleep(RETRY_S)
            try:
                found = [a for lk in lookupd for a in _leader(lk, r, settings)]
            except NsqHttpError:
                found = []
            if found:
                part = replace(part, address=found[0])


def _leader(lookupd: str, r: OffsetRange, settings: FetchSettings) -> list[str]:
    with NsqdHttp(lookupd, settings.timeout) as conn:
        return conn.lookup(r.topic, r.partition)


def read_range(
    r: OffsetRange, settings: FetchSettings, *, cluster: bool = False
) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches of the source schema, in offset order
    (``cluster``: Behind, not data loss, when the node does not have them)."""
    with NsqdHttp(r.address, settings.timeout, settings.tls) as conn:
        offset = r.start
        if offset == EARLIEST:
            offset = _low_watermark(conn, r)
        while offset < r.end:
            want = min(r.end - offset, settings.max_count)
            try:
                reply = conn.read(
                    r.topic, r.partition, offset, want, settings.max_bytes, fmt=BATCHES
                )
            except NsqHttpError as exc:
                if exc.code != "OFFSET_OUT_OF_RANGE" or not isinstance(exc.doc, dict):
                    raise
                low, high = int(exc.doc.get("low", 0)), int(exc.doc.get("high", 0))
                if offset > high and cluster:
                    raise Behind(f"its committed end is {high}") from None
                if offset > high:
                    _lost(r, offset, r.end - 1, f"are past the log's end {high}", settings)
                    return
                _lost(r, offset, min(low, r.end) - 1, "were removed by retention", settings)
                offset = low
                continue
            chunk = decode_batches(reply.body)
            if chunk.count == 0 and cluster:
                raise Behind(f"its committed end is {reply.high}")
            if chunk.count == 0:
                _lost(r, offset, r.end - 1, f"are past the log's end {reply.high}", settings)
                return
            first = int(chunk.offsets[0])
            if first > offset:
                _lost(r, offset, min(first, r.end) - 1, "are missing from the log", settings)
            keep = int((chunk.offsets < r.end).sum())
            for after, before in _gaps(chunk.offsets[:keep]):
                _lost(r, after + 1, before - 1, "are missing from the log", settings)
            if keep:
                yield to_record_batch(chunk, r.topic, r.partition, keep)
            offset = max(reply.next_offset, offset + 1)


def _gaps(offsets: np.ndarray) -> list[tuple[int, int]]:
    """(offset, next offset) for each jump of more than one in ``offsets``."""
    if len(offsets) < 2 or int(offsets[-1]) - int(offsets[0]) == len(offsets) - 1:
        return []
    jumps = np.nonzero(np.diff(offsets.astype(np.int64)) > 1)[0]
    return [(int(offsets[i]), int(offsets[i + 1])) for i in jumps]


def _low_watermark(conn: NsqdHttp, r: OffsetRange) -> int:
    for marks in conn.watermarks(r.topic) or []:
        if marks.partition == r.partition:
            return marks.low
    return r.end
