"""nsqd's log-read API: read a partition's log by offset, its watermarks, seek by time.

Owns three read-only HTTP routes that Spark (``nsqpy.spark``) and other offset-keeping
readers use; the binary layout of a read's reply is ``nsqpy.protocol.logread``'s (written
here with its ``encode_columns``, or cut from the log's own batches). Reads go straight to
the topic's partition log and never touch a channel: no cursor moves, nothing is
delivered, confirmed or counted. Imports aiohttp, ``nsqpy.httpapi``, ``nsqpy.protocol``
and ``nsqpy.storage``; the server only for typing. ``add_logread_routes(app, server)`` is
called by ``make_app``.

Routes (all GET; errors are NSQ V1 JSON ``{"message": CODE}``)::

    /log/watermarks?topic=T
        200 {"topic": T, "node": "A:P", "partitions": [{"partition": 0, "low": L,
                                                         "high": H, "durable": D}]}
        node: this nsqd's broadcast address and HTTP port (how nsqlookupd names it), so a
        reader can key offsets by node when a topic lives on several nsqd; low: the first
        offset still kept (retention deletes below it); high: the offset the next
        published message will get, everything below it is readable; durable: the offset
        below which everything is fsynced.
    /log/offset_for_time?topic=T&partition=P&ts_ms=MS
        200 {"topic": T, "partition": P, "offset": O, "low": L, "high": H}
        O is the first offset whose publish time is at or after MS (ms since the epoch);
        H when there is none, L when every kept message is that recent.
    /log/read?topic=T&partition=P&offset=O&max_count=N&max_bytes=B[&format=F]
        200 with a binary body in format F and the headers X-NSQ-Next-Offset (the offset to ask
        for next), X-NSQ-Record-Count, X-NSQ-Low-Watermark and X-NSQ-High-Watermark.
        O == high gives zero records. At least one record comes back when there is one,
        even if it alone is larger than B. The offsets are normally O, O+1, ...; a first
        offset above O (or a jump) means those offsets are gone (a quarantined segment).
        format=columns (the default) is the columnar body; format=batches is the log's
        own batches as stored, read with one ``read_raw`` and sent as they are: no record
        is decoded or encoded on nsqd, so it is the cheap form for bulk readers. Its
        offsets are dense (a gap ends a reply), and the last batch is cut (resealed) to
        honour N. Both layouts: ``nsqpy.protocol.logread``.

    partition defaults to 0; max_count to 10000 (at most 1000000), max_bytes to 1 MiB (at
    most 16 MiB); larger values are lowered to the limit.

    400 MISSING_ARG_TOPIC, INVALID_ARG_TOPIC, INVALID_ARG_PARTITION, MISSING_ARG_OFFSET,
        INVALID_ARG_OFFSET, INVALID_ARG_MAX_COUNT, INVALID_ARG_MAX_BYTES, MISSING_ARG_TS_MS,
        INVALID_ARG_TS_MS (not a decimal integer in range; 0 is invalid for the maxima),
        INVALID_ARG_FORMAT
    404 TOPIC_NOT_FOUND, PARTITION_NOT_FOUND
    416 OFFSET_OUT_OF_RANGE {"message", "offset", "low", "high"}: offset < low (removed by
        retention: data loss for the reader) or offset > high
    500 CORRUPT_RECORD: the log failed a CRC check at that offset

A message's NSQ ID is ``nsqpy.protocol.message.encode_message_id(partition, offset)``.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from aiohttp import web
from crc32c import crc32c

from nsqpy.errors import StorageError
from nsqpy.httpapi import V1_HEADER, query_arg, v1_error, v1_json
from nsqpy.protocol.logread import (
    BATCHES,
    BATCHES_CONTENT_TYPE,
    CONTENT_TYPE,
    FORMATS,
    HIGH_WATERMARK_HEADER,
    LOW_WATERMARK_HEADER,
    NEXT_OFFSET_HEADER,
    RECORD_COUNT_HEADER,
    encode_columns,
)
from nsqpy.protocol.message import MAX_OFFSET, MAX_PARTITION
from nsqpy.protocol.names import valid_topic_name
from nsqpy.storage import MemoryLog, OffsetOutOfRange, PartitionLog, RawBatch
from nsqpy.storage.records import BATCH, BATCH_SIZE, batch_header, scan_records

if TYPE_CHECKING:
    from nsqpy.broker.topic import Topic
    from nsqpy.nsqd.server import NsqdServer

log = logging.getLogger("nsqpy.nsqd")

DEFAULT_MAX_COUNT = 10_000
LIMIT_MAX_COUNT = 1_000_000
DEFAULT_MAX_BYTES = 1 << 20
LIMIT_MAX_BYTES = 16 << 20
MAX_TS_MS = (1 << 63) // 1_000_000

_DIGITS = re.compile(r"[0-9]{1,19}")

Log = PartitionLog | MemoryLog


def cut_batches(raw: RawBatch, max_count: int) -> tuple[bytes, int]:
    """``raw``'s batches holding at most ``max_count`` records: (data, record count).

    Walks the batch headers only; a batch that crosses ``max_count`` is resealed to its
    first records (a fresh header and records CRC), so the reply stays valid log batches.
    """
    data, size = raw.data, len(raw.data)
    pos = count = 0
    while pos < size and count < max_count:
        _, _, base, epoch, n, length, _, _ = BATCH.unpack_from(data, pos)
        if count + n <= max_count:
            count += n
            pos += BATCH_SIZE + length
            continue
        keep = max_count - count
        first = pos + BATCH_SIZE
        end, max_ts = scan_records(data, first, keep)
        with memoryview(data) as view:
            kept = view[first:end]
            head = batch_header(base, epoch, keep, end - first, crc32c(kept), max_ts)
            return b"".join((view[:pos], head, kept)), max_count
    return (data if pos == size else data[:pos]), count


def partition_logs(topic: Topic) -> dict[int, Log]:
    """The logs of ``topic`` by partition number."""
    return {part.number: part.log for part in topic.partitions}


def _uint(text: str | None, limit: int) -> int | None:
    """A decimal integer 0..limit (ASCII digits only), else None."""
    if text is None or _DIGITS.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value <= limit else None


def add_logread_routes(app: web.Application, server: NsqdServer) -> None:
    """Add GET /log/read, /log/watermarks and /log/offset_for_time to nsqd's app."""
    api = LogReadApi(server)
    app.router.add_route("GET", "/log/read", api.read)
    app.router.add_route("GET", "/log/watermarks", api.watermarks)
    app.router.add_route("GET", "/log/offset_for_time", api.offset_for_time)


class LogReadApi:
    """The handlers; each answers from the loop thread in one go (no await while reading)."""

    def __init__(self, server: NsqdServer) -> None:
        self.server = server
        self.broker = server.broker

    @property
    def node(self) -> str:
        """``broadcast_address:http_port`` (IPv6 in brackets), as nsqlookupd lists it (the
        broadcast HTTP port when one is set, as this nsqd registers itself)."""
        opts = self.server.opts
        host, port = opts.broadcast_address, opts.broadcast_http_port or self.server.http_port
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _topic(self, request: web.Request) -> Topic | web.Response:
        name = query_arg(request, "topic")
        if name is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if not valid_topic_name(name):
            return v1_error("INVALID_ARG_TOPIC", 400)
        topic = self.broker.get_topic(name)
        if topic is None or topic.deleted:
            return v1_error("TOPIC_NOT_FOUND", 404)
        return topic

    def _partition(self, request: web.Request) -> tuple[Topic, int, Log] | web.Response:
        topic = self._topic(request)
        if isinstance(topic, web.Response):
            return topic
        raw = query_arg(request, "partition")
        number = 0 if raw is None else _uint(raw, MAX_PARTITION)
        if number is None:
            return v1_error("INVALID_ARG_PARTITION", 400)
        found = partition_logs(topic).get(number)
        if found is None:
            return v1_error("PARTITION_NOT_FOUND", 404)
        return topic, number, found

    async def watermarks(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        if isinstance(topic, web.Response):
            return topic
        parts = [
            {
                "partition": number,
                "low": plog.low_watermark,
                "high": plog.readable_offset,
                "durable": plog.durable_offset,
            }
            for number, plog in sorted(partition_logs(topic).items())
        ]
        return v1_json({"topic": topic.name, "node": self.node, "partitions": parts})

    async def offset_for_time(self, request: web.Request) -> web.StreamResponse:
        found = self._partition(request)
        if isinstance(found, web.Response):
            return found
        topic, number, plog = found
        raw = query_arg(request, "ts_ms")
        if raw is None:
            return v1_error("MISSING_ARG_TS_MS", 400)
        ts_ms = _uint(raw, MAX_TS_MS)
        if ts_ms is None:
            return v1_error("INVALID_ARG_TS_MS", 400)
        low, high = plog.low_watermark, plog.readable_offset
        try:
            offset = plog.offset_for_timestamp(ts_ms * 1_000_000)
        except StorageError as exc:
            log.error("TOPIC(%s): offset_for_time %d failed: %s", topic.name, ts_ms, exc)
            return v1_error("CORRUPT_RECORD", 500)
        offset = min(max(offset, low), high)
        doc = {"topic": topic.name, "partition": number, "offset": offset, "low": low, "high": high}
        return v1_json(doc)

    async def read(self, request: web.Request) -> web.StreamResponse:
        found = self._partition(request)
        if isinstance(found, web.Response):
            return found
        topic, _number, plog = found
        raw = query_arg(request, "offset")
        if raw is None:
            return v1_error("MISSING_ARG_OFFSET", 400)
        offset = _uint(raw, MAX_OFFSET)
        if offset is None:
            return v1_error("INVALID_ARG_OFFSET", 400)
        max_count = self._bound(request, "max_count", DEFAULT_MAX_COUNT, LIMIT_MAX_COUNT)
        max_bytes = self._bound(request, "max_bytes", DEFAULT_MAX_BYTES, LIMIT_MAX_BYTES)
        if max_count is None:
            return v1_error("INVALID_ARG_MAX_COUNT", 400)
        if max_bytes is None:
            return v1_error("INVALID_ARG_MAX_BYTES", 400)
        fmt = query_arg(request, "format") or FORMATS[0]
        if fmt not in FORMATS:
            return v1_error("INVALID_ARG_FORMAT", 400)
        low, high = plog.low_watermark, plog.readable_offset
        if not low <= offset <= high:
            return _out_of_range(offset, low, high)
        try:
            if fmt == BATCHES:
                body, count, nxt = self._batches(plog, offset, high, max_count, max_bytes)
            else:
                records = plog.read(offset, max_count, max_bytes) if offset < high else []
                body, count = encode_columns(records), len(records)
                nxt = records[-1].offset + 1 if records else offset
        except OffsetOutOfRange as exc:
            return _out_of_range(offset, exc.low, exc.high)
        except StorageError as exc:
            log.error("TOPIC(%s): log read at %d failed: %s", topic.name, offset, exc)
            return v1_error("CORRUPT_RECORD", 500)
        headers = {
            **V1_HEADER,
            "Content-Type": BATCHES_CONTENT_TYPE if fmt == BATCHES else CONTENT_TYPE,
            NEXT_OFFSET_HEADER: str(nxt),
            RECORD_COUNT_HEADER: str(count),
            LOW_WATERMARK_HEADER: str(low),
            HIGH_WATERMARK_HEADER: str(high),
        }
        return web.Response(body=body, headers=headers)

    @staticmethod
    def _batches(
        plog: Log, offset: int, high: int, max_count: int, max_bytes: int
    ) -> tuple[bytes, int, int]:
        """(whole batches from ``offset``, their record count, the next offset)."""
        if offset >= high:
            return b"", 0, offset
        raw = plog.read_raw(offset, max_bytes, verify=True)
        data, count = cut_batches(raw, max_count)
        return data, count, (raw.offset + count if count else offset)

    @staticmethod
    def _bound(request: web.Request, name: str, default: int, limit: int) -> int | None:
        """A positive bound (default when absent, lowered to ``limit``); None when invalid."""
        raw = query_arg(request, name)
        if raw is None:
            return default
        value = _uint(raw, (1 << 63) - 1)
        if not value:
            return None
        return min(value, limit)


def _out_of_range(offset: int, low: int, high: int) -> web.Response:
    return v1_error("OFFSET_OUT_OF_RANGE", 416, offset=offset, low=low, high=high)
