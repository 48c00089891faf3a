"""Records and batches: the byte layout of the topic log and its encoders and parsers.

Owns the value types a producer hands in (``Entry``) and a reader gets back (``Record``),
the precompiled ``struct.Struct`` layouts of a batch and of a record, and the pure
functions that build a batch into one ``bytearray`` and parse records back out of a
buffer with ``memoryview``. The layout itself is documented in ``nsqpy.storage.log``.
Imports only the standard library, ``crc32c`` and ``nsqpy.errors``; no files here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

from nsqpy.errors import CorruptRecord, StorageError

BATCH_MAGIC = 0x3142514E  # b"NQB1" little-endian
# magic u32 | header crc u32 | base offset u64 | epoch u32 | count u32 | records length u32
BATCH = struct.Struct("<IIQIII")
BATCH_SIZE = BATCH.size  # 28
BATCH_CRC = struct.Struct("<I")
BATCH_CRC_FROM = 8  # the header CRC covers bytes [8, 28) of the header
# length u32 | crc u32 | offset u64 | timestamp u64 | deliver_at u64 | flags u16 | ext len u32
RECORD = struct.Struct("<IIQQQHI")
RECORD_SIZE = RECORD.size  # 38
RECORD_TAIL = RECORD_SIZE - 4  # bytes counted by the length field before the extension
RECORD_CRC_FROM = 8  # a record's CRC covers from its offset field to its end
RECORD_LENCRC = struct.Struct("<II")
# extension: trace id u64 | partition key length u16 | key | headers (rest)
EXT = struct.Struct("<QH")
EXT_SIZE = EXT.size
MAX_RECORD = 1 << 30
MAX_BATCH = (1 << 32) - 1


class OffsetOutOfRange(StorageError):
    """An offset below the log's low watermark was asked for (it was deleted by retention)."""

    def __init__(self, offset: int, low: int, high: int) -> None:
        super().__init__(f"offset {offset} out of range [{low}, {high})")
        self.offset = offset
        self.low = low
        self.high = high


@dataclass(slots=True)
class Entry:
    """What a producer hands to ``append``."""

    body: bytes
    timestamp: int = 0  # publish time ns; 0 = use the log's clock
    deliver_at: int = 0  # ns since epoch; 0 = immediate
    flags: int = 0
    trace_id: int = 0  # u64
    partition_key: bytes = b""
    headers: bytes = b""  # UTF-8 JSON object, b"" = none


@dataclass(slots=True, frozen=True)
class Record:
    """One record read back from a log."""

    offset: int
    timestamp: int
    deliver_at: int
    flags: int
    body: bytes
    trace_id: int = 0
    partition_key: bytes = b""
    headers: bytes = b""
    epoch: int = 0


# A frame is the broker's fast-path view of a record: no object, no extension decoding.
Frame = tuple[int, int, int, int, bytes]  # (offset, timestamp, deliver_at, flags, body)

_pack_batch = BATCH.pack_into
_pack_record = RECORD.pack_into
_pack_crc = BATCH_CRC.pack_into


def _seal_batch(buf: bytearray, base: int, epoch: int, count: int) -> None:
    _pack_batch(buf, 0, BATCH_MAGIC, 0, base, epoch, count, len(buf) - BATCH_SIZE)
    _pack_crc(buf, 4, crc32c(memoryview(buf)[BATCH_CRC_FROM:BATCH_SIZE]))


def reseal_batch(length: int, base: int, epoch: int, count: int) -> bytearray:
    """A fresh batch header for ``count`` records of ``length`` bytes (truncating a batch)."""
    head = bytearray(BATCH_SIZE)
    _pack_batch(head, 0, BATCH_MAGIC, 0, base, epoch, count, length)
    _pack_crc(head, 4, crc32c(memoryview(head)[BATCH_CRC_FROM:BATCH_SIZE]))
    return head


def encode_bodies(
    bodies: Sequence[bytes], base: int, epoch: int, timestamp: int, deliver_at: int
) -> bytearray:
    """One batch of plain records (no extension, flags 0) in one ``bytearray``."""
    n = len(bodies)
    total = BATCH_SIZE + n * RECORD_SIZE + sum(map(len, bodies))
    if total - BATCH_SIZE > MAX_BATCH:
        raise StorageError(f"batch of {total} bytes exceeds the limit of {MAX_BATCH}")
    buf = bytearray(total)
    mv = memoryview(buf)
    pos = BATCH_SIZE
    off = base
    pack = _pack_record
    pack_crc = _pack_crc
    for body in bodies:
        start = pos + RECORD_SIZE
        end = start + len(body)
        pack(buf, pos, end - pos - 4, 0, off, timestamp, deliver_at, 0, 0)
        buf[start:end] = body
        pack_crc(buf, pos + 4, crc32c(mv[pos + RECORD_CRC_FROM : end]))
        pos = end
        off += 1
    mv.release()
    _seal_batch(buf, base, epoch, n)
    return buf


def encode_entries(
    entries: Sequence[Entry], base: int, epoch: int, now: int
) -> tuple[bytearray, int]:
    """One batch of records with extensions; returns it and the batch's largest timestamp."""
    parts: list[bytes | bytearray] = []
    max_ts = 0
    off = base
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
        _pack_record(head, 0, length, 0, off, ts, e.deliver_at, e.flags, len(ext))
        crc = crc32c(e.body, crc32c(ext, crc32c(memoryview(head)[RECORD_CRC_FROM:])))
        _pack_crc(head, 4, crc)
        parts += (head, ext, e.body)
        off += 1
    buf = bytearray(BATCH_SIZE)
    buf += b"".join(parts)
    if len(buf) - BATCH_SIZE > MAX_BATCH:
        raise StorageError(f"batch of {len(buf)} bytes exceeds the limit of {MAX_BATCH}")
    _seal_batch(buf, base, epoch, len(entries))
    return buf, max_ts


def parse_batch_header(buf: Any, pos: int) -> tuple[int, int, int, int] | None:
    """(base offset, epoch, count, records length) of a valid header at ``pos``, else None."""
    if pos + BATCH_SIZE > len(buf):
        return None
    magic, hcrc, base, epoch, count, length = BATCH.unpack_from(buf, pos)
    if magic != BATCH_MAGIC:
        return None
    if crc32c(memoryview(buf)[pos + BATCH_CRC_FROM : pos + BATCH_SIZE]) != hcrc:
        return None
    return base, epoch, count, length


def check_batch(buf: Any, pos: int, base: int, count: int, length: int) -> int:
    """Verify every record of the batch whose records start at ``pos``; returns max timestamp.

    Raises CorruptRecord on a bad length, CRC or offset.
    """
    mv = memoryview(buf)
    end = pos + length
    if end > len(buf):
        raise CorruptRecord(f"batch at offset {base} runs past the end of the data")
    unpack = RECORD.unpack_from
    max_ts = 0
    off = base
    for _ in range(count):
        if pos + RECORD_SIZE > end:
            raise CorruptRecord(f"record {off}: header runs past its batch")
        rlen, crc, roff, ts, _da, _fl, _ext = unpack(buf, pos)
        nxt = pos + 4 + rlen
        if rlen < RECORD_TAIL or nxt > end:
            raise CorruptRecord(f"record {off}: bad length {rlen}")
        if crc32c(mv[pos + RECORD_CRC_FROM : nxt]) != crc:
            raise CorruptRecord(f"record {off}: CRC32C mismatch")
        if roff != off:
            raise CorruptRecord(f"record {off}: carries offset {roff}")
        if ts > max_ts:
            max_ts = ts
        pos = nxt
        off += 1
    if pos != end:
        raise CorruptRecord(f"batch at offset {base}: {end - pos} stray bytes after its records")
    return max_ts


def decode_record(buf: Any, pos: int, epoch: int) -> tuple[Record, int]:
    """The record at ``pos`` (CRC checked) and the position after it."""
    rlen, crc, off, ts, da, flags, ext_len = RECORD.unpack_from(buf, pos)
    end = pos + 4 + rlen
    mv = memoryview(buf)
    if crc32c(mv[pos + RECORD_CRC_FROM : end]) != crc:
        raise CorruptRecord(f"record {off}: CRC32C mismatch")
    start = pos + RECORD_SIZE
    if not ext_len:
        return Record(off, ts, da, flags, bytes(mv[start:end]), epoch=epoch), end
    trace_id, key_len = EXT.unpack_from(buf, start)
    key_at = start + EXT_SIZE
    body_at = start + ext_len
    key = bytes(mv[key_at : key_at + key_len])
    headers = bytes(mv[key_at + key_len : body_at])
    return Record(off, ts, da, flags, bytes(mv[body_at:end]), trace_id, key, headers, epoch), end
