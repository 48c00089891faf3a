"""The reader side of nsqd's log-read bodies: bytes -> columns -> an Arrow record batch.

Owns ``decode_chunk`` (checks and slices a ``/log/read`` body in the columnar layout),
``decode_batches`` (the same for ``format=batches``: the log's own batches, checked by their
CRC32Cs) and ``to_record_batch``, which builds the source's Arrow batch without a Python
loop per record: fixed-size fields are gathered with numpy, bodies are cut out of the reply
by Arrow in C, and the hex IDs are formed with numpy. They are the numpy twins of
``nsqpy.protocol.logread``'s ``decode_columns``/``decode_batches``, and take every position
and field size from that module. Also owns the Arrow form of the output schema. Imports
the standard library, numpy, pyarrow and ``nsqpy.protocol``; never pyspark (Spark's types
live in ``nsqpy.spark.source``).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from nsqpy.protocol.logread import (
    EXT_FIELDS,
    EXT_SIZE,
    FLAGS,
    POSITION,
    RECORD_FIELDS,
    RECORD_SIZE,
    RECORD_TAIL,
    VALUE_COLUMNS,
    BadLogReply,
    batch_spans,
    columns_layout,
)
from nsqpy.protocol.message import OFFSET_BITS

# a record starts with its length (the bytes after that field)
_LENGTH = RECORD_FIELDS["length"]
_RECORD_LENGTH = struct.Struct("<" + _LENGTH[1])
_UNCOUNTED = RECORD_SIZE - RECORD_TAIL  # the length field does not count itself

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
_EXT_HEAD = np.arange(EXT_SIZE)
_LENGTH_BYTES = np.arange(_LENGTH[0], _LENGTH[0] + _RECORD_LENGTH.size)

__all__ = [
    "ARROW_SCHEMA",
    "HEADERS_TYPE",
    "BadLogReply",
    "Chunk",
    "decode_batches",
    "decode_chunk",
    "hex_ids",
    "to_record_batch",
]


def _dtype(code: str) -> np.dtype[Any]:
    """The little-endian numpy type of a struct code of ``nsqpy.protocol.logread``."""
    return np.dtype("<" + code)


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
    lay = columns_layout(data)
    n = lay.count
    buf = memoryview(data)

    def column(at: int, code: str, count: int) -> np.ndarray:
        return np.frombuffer(buf, dtype=_dtype(code), count=count, offset=at)

    offsets, timestamps, deliver_at, trace_ids = (
        column(lay.values[name], code, n) for name, code in VALUE_COLUMNS
    )
    header_pos, body_pos = (
        column(lay.positions[name], POSITION, n + 1) for name in ("headers", "body")
    )
    flags = column(lay.flags, FLAGS, n)
    if not all(
        p[0] == 0 and bool(np.all(p[1:] >= p[:-1])) and int(p[-1]) < 1 << 31
        for p in (column(lay.positions["key"], POSITION, n + 1), header_pos, body_pos)
    ):
        raise BadLogReply(f"log reply positions do not match its {len(data)} bytes")
    return Chunk(
        n,
        offsets,
        timestamps,
        deliver_at,
        trace_ids,
        flags,
        _binary(n, header_pos, buf[lay.data["headers"] : lay.data["body"]]),
        _binary(n, body_pos, buf[lay.data["body"] : lay.end]),
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
    """Every batch of a reply (checked by ``batch_spans``), with its stride."""
    out: list[_Span] = []
    for start, end, n, base in batch_spans(data):
        stride = _RECORD_LENGTH.unpack_from(data, start)[0] + _UNCOUNTED
        out.append(_Span(start, end, n, base, stride if stride * n == end - start else 0))
    return out


def _positions(data: bytes, raw: np.ndarray, span: _Span) -> np.ndarray:
    """Where each record of ``span`` begins: strided when they are all the same length,
    else found by following the lengths. BadLogReply unless they tile the batch."""
    if span.stride:
        pos = np.arange(span.start, span.end, span.stride, dtype=np.int64)
        lengths = _field(raw[pos[:, None] + _LENGTH_BYTES], (0, _LENGTH[1]))
        if bool(np.all(lengths == span.stride - _UNCOUNTED)):
            return pos
    out = []
    p = span.start
    for _ in range(span.n):
        if p + _UNCOUNTED > span.end:
            break
        out.append(p)
        p += _UNCOUNTED + _RECORD_LENGTH.unpack_from(data, p)[0]
    if p != span.end or len(out) != span.n:
        raise BadLogReply("log reply batch records do not fill their batch")
    return np.array(out, dtype=np.int64)


def _fixed_fields(data: bytes, raw: np.ndarray, spans: list[_Span]) -> tuple[np.ndarray, Any]:
    """(n x stride array of whole records, None) when every record of the reply has the
    same length; else (n x RECORD_SIZE array of their fixed fields, their positions)."""
    strides = {span.stride for span in spans}
    if len(strides) == 1 and 0 not in strides:
        stride = strides.pop()
        parts = [raw[span.start : span.end] for span in spans]
        whole = (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(-1, stride)
        if bool(np.all(_field(whole, _LENGTH) == stride - _UNCOUNTED)):
            return whole, None
    pos = np.concatenate([_positions(data, raw, span) for span in spans])
    return raw[pos[:, None] + _FIXED], pos


def _empty_chunk() -> Chunk:
    empty = np.zeros(0, dtype=np.int64)
    binary = pa.array([], pa.binary())
    return Chunk(0, empty.view("<u8"), empty, empty, empty.view("<u8"), empty, binary, binary)


def _field(fixed: np.ndarray, field: tuple[int, str]) -> np.ndarray:
    """One field (position, struct code) of every row of ``fixed``, as a numpy column."""
    at, code = field
    dtype = _dtype(code)
    return fixed[:, at : at + dtype.itemsize].copy().view(dtype).ravel()


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
    # a record's fixed fields (RECORD_FIELDS): the first RECORD_SIZE columns of ``fixed``
    fixed, pos = _fixed_fields(data, raw, spans)
    n = len(fixed)
    lengths = _field(fixed, _LENGTH).astype(np.int64)
    ext = _field(fixed, RECORD_FIELDS["ext_length"]).astype(np.int64)
    offsets = _field(fixed, RECORD_FIELDS["offset"])
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
        bodies = _pick(data, pos + RECORD_SIZE + ext, pos + _UNCOUNTED + lengths)
        has_ext = np.nonzero(ext)[0]
        if len(has_ext):
            trace_ids, headers = _extensions(data, raw, pos, ext, has_ext, n)
    return Chunk(
        n,
        offsets,
        _field(fixed, RECORD_FIELDS["timestamp"]),
        _field(fixed, RECORD_FIELDS["deliver_at"]),
        trace_ids,
        _field(fixed, RECORD_FIELDS["flags"]),
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
    at = pos[has] + RECORD_SIZE  # the extension's fields (EXT_FIELDS), key, headers
    if bool(np.any(ext[has] < EXT_SIZE)):
        raise BadLogReply("log reply has a record extension shorter than its fields")
    head = raw[at[:, None] + _EXT_HEAD]
    trace_ids = np.zeros(n, dtype=np.uint64)
    trace_ids[has] = _field(head, EXT_FIELDS["trace_id"])
    key_len = _field(head, EXT_FIELDS["key_length"]).astype(np.int64)
    starts, ends = at + EXT_SIZE + key_len, at + ext[has]
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
