"""The reader side of nsqd's log-read bodies: bytes -> columns -> an Arrow record batch.

Owns ``decode_chunk`` (checks and slices a ``/log/read`` body in the columnar layout
documented in ``nsqpy.nsqd.logread``), ``decode_batches`` (the same for
``format=batches``: the log's own batches, laid out as ``nsqpy.storage.log`` documents,
checked by their CRC32Cs) and ``to_record_batch``, which builds the source's Arrow batch
without a Python loop per record: fixed-size fields are gathered with numpy, bodies are
cut out of the reply by Arrow in C, and the hex IDs are formed with numpy. Also owns the
Arrow form of the output schema. Imports the standard library, crc32c, numpy, pyarrow,
``nsqpy.protocol.message`` and the record layout of ``nsqpy.storage.records``; never
pyspark (Spark's types live in ``nsqpy.spark.source``).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from crc32c import crc32c

from nsqpy.errors import NsqError
from nsqpy.protocol.message import OFFSET_BITS

MAGIC = b"NQLR"
VERSION = 1
HEAD = struct.Struct("<4sHHII")
_U32 = struct.Struct("<I")
# format=batches: the log's batches (nsqpy.storage.log documents them; a reader has its own
# copy of the layout so Spark's workers need not import the storage engine)
BATCH = struct.Struct("<IIQIIIIQ")  # magic crc base epoch count length records_crc max_ts
BATCH_SIZE = BATCH.size
BATCH_MAGIC = 0x3242514E  # b"NQB2"
BATCH_CRC_FROM = 8
RECORD_SIZE = 38  # length u32 crc u32 offset u64 ts u64 deliver_at u64 flags u16 ext_len u32
RECORD_TAIL = RECORD_SIZE - 4

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("id", pa.string()),
        ("body", pa.binary()),
        ("trace_id", pa.string()),
        ("headers", HEADERS_TYPE),
    ]
)

# byte -> its two lowercase hex characters
_HEX_PAIRS = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), dtype=np.uint8).reshape(
    256, 2
)
_FIXED = np.arange(RECORD_SIZE, dtype=np.int64)


class BadLogReply(NsqError):
    """A /log/read body does not follow the documented layout."""


@dataclass(frozen=True)
class Chunk:
    """The columns of one read reply (numpy arrays, and Arrow binary arrays for the
    variable-size fields: ``headers`` holds each record's JSON text, empty for none)."""

    count: int
    offsets: np.ndarray
    timestamps: np.ndarray
    deliver_at: np.ndarray
    trace_ids: np.ndarray
    flags: np.ndarray
    headers: pa.Array
    bodies: pa.Array


def _binary(n: int, positions: np.ndarray | memoryview, data: object) -> pa.Array:
    """A binary array over ``data`` (no copy) with the n+1 int32 ``positions``."""
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(positions), pa.py_buffer(data)]
    )


def decode_chunk(data: bytes) -> Chunk:
    """Check and slice a columnar read body; BadLogReply when lengths or magic do not add up."""
    if len(data) < HEAD.size:
        raise BadLogReply(f"log reply of {len(data)} bytes is shorter than its header")
    magic, version, _, n, _ = HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise BadLogReply(f"log reply has magic {magic!r} version {version}")
    fixed = HEAD.size + 32 * n + 12 * (n + 1) + 2 * n
    if len(data) < fixed:
        raise BadLogReply(f"log reply of {len(data)} bytes is too short for {n} records")
    buf = memoryview(data)
    at = HEAD.size

    def column(dtype: str, count: int) -> np.ndarray:
        nonlocal at
        arr = np.frombuffer(buf, dtype=np.dtype(dtype), count=count, offset=at)
        at += arr.nbytes
        return arr

    offsets, timestamps = column("<u8", n), column("<i8", n)
    deliver_at, trace_ids = column("<i8", n), column("<u8", n)
    key_pos, header_pos, body_pos = column("<u4", n + 1), column("<u4", n + 1), column("<u4", n + 1)
    flags = column("<u2", n)
    sizes = (int(key_pos[-1]), int(header_pos[-1]), int(body_pos[-1]))
    if len(data) != fixed + sum(sizes) or not all(
        p[0] == 0 and bool(np.all(p[1:] >= p[:-1])) and int(p[-1]) < 1 << 31
        for p in (key_pos, header_pos, body_pos)
    ):
        raise BadLogReply(f"log reply positions do not match its {len(data)} bytes")
    headers_at = fixed + sizes[0]
    bodies_at = headers_at + sizes[1]
    return Chunk(
        n,
        offsets,
        timestamps,
        deliver_at,
        trace_ids,
        flags,
        _binary(n, header_pos, buf[headers_at:bodies_at]),
        _binary(n, body_pos, buf[bodies_at : bodies_at + sizes[2]]),
    )


@dataclass(frozen=True)
class _Span:
    """One batch of a reply: its records are data[start:end]; ``stride`` > 0 when they
    all seem to be that long (first record's length times the count fills the batch)."""

    start: int
    end: int
    n: int
    base: int
    stride: int


def _spans(data: bytes) -> list[_Span]:
    """Every batch of a reply; headers, records CRCs and sizes checked."""
    out: list[_Span] = []
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
        stride = _U32.unpack_from(data, start)[0] + 4
        out.append(_Span(start, end, n, base, stride if stride * n == length else 0))
        pos = end
    return out


def _positions(data: bytes, raw: np.ndarray, span: _Span) -> np.ndarray:
    """Where each record of ``span`` begins: strided when they are all the same length,
    else found by following the lengths. BadLogReply unless they tile the batch."""
    if span.stride:
        pos = np.arange(span.start, span.end, span.stride, dtype=np.int64)
        lengths = raw[pos[:, None] + np.arange(4)].view("<u4").ravel()
        if bool(np.all(lengths == span.stride - 4)):
            return pos
    out = []
    p = span.start
    for _ in range(span.n):
        if p + 4 > span.end:
            break
        out.append(p)
        p += 4 + _U32.unpack_from(data, p)[0]
    if p != span.end or len(out) != span.n:
        raise BadLogReply("log reply batch records do not fill their batch")
    return np.array(out, dtype=np.int64)


def _fixed_fields(data: bytes, raw: np.ndarray, spans: list[_Span]) -> tuple[np.ndarray, Any]:
    """(n x stride array of whole records, None) when every record of the reply has the
    same length; else (n x 38 array of their fixed fields, their positions)."""
    strides = {span.stride for span in spans}
    if len(strides) == 1 and 0 not in strides:
        stride = strides.pop()
        parts = [raw[span.start : span.end] for span in spans]
        whole = (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(-1, stride)
        if bool(np.all(_column(whole, 0, "<u4") == stride - 4)):
            return whole, None
    pos = np.concatenate([_positions(data, raw, span) for span in spans])
    return raw[pos[:, None] + _FIXED], pos


def _empty_chunk() -> Chunk:
    empty = np.zeros(0, dtype=np.int64)
    binary = pa.array([], pa.binary())
    return Chunk(0, empty.view("<u8"), empty, empty, empty.view("<u8"), empty, binary, binary)


def _column(fixed: np.ndarray, at: int, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    return fixed[:, at : at + width].copy().view(dtype).ravel()


def decode_batches(data: bytes) -> Chunk:
    """Check and decode a ``format=batches`` read body (the log's batches, as stored).

    When every record has the same length (the usual MPUB of same-size bodies) the
    records are one 2-D array and each column a strided copy; otherwise each record's
    position is found by following the lengths and its fields are gathered.
    """
    spans = _spans(data)
    if not spans:
        return _empty_chunk()
    raw = np.frombuffer(data, np.uint8)
    # length crc offset ts deliver_at flags ext_len: the first 38 columns of ``fixed``
    fixed, pos = _fixed_fields(data, raw, spans)
    n = len(fixed)
    lengths = _column(fixed, 0, "<u4").astype(np.int64)
    ext = _column(fixed, 34, "<u4").astype(np.int64)
    offsets = _column(fixed, 8, "<u8")
    if bool(np.any(lengths < RECORD_TAIL)) or bool(np.any(ext > lengths - RECORD_TAIL)):
        raise BadLogReply("log reply has a record shorter than its own fields")
    expected = np.concatenate([np.arange(s.base, s.base + s.n, dtype=np.uint64) for s in spans])
    if not np.array_equal(offsets, expected):
        raise BadLogReply("log reply record offsets do not follow their batch's base offset")
    trace_ids = np.zeros(n, dtype=np.uint64)
    headers = pa.nulls(n, pa.binary())
    if pos is None and not bool(np.any(ext)):
        size = fixed.shape[1] - RECORD_SIZE
        bodies = _binary(
            n, np.arange(n + 1, dtype=np.int32) * np.int32(size), fixed[:, RECORD_SIZE:].copy()
        )
    else:
        if pos is None:
            pos = np.concatenate([np.arange(s.start, s.end, s.stride) for s in spans])
        assert pos is not None
        bodies = _pick(data, pos + RECORD_SIZE + ext, pos + 4 + lengths)
        has_ext = np.nonzero(ext)[0]
        if len(has_ext):
            trace_ids, headers = _extensions(data, raw, pos, ext, has_ext, n)
    return Chunk(
        n,
        offsets,
        _column(fixed, 16, "<i8"),
        _column(fixed, 24, "<i8"),
        trace_ids,
        _column(fixed, 32, "<u2"),
        headers,
        bodies,
    )


def _pick(data: bytes, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The binary array of data[starts[i]:ends[i]] (ascending, disjoint), copied in C.

    The slices and the gaps between them form one binary array over ``data`` (its value
    offsets interleave starts and ends); taking every other value packs the slices.
    """
    n = len(starts)
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2], bounds[1::2] = starts, ends
    both = pa.Array.from_buffers(
        pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
    )
    return both.take(pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int32)))


def _extensions(
    data: bytes, raw: np.ndarray, pos: np.ndarray, ext: np.ndarray, has: np.ndarray, n: int
) -> tuple[np.ndarray, pa.Array]:
    """Trace IDs and header JSON texts of the records with an extension (the others: 0, "")."""
    at = pos[has] + RECORD_SIZE  # trace_id u64 | key_len u16 | key | headers
    if bool(np.any(ext[has] < 10)):
        raise BadLogReply("log reply has a record extension shorter than its fields")
    head = raw[at[:, None] + np.arange(10)]
    trace_ids = np.zeros(n, dtype=np.uint64)
    trace_ids[has] = head[:, 0:8].copy().view("<u8").ravel()
    key_len = head[:, 8:10].copy().view("<u2").ravel().astype(np.int64)
    starts, ends = at + 10 + key_len, at + ext[has]
    if bool(np.any(starts > ends)):
        raise BadLogReply("log reply has a partition key longer than its extension")
    starts_all = pos + RECORD_SIZE  # records without one get an empty slice
    ends_all = starts_all.copy()
    starts_all[has], ends_all[has] = starts, ends
    return trace_ids, _pick(data, starts_all, ends_all)


def hex_ids(values: np.ndarray) -> pa.Array:
    """16 lowercase hex characters per u64, as an Arrow string array."""
    n = len(values)
    big_endian = np.ascontiguousarray(values, dtype=">u8").view(np.uint8)
    chars = _HEX_PAIRS[big_endian]  # (8n, 2): two characters per byte, in order
    positions = np.arange(0, 16 * (n + 1), 16, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(positions), pa.py_buffer(chars))


def _headers(chunk: Chunk, n: int) -> pa.Array:
    texts = chunk.headers.slice(0, n)
    if n == 0 or texts.null_count == n or not pc.max(pc.binary_length(texts)).as_py():
        return pa.nulls(n, HEADERS_TYPE)
    values = [_header_items(raw) for raw in texts.to_pylist()]
    return pa.array(values, type=HEADERS_TYPE)


def _header_items(raw: bytes | None) -> list[tuple[str, str]] | None:
    """A record's JSON headers as (name, text) pairs; None when absent or not a JSON object."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in doc.items()]


def to_record_batch(
    chunk: Chunk, topic: str, partition: int, limit: int | None = None
) -> pa.RecordBatch:
    """The Arrow batch of the source schema for ``chunk`` (its first ``limit`` records)."""
    n = chunk.count if limit is None else min(limit, chunk.count)
    offsets = chunk.offsets[:n]
    ids = hex_ids((np.uint64(partition) << np.uint64(OFFSET_BITS)) | offsets)
    traces = chunk.trace_ids[:n]
    if bool(np.any(traces)):
        trace_ids = pc.if_else(pa.array(traces != 0), hex_ids(traces), pa.scalar(None, pa.string()))
    else:
        trace_ids = pa.nulls(n, pa.string())
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets.astype(np.int64), pa.int64()),
        pa.array(chunk.timestamps[:n] // 1000, pa.int64()).view(pa.timestamp("us", tz="UTC")),
        ids,
        chunk.bodies.slice(0, n),
        trace_ids,
        _headers(chunk, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
