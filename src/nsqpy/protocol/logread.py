"""The log-read API's wire format (docs/logread.md): the body of ``GET /log/read``, both ways.

nsqd writes it (``nsqpy.nsqd.logread`` with ``encode_columns``), readers decode it: in plain
Python with ``decode_columns``/``decode_batches`` here, or with numpy and Arrow in
``nsqpy.spark.wire``, which takes every position and field size from this module. Also owns
the content types, the ``format`` names and the reply header names. Imports only the
standard library, ``crc32c`` and ``nsqpy.errors``.

``format=columns`` (the default): all integers little-endian, ``n`` records, and each
``*_pos`` column has ``n+1`` entries from 0, so item i is ``data[pos[i]:pos[i+1]]``::

    magic "NQLR" | version u16 (1) | reserved u16 | n u32 | reserved u32     16 bytes
    offset      u64[n]
    timestamp   i64[n]    publish time, ns since the Unix epoch
    deliver_at  i64[n]    ns since the Unix epoch when deferred, else 0
    trace_id    u64[n]    0 = none
    key_pos     u32[n+1]  partition keys
    headers_pos u32[n+1]  headers: a UTF-8 JSON object per record, empty = none
    body_pos    u32[n+1]
    flags       u16[n]
    keys | headers | bodies                                                  the data

``format=batches``: the log's own batches as stored, one after another (integers
little-endian; the CRCs are CRC32C)::

    batch     = magic u32 "NQB2" | header_crc u32 (of bytes 8..40) | base_offset u64
                | epoch u32 | count u32 | length u32 | records_crc u32 | max_timestamp u64
                | record * count                       (``length`` bytes, ``records_crc``)
    record    = length u32 (bytes after it) | crc u32 | offset u64 (base_offset + i)
                | timestamp i64 | deliver_at i64 | flags u16 | ext_length u32
                | extension (ext_length bytes) | body
    extension = trace_id u64 | key_length u16 | partition key | headers (the rest)

``nsqpy.storage.records`` owns those bytes on disk; they are restated here so that a reader
need not import the storage engine, and ``tests/protocol/test_protocol_logread.py`` pins the
two together.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from operator import itemgetter
from typing import Any, NamedTuple

from crc32c import crc32c

from nsqpy.errors import NsqError

# -- the API around the body ------------------------------------------------------------------

COLUMNS = "columns"
BATCHES = "batches"
FORMATS = (COLUMNS, BATCHES)  # the first is the default
CONTENT_TYPE = "application/x-nsqpy-log; version=1"
BATCHES_CONTENT_TYPE = "application/x-nsqpy-log-batches; version=2"
NEXT_OFFSET_HEADER = "X-NSQ-Next-Offset"
RECORD_COUNT_HEADER = "X-NSQ-Record-Count"
LOW_WATERMARK_HEADER = "X-NSQ-Low-Watermark"
HIGH_WATERMARK_HEADER = "X-NSQ-High-Watermark"


class BadLogReply(NsqError):
    """A /log/read body does not follow the documented layout."""


class LogRecord(NamedTuple):
    """One record of a read body (``nsqpy.storage.Record``'s fields, in the same order)."""

    offset: int
    timestamp: int
    deliver_at: int
    flags: int
    body: bytes
    trace_id: int = 0
    partition_key: bytes = b""
    headers: bytes = b""


def _starts(fmt: str, names: Sequence[str]) -> dict[str, tuple[int, str]]:
    """name -> (byte position, struct code) of each field of a little-endian struct."""
    codes = fmt.lstrip("<")
    assert len(codes) == len(names)
    sizes = [struct.calcsize("<" + code) for code in codes]
    return {
        name: (at, code)
        for name, at, code in zip(names, accumulate(sizes, initial=0), codes, strict=False)
    }


# -- format=columns ---------------------------------------------------------------------------

MAGIC = b"NQLR"
VERSION = 1
HEAD = struct.Struct("<4sHHII")  # magic, version, reserved, n, reserved
# The per-record columns in body order, as (name, struct code); then the position columns
# (n+1 entries of POSITION each), then FLAGS per record, then the data of each position column.
VALUE_COLUMNS = (("offset", "Q"), ("timestamp", "q"), ("deliver_at", "q"), ("trace_id", "Q"))
POSITION_COLUMNS = ("key", "headers", "body")
POSITION = "I"
FLAGS = "H"
_U32 = struct.Struct("<I")
_VALUE_WIDTH = sum(struct.calcsize("<" + code) for _, code in VALUE_COLUMNS)  # 32
_POS_WIDTH = struct.calcsize("<" + POSITION)
_FLAGS_WIDTH = struct.calcsize("<" + FLAGS)
# LogRecord's fields by position (a named tuple: itemgetter is its fastest accessor).
_OFFSET, _TIMESTAMP, _DELIVER_AT, _FLAGS, _BODY, _TRACE_ID, _KEY, _HEADERS = range(8)


def columns_size(n: int) -> int:
    """Bytes of a columnar body of ``n`` records before its data (keys, headers, bodies)."""
    positions = len(POSITION_COLUMNS) * _POS_WIDTH * (n + 1)
    return HEAD.size + _VALUE_WIDTH * n + positions + _FLAGS_WIDTH * n


@dataclass(frozen=True, slots=True)
class ColumnsLayout:
    """Where each part of a checked columnar body starts: ``count`` records; ``values`` maps
    a VALUE_COLUMNS name to its position, ``positions`` a POSITION_COLUMNS name to the
    position of its n+1 entries; ``flags`` the flags; ``data`` a POSITION_COLUMNS name to
    where its bytes start. The body ends at ``end``."""

    count: int
    values: dict[str, int]
    positions: dict[str, int]
    flags: int
    data: dict[str, int]
    end: int


def _positions(items: list[bytes]) -> bytes:
    """u32 positions (n+1, from 0) of ``items`` laid end to end."""
    if not any(items):
        return bytes(4 * (len(items) + 1))
    return struct.pack(f"<{len(items) + 1}I", *accumulate(map(len, items), initial=0))


def encode_columns(records: Sequence[Sequence[Any]]) -> bytes:
    """The columnar body holding ``records`` (``LogRecord``s, or ``nsqpy.storage.Record``s:
    tuples whose first eight fields are LogRecord's)."""
    n = len(records)
    head = HEAD.pack(MAGIC, VERSION, 0, n, 0)
    if not n:
        return head + bytes(12)

    def column(field: int) -> list[Any]:
        return list(map(itemgetter(field), records))

    keys, headers, bodies = column(_KEY), column(_HEADERS), column(_BODY)
    u64, i64 = f"<{n}Q", f"<{n}q"
    return b"".join(
        (
            head,
            struct.pack(u64, *column(_OFFSET)),
            struct.pack(i64, *column(_TIMESTAMP)),
            struct.pack(i64, *column(_DELIVER_AT)),
            struct.pack(u64, *column(_TRACE_ID)),
            _positions(keys),
            _positions(headers),
            _positions(bodies),
            struct.pack(f"<{n}H", *column(_FLAGS)),
            *keys,
            *headers,
            *bodies,
        )
    )


def columns_layout(data: bytes | memoryview) -> ColumnsLayout:
    """Check a columnar body's header and total length; BadLogReply when they do not add up.

    The positions inside each position column (from 0, never decreasing) are left to the
    caller, which reads those columns anyway (``decode_columns``, or numpy in Spark).
    """
    if len(data) < HEAD.size:
        raise BadLogReply(f"log reply of {len(data)} bytes is shorter than its header")
    magic, version, _, n, _ = HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise BadLogReply(f"log reply has magic {magic!r} version {version}")
    fixed = columns_size(n)
    if len(data) < fixed:
        raise BadLogReply(f"log reply of {len(data)} bytes is too short for {n} records")
    at = HEAD.size
    values = {}
    for name, code in VALUE_COLUMNS:
        values[name] = at
        at += struct.calcsize("<" + code) * n
    positions = {}
    for name in POSITION_COLUMNS:
        positions[name] = at
        at += _POS_WIDTH * (n + 1)
    flags = at
    starts = {}
    at = fixed
    for name in POSITION_COLUMNS:
        starts[name] = at
        at += _U32.unpack_from(data, positions[name] + _POS_WIDTH * n)[0]
    if at != len(data):
        raise BadLogReply(f"log reply positions do not match its {len(data)} bytes")
    return ColumnsLayout(n, values, positions, flags, starts, at)


def decode_columns(data: bytes) -> list[LogRecord]:
    """The records of a columnar body; BadLogReply unless it follows the layout exactly."""
    lay = columns_layout(data)
    n = lay.count
    offsets, timestamps, deliver_at, trace_ids = (
        struct.unpack_from(f"<{n}{code}", data, lay.values[name]) for name, code in VALUE_COLUMNS
    )
    flags = struct.unpack_from(f"<{n}{FLAGS}", data, lay.flags)
    items = []
    for name in POSITION_COLUMNS:
        pos = struct.unpack_from(f"<{n + 1}{POSITION}", data, lay.positions[name])
        if pos[0] != 0 or any(b < a for a, b in pairwise(pos)):
            raise BadLogReply(f"log reply positions do not match its {len(data)} bytes")
        at = lay.data[name]
        items.append([data[at + a : at + b] for a, b in pairwise(pos)])
    keys, headers, bodies = items
    return [
        LogRecord(*fields)
        for fields in zip(
            offsets, timestamps, deliver_at, flags, bodies, trace_ids, keys, headers, strict=True
        )
    ]


# -- format=batches ---------------------------------------------------------------------------

BATCH = struct.Struct("<IIQIIIIQ")  # magic crc base epoch count length records_crc max_ts
BATCH_SIZE = BATCH.size  # 40
BATCH_MAGIC = 0x3242514E  # b"NQB2" little-endian
BATCH_CRC_FROM = 8  # the header CRC covers bytes [8, 40) of the header
RECORD = struct.Struct("<IIQqqHI")  # length crc offset timestamp deliver_at flags ext_length
RECORD_SIZE = RECORD.size  # 38
RECORD_TAIL = RECORD_SIZE - 4  # bytes counted by the length field before the extension
EXT = struct.Struct("<QH")  # trace_id, key_length; then the key, then the headers
EXT_SIZE = EXT.size  # 10
# name -> (position in a record or extension, struct code), for readers that gather a field
# of many records at once.
RECORD_FIELDS = _starts(
    RECORD.format, ("length", "crc", "offset", "timestamp", "deliver_at", "flags", "ext_length")
)
EXT_FIELDS = _starts(EXT.format, ("trace_id", "key_length"))


class BatchSpan(NamedTuple):
    """One batch of a body: its ``n_records`` records are data[start:end], from offset ``base``."""

    start: int
    end: int
    n_records: int
    base: int


def batch_spans(data: bytes) -> list[BatchSpan]:
    """Every batch of a ``format=batches`` body; headers, records CRCs and sizes checked."""
    out: list[BatchSpan] = []
    pos, size = 0, len(data)
    view = memoryview(data)
    while pos < size:
        if pos + BATCH_SIZE > size:
            raise BadLogReply(f"log reply ends inside a batch header at byte {pos}")
        magic, hcrc, base, _epoch, n, length, rcrc, _ = BATCH.unpack_from(data, pos)
        start, end = pos + BATCH_SIZE, pos + BATCH_SIZE + length
        if (
            magic != BATCH_MAGIC
            or crc32c(view[pos + BATCH_CRC_FROM : start]) != hcrc
            or end > size
            or crc32c(view[start:end]) != rcrc
            or n == 0
            or length < RECORD_SIZE * n
        ):
            raise BadLogReply(f"log reply has a bad batch at byte {pos}")
        out.append(BatchSpan(start, end, n, base))
        pos = end
    return out


def _batch_records(data: bytes, span: BatchSpan) -> list[LogRecord]:
    out = []
    p = span.start
    for i in range(span.n_records):
        if p + RECORD_SIZE > span.end:
            raise BadLogReply("log reply batch records do not fill their batch")
        length, _, offset, timestamp, deliver_at, flags, ext_length = RECORD.unpack_from(data, p)
        end = p + 4 + length
        if length < RECORD_TAIL or end > span.end or ext_length > length - RECORD_TAIL:
            raise BadLogReply("log reply has a record shorter than its own fields")
        if offset != span.base + i:
            raise BadLogReply("log reply record offsets do not follow their batch's base offset")
        at = p + RECORD_SIZE
        body_at = at + ext_length
        trace_id, key, headers = 0, b"", b""
        if ext_length:
            if ext_length < EXT_SIZE:
                raise BadLogReply("log reply has a record extension shorter than its fields")
            trace_id, key_length = EXT.unpack_from(data, at)
            key_at = at + EXT_SIZE
            if key_at + key_length > body_at:
                raise BadLogReply("log reply has a partition key longer than its extension")
            key, headers = data[key_at : key_at + key_length], data[key_at + key_length : body_at]
        out.append(
            LogRecord(
                offset, timestamp, deliver_at, flags, data[body_at:end], trace_id, key, headers
            )
        )
        p = end
    if p != span.end:
        raise BadLogReply("log reply batch records do not fill their batch")
    return out


def decode_batches(data: bytes) -> list[LogRecord]:
    """The records of a ``format=batches`` body; BadLogReply unless every batch checks."""
    return [record for span in batch_spans(data) for record in _batch_records(data, span)]
