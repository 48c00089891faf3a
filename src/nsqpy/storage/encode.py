"""Batch encoders: turn bodies or entries into the bytes of one on-disk batch.

Owns the append-side encoding of the topic log: ``encode_bodies`` (the PUB/MPUB/DPUB
fast path: plain records sharing one timestamp) and ``encode_entries`` (records with
flags, trace ids, partition keys and headers). The layout is in ``nsqpy.storage.log``.

Speed notes (measured; see bench/storage.py). A record's CRC32C is one C call, but
everything around it is batched so that no Python bytecode runs per record: values are
laid into argument lists by slice assignment, packed by one precompiled ``struct.Struct``
per batch shape, and split back into per-record byte strings by another. Batches whose
bodies all have one length (the common MPUB case) use a cached shape (count, length);
other batches pack their headers with structs cached by count and join them with the
bodies; a single record (PUB) and two or three are packed directly. Imports only the standard library, ``crc32c`` and
``nsqpy.errors``; no files here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import add
from typing import NamedTuple

from crc32c import crc32c

from nsqpy.errors import StorageError
from nsqpy.storage.records import (
    BATCH,
    BATCH_CRC_FROM,
    BATCH_MAGIC,
    BATCH_SIZE,
    EXT,
    MAX_BATCH,
    MAX_RECORD,
    RECORD,
    RECORD_CRC_FROM,
    RECORD_SIZE,
    RECORD_TAIL,
    Entry,
    batch_header,
    seal_batch,
)

try:  # the C encoder of the same bytes; optional (built when a C compiler was there)
    from nsqpy.storage import _speedups
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _speedups = None  # type: ignore[assignment]

Buf = bytes | bytearray
Body = bytes | bytearray | memoryview  # a message body as the log takes it: any bytes-like buffer
UNIFORM_MIN = 4  # below this many records a cached shape is not worth a struct
UNIFORM_MAX = 512  # above this many a shape's structs would hold too much memory
SMALL_MAX = 4  # below this many records (of mixed sizes) a plain loop is quickest
SHAPES_MAX = 16  # cached batch shapes (count, body length): < 0.5 MB each
# offset u64 | timestamp u64 | deliver_at u64 | flags u16 | ext len u32: what the CRC starts on
_TAIL = struct.Struct("<QQQHI")
_SAME = struct.Struct("<QQHI")  # timestamp, deliver_at, flags, ext len: alike in a batch
_LENCRC = struct.Struct("<II")
_CRC = struct.Struct("<I")
_pack_u32 = _CRC.pack_into
_ONE = struct.Struct(BATCH.format + RECORD.format[1:])  # a batch header and a record header
_RECORDS_CRC_AT = 28  # where the records CRC sits in a batch header


class _Shape(NamedTuple):
    """Precompiled structs for a batch of ``count`` plain records of one body length."""

    covered: struct.Struct  # count * (offset, the rest of the header, body): what CRCs cover
    split: struct.Struct  # cuts ``covered`` into one bytes object per record
    records: struct.Struct  # count * (length, crc, covered bytes): the records
    covered_args: list[object]  # argument template for ``covered`` (3 per record)
    records_args: list[object]  # argument template for ``records`` (3 per record)


_shapes: dict[tuple[int, int], _Shape] = {}


def _shape(count: int, size: int) -> _Shape:
    shape = _shapes.get((count, size))
    if shape is None:
        if len(_shapes) >= SHAPES_MAX:
            _shapes.clear()
        covered_size = RECORD_TAIL - 4 + size
        shape = _Shape(
            struct.Struct("<" + f"Q{_SAME.size}s{size}s" * count),
            struct.Struct(f"{covered_size}s" * count),
            struct.Struct("<" + f"II{covered_size}s" * count),
            [0, b"", b""] * count,
            [covered_size + 4, 0, b""] * count,
        )
        _shapes[(count, size)] = shape
    return shape


def encode_bodies(
    bodies: Sequence[Body], base: int, epoch: int, timestamp: int, deliver_at: int
) -> list[Buf]:
    """One batch of plain records (no extension, flags 0): its bytes as one or two buffers.

    Uses the C encoder when it is built (``speedups``), else the Python one below; both
    give the same bytes.
    """
    if _speedups is not None and speedups:
        return [_encode_plain_c(bodies, base, epoch, timestamp, deliver_at)]
    return encode_bodies_py(bodies, base, epoch, timestamp, deliver_at)


speedups = True  # tests and benchmarks turn the C encoder off to compare the two


def _encode_plain_c(bodies: Sequence[Body], base: int, epoch: int, ts: int, da: int) -> bytes:
    try:
        return _speedups.encode_plain(bodies, base, epoch, ts, da)
    except OverflowError as exc:
        raise StorageError(f"batch at offset {base}: a field is out of range: {exc}") from None
    except ValueError as exc:  # over a size limit: let the Python encoder say which
        encode_bodies_py(bodies, base, epoch, ts, da)
        raise StorageError(f"batch at offset {base}: {exc}") from None


def encode_bodies_py(
    bodies: Sequence[Body], base: int, epoch: int, timestamp: int, deliver_at: int
) -> list[Buf]:
    """The pure-Python encoder of ``encode_bodies`` (the reference for the C one)."""
    n = len(bodies)
    if n == 1:
        return [_encode_one(bodies[0], base, epoch, timestamp, deliver_at)]
    lens = list(map(len, bodies))
    size = lens[0]
    fits = size + RECORD_TAIL <= MAX_RECORD and n * (size + RECORD_SIZE) <= MAX_BATCH
    if UNIFORM_MIN <= n <= UNIFORM_MAX and fits and lens.count(size) == n:
        try:
            return _encode_uniform(bodies, n, size, base, epoch, timestamp, deliver_at)
        except struct.error:  # a body struct's "s" refuses (a memoryview): the other road
            pass
    biggest = max(lens)
    if biggest + RECORD_TAIL > MAX_RECORD:
        raise StorageError(
            f"record of {biggest + RECORD_TAIL} bytes exceeds the limit of {MAX_RECORD}"
        )
    total = sum(lens) + n * RECORD_SIZE
    if total > MAX_BATCH:
        raise StorageError(f"batch of {total} bytes exceeds the limit of {MAX_BATCH}")
    if n < SMALL_MAX:
        return [_encode_small(bodies, n, total, base, epoch, timestamp, deliver_at)]
    return _encode_any(bodies, n, base, epoch, timestamp, deliver_at)


def _encode_uniform(
    bodies: Sequence[Body], n: int, size: int, base: int, epoch: int, ts: int, da: int
) -> list[Buf]:
    shape = _shape(n, size)
    a = shape.covered_args.copy()
    a[0::3] = range(base, base + n)
    a[1::3] = [_SAME.pack(ts, da, 0, 0)] * n
    a[2::3] = bodies
    covered = shape.split.unpack(shape.covered.pack(*a))
    r = shape.records_args.copy()
    r[1::3] = list(map(crc32c, covered))
    r[2::3] = covered
    records = shape.records.pack(*r)
    return [batch_header(base, epoch, n, len(records), crc32c(records), ts), records]


def _encode_one(body: Body, base: int, epoch: int, ts: int, da: int) -> bytearray:
    """A batch of one record (a PUB): one pack for both headers, then the three CRCs."""
    size = len(body)
    if size + RECORD_TAIL > MAX_RECORD:
        raise StorageError(
            f"record of {size + RECORD_TAIL} bytes exceeds the limit of {MAX_RECORD}"
        )
    end = BATCH_SIZE + RECORD_SIZE + size
    buf = bytearray(end)
    _ONE.pack_into(buf, 0, BATCH_MAGIC, 0, base, epoch, 1, end - BATCH_SIZE, 0, ts,
                   end - BATCH_SIZE - 4, 0, base, ts, da, 0, 0)  # fmt: skip
    buf[BATCH_SIZE + RECORD_SIZE :] = body
    with memoryview(buf) as view:
        _pack_u32(buf, BATCH_SIZE + 4, crc32c(view[BATCH_SIZE + RECORD_CRC_FROM :]))
        _pack_u32(buf, _RECORDS_CRC_AT, crc32c(view[BATCH_SIZE:]))
        _pack_u32(buf, 4, crc32c(view[BATCH_CRC_FROM:BATCH_SIZE]))
    return buf


def _encode_small(
    bodies: Sequence[Body], n: int, total: int, base: int, epoch: int, ts: int, da: int
) -> bytearray:
    """A few records, one at a time into one buffer (no per-batch set-up to amortise)."""
    buf = bytearray(BATCH_SIZE + total)
    view = memoryview(buf)
    pos = BATCH_SIZE
    pack = RECORD.pack_into
    pack_crc = _CRC.pack_into
    for off, body in zip(range(base, base + n), bodies, strict=True):
        start = pos + RECORD_SIZE
        end = start + len(body)
        pack(buf, pos, end - pos - 4, 0, off, ts, da, 0, 0)
        buf[start:end] = body
        pack_crc(buf, pos + 4, crc32c(view[pos + RECORD_CRC_FROM : end]))
        pos = end
    records_crc = crc32c(view[BATCH_SIZE:])
    view.release()
    seal_batch(buf, 0, base, epoch, n, total, records_crc, ts)
    return buf


class _Plain(NamedTuple):
    """Precompiled structs for ``count`` plain records of any sizes."""

    tails: struct.Struct  # count * (offset, the rest of the header)
    tails_split: struct.Struct  # cuts them apart
    heads: struct.Struct  # count * (length, crc)
    heads_split: struct.Struct  # cuts them apart


_plains: dict[int, _Plain] = {}


def _plain(count: int) -> _Plain:
    plain = _plains.get(count)
    if plain is None:
        if len(_plains) >= SHAPES_MAX:
            _plains.clear()
        plain = _plains[count] = _Plain(
            struct.Struct("<" + f"Q{_SAME.size}s" * count),
            struct.Struct(f"{RECORD_TAIL - 4}s" * count),
            struct.Struct("<" + "II" * count),
            struct.Struct("8s" * count),
        )
    return plain


def _encode_any(
    bodies: Sequence[Body], n: int, base: int, epoch: int, ts: int, da: int
) -> list[Buf]:
    plain = _plain(n) if n <= UNIFORM_MAX else None  # no struct of thousands of fields
    if plain is not None:
        a: list[object] = [0, _SAME.pack(ts, da, 0, 0)] * n
        a[0::2] = range(base, base + n)
        tails: Iterable[bytes] = plain.tails_split.unpack(plain.tails.pack(*a))
    else:
        tails = map(_TAIL.pack, range(base, base + n), repeat(ts, n), repeat(da, n),
                    repeat(0, n), repeat(0, n))  # fmt: skip
    covered = list(map(add, tails, bodies))
    h: list[int] = [0, 0] * n
    h[0::2] = map(add, map(len, covered), repeat(4))
    h[1::2] = list(map(crc32c, covered))
    parts: list[bytes] = [b""] * (2 * n)
    if plain is not None:
        parts[0::2] = plain.heads_split.unpack(plain.heads.pack(*h))
    else:
        parts[0::2] = list(map(_LENCRC.pack, h[0::2], h[1::2]))
    parts[1::2] = covered
    records = b"".join(parts)
    return [batch_header(base, epoch, n, len(records), crc32c(records), ts), records]


def encode_entries(
    entries: Sequence[Entry], base: int, epoch: int, now: int
) -> tuple[list[Buf], int]:
    """One batch of records with extensions; returns its buffers and its largest timestamp."""
    parts: list[Buf] = []
    max_ts = 0
    off = base
    try:
        for e in entries:
            ts = e.timestamp or now
            if ts > max_ts:
                max_ts = ts
            ext = b""
            if e.trace_id or e.partition_key or e.headers:
                if len(e.partition_key) > 0xFFFF:
                    raise StorageError(f"partition key of {len(e.partition_key)} bytes > 65535")
                ext = EXT.pack(e.trace_id, len(e.partition_key)) + e.partition_key + e.headers
            length = RECORD_TAIL + len(ext) + len(e.body)
            if length > MAX_RECORD:
                raise StorageError(f"record of {length} bytes exceeds the limit of {MAX_RECORD}")
            head = bytearray(RECORD_SIZE)
            RECORD.pack_into(head, 0, length, 0, off, ts, e.deliver_at, e.flags, len(ext))
            crc = crc32c(e.body, crc32c(ext, crc32c(memoryview(head)[RECORD_CRC_FROM:])))
            _CRC.pack_into(head, 4, crc)
            parts += (head, ext, e.body)
            off += 1
    except struct.error as exc:  # a flag, timestamp or trace id out of its field's range
        raise StorageError(f"record {off}: a field is out of range: {exc}") from None
    records = b"".join(parts)
    header = batch_header(base, epoch, len(entries), len(records), crc32c(records), max_ts)
    return [header, records], max_ts
