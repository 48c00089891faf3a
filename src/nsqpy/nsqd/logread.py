"""nsqd's log-read API: read a partition's log by offset, its watermarks, seek by time.

Owns three read-only HTTP routes that Spark (``nsqpy.spark``) and other offset-keeping
readers use; the binary layout of a read's reply is ``nsqpy.protocol.logread``'s (written
here with its ``encode_columns``, or cut from the log's own batches). Reads go straight to
the topic's partition log and never touch a channel: no cursor moves, nothing is
delivered, confirmed or counted. Imports aiohttp, ``nsqpy.httpapi``, ``nsqpy.protocol``
and ``nsqpy.storage``; sees the daemon only through ``LogReadHost`` (its broker, options and
HTTP port). ``add_logread_routes(app, host)`` is called by ``make_app``; errors are raised
as ``HttpError``.

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
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from crc32c import crc32c

from nsqpy.broker.broker import Broker
from nsqpy.errors import StorageError
from nsqpy.httpapi import V1_HEADER, HttpError, query_arg, v1_json
from nsqpy.options import NsqdOptions
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
    from nsqpy.broker.partition import Partition
    from nsqpy.broker.topic import Topic

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


class LogReadHost(Protocol):
    """What the log-read routes use of nsqd (``NsqdServer`` is one; never named here)."""

    @property
    def broker(self) -> Broker: ...

    @property
    def opts(self) -> NsqdOptions: ...

    @property
    def http_port(self) -> int: ...

    def log_read_end(self, part: Partition) -> int | None:
        """In a cluster: where reading a partition held here must stop (its committed data
        only); None on a single node (its readable end)."""
        ...

    def cluster_id(self) -> str:
        """The cluster's id ("" on a single node)."""
        ...


def add_logread_routes(app: web.Application, host: LogReadHost) -> None:
    """Add GET /log/read, /log/watermarks and /log/offset_for_time to nsqd's app."""
    api = LogReadApi(host)
    app.router.add_route("GET", "/log/read", api.read)
    app.router.add_route("GET", "/log/watermarks", api.watermarks)
    app.router.add_route("GET", "/log/offset_for_time", api.offset_for_time)


class LogReadApi:
    """The handlers; each answers from the loop thread in one go (no await while reading)."""

    def __init__(self, host: LogReadHost) -> None:
        self.host = host
        self.broker = host.broker

    @property
    def node(self) -> str:
        """``broadcast_address:http_port`` (IPv6 in brackets), as nsqlookupd lists it (the
        broadcast HTTP port when one is set, as this nsqd registers itself)."""
        opts = self.host.opts
        host, port = opts.broadcast_address, opts.broadcast_http_port or self.host.http_port
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _topic(self, request: web.Request) -> Topic:
        name = query_arg(request, "topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not valid_topic_name(name):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        topic = self.broker.get_topic(name)
        if topic is None or topic.deleted:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic

    def _partition(self, request: web.Request) -> tuple[Topic, int, Log]:
        topic = self._topic(request)
        raw = query_arg(request, "partition")
        number = 0 if raw is None else _uint(raw, MAX_PARTITION)
        if number is None:
            raise HttpError(400, "INVALID_ARG_PARTITION")
        found = partition_logs(topic).get(number)
        if found is None:
            raise HttpError(404, "PARTITION_NOT_FOUND")
        return topic, number, found

    @staticmethod
    def _required_uint(request: web.Request, name: str, limit: int) -> int:
        """A decimal argument in 0..``limit``: 400 ``MISSING_ARG_<NAME>`` when absent,
        ``INVALID_ARG_<NAME>`` when not such a number."""
        raw = query_arg(request, name)
        if raw is None:
            raise HttpError(400, f"MISSING_ARG_{name.upper()}")
        value = _uint(raw, limit)
        if value is None:
            raise HttpError(400, f"INVALID_ARG_{name.upper()}")
        return value

    def _high(self, topic: Topic, number: int, plog: Log) -> int:
        part = topic.partition(number)
        end = self.host.log_read_end(part) if part is not None else None
        return plog.readable_offset if end is None else min(end, plog.readable_offset)

    async def watermarks(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        cluster = self.host.cluster_id()
        parts = [
            {
                "partition": number,
                "low": plog.low_watermark,
                "high": max(plog.low_watermark, self._high(topic, number, plog)),
                "durable": plog.durable_offset,
                **({"leader": bool((p := topic.partition(number)) and p.leading)}
                   if cluster else {}),
            }
            for number, plog in sorted(partition_logs(topic).items())
        ]  # fmt: skip
        doc = {"topic": topic.name, "node": self.node, "partitions": parts}
        if cluster:
            doc["cluster"] = cluster
        return v1_json(doc)

    async def offset_for_time(self, request: web.Request) -> web.StreamResponse:
        topic, number, plog = self._partition(request)
        ts_ms = self._required_uint(request, "ts_ms", MAX_TS_MS)
        low = plog.low_watermark
        high = max(low, self._high(topic, number, plog))
        try:
            offset = plog.offset_for_timestamp(ts_ms * 1_000_000)
        except StorageError as exc:
            log.error("TOPIC(%s): offset_for_time %d failed: %s", topic.name, ts_ms, exc)
            raise HttpError(500, "CORRUPT_RECORD") from None
        offset = min(max(offset, low), high)
        doc = {"topic": topic.name, "partition": number, "offset": offset, "low": low, "high": high}
        return v1_json(doc)

    async def read(self, request: web.Request) -> web.StreamResponse:
        topic, number, plog = self._partition(request)
        offset = self._required_uint(request, "offset", MAX_OFFSET)
        max_count = self._bound(request, "max_count", DEFAULT_MAX_COUNT, LIMIT_MAX_COUNT)
        max_bytes = self._bound(request, "max_bytes", DEFAULT_MAX_BYTES, LIMIT_MAX_BYTES)
        if max_count is None:
            raise HttpError(400, "INVALID_ARG_MAX_COUNT")
        if max_bytes is None:
            raise HttpError(400, "INVALID_ARG_MAX_BYTES")
        fmt = query_arg(request, "format") or FORMATS[0]
        if fmt not in FORMATS:
            raise HttpError(400, "INVALID_ARG_FORMAT")
        low = plog.low_watermark
        high = max(low, self._high(topic, number, plog))
        if not low <= offset <= high:
            raise _out_of_range(offset, low, high)
        try:
            if fmt == BATCHES:
                body, count, nxt = self._batches(plog, offset, high, max_count, max_bytes)
            else:
                wanted = min(max_count, high - offset)
                records = plog.read(offset, wanted, max_bytes) if offset < high else []
                records = [r for r in records if r.offset < high]  # (past a gap: not yet)
                body, count = encode_columns(records), len(records)
                nxt = records[-1].offset + 1 if records else offset
        except OffsetOutOfRange as exc:
            raise _out_of_range(offset, exc.low, exc.high) from None
        except StorageError as exc:
            log.error("TOPIC(%s): log read at %d failed: %s", topic.name, offset, exc)
            raise HttpError(500, "CORRUPT_RECORD") from None
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
        if raw.offset >= high:  # (only what lies past a gap, not committed yet)
            return b"", 0, offset
        data, count = cut_batches(raw, min(max_count, high - raw.offset))
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


def _out_of_range(offset: int, low: int, high: int) -> HttpError:
    return HttpError(416, "OFFSET_OUT_OF_RANGE", offset=offset, low=low, high=high)
