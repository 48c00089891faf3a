"""Reading one offset range in a Spark task: ``/log/read`` calls -> Arrow record batches.

Owns ``read_range``: it reads [start, end) of a partition from its nsqd in bounded
requests (``fetchMaxCount``/``fetchMaxBytes``) of the log's own batches
(``format=batches``: nsqd sends them as stored), yields one Arrow batch per reply, never
returns a record at or past ``end``, and handles offsets that are gone: removed by
retention (416 below the low watermark), skipped by the log (a quarantined segment) or
beyond the log's end (the topic was recreated). With ``failOnDataLoss`` those raise
``DataLoss``; without, they are logged as warnings and skipped. Imports the standard
library, pyarrow, ``nsqpy.protocol`` and the pure ``nsqpy.spark`` modules; never pyspark.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from nsqpy.protocol.logread import BATCHES
from nsqpy.spark.nsqhttp import NsqdHttp, NsqHttpError
from nsqpy.spark.options import EARLIEST
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


def _lost(r: OffsetRange, first: int, last: int, why: str, settings: FetchSettings) -> None:
    message = f"{r.topic}/{r.partition} on {r.address}: offsets {first}..{last} {why}"
    if settings.fail_on_data_loss:
        raise DataLoss(message + "; set failOnDataLoss=false to skip lost offsets with a warning")
    log.warning("%s; skipped (failOnDataLoss=false)", message)


def read_range(r: OffsetRange, settings: FetchSettings) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches of the source schema, in offset order."""
    with NsqdHttp(r.address, settings.timeout) as conn:
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
                if offset > high:
                    _lost(r, offset, r.end - 1, f"are past the log's end {high}", settings)
                    return
                _lost(r, offset, min(low, r.end) - 1, "were removed by retention", settings)
                offset = low
                continue
            chunk = decode_batches(reply.body)
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
