"""Records and batches: the byte layout of the topic log, its value types and its parsers.

Owns the value types a producer hands in (``Entry``) and a reader gets back (``Record``,
``Frame``), the precompiled ``struct.Struct`` layouts of a batch header and of a record,
batch header sealing and checking, and the pure functions that walk and decode records
in a buffer with ``struct.unpack_from`` and ``memoryview``. Encoders live in
``nsqpy.storage.encode``; the layout itself is documented in ``nsqpy.storage.log``.
Imports only the standard library, ``crc32c`` and ``nsqpy.errors``; no files here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from crc32c import crc32c

from nsqpy.errors import CorruptRecord, StorageError

BATCH_MAGIC = 0x3242514E  # b"NQB2" little-endian: log format 2
BATCH_MAGIC_V1 = 0x3142514E  # b"NQB1": format 1 (28-byte header), refused on open
# magic u32 | header crc u32 | base offset u64 | epoch u32 | count u32 | records length u32
# | records crc u32 | max timestamp u64
BATCH = struct.Struct("<IIQIIIIQ")
BATCH_SIZE = BATCH.size  # 40
BATCH_CRC_FROM = 8  # the header CRC covers bytes [8, 40) of the header
# length u32 | crc u32 | offset u64 | timestamp u64 | deliver_at u64 | flags u16 | ext len u32
RECORD = struct.Struct("<IIQQQHI")
RECORD_SIZE = RECORD.size  # 38
RECORD_TAIL = RECORD_SIZE - 4  # bytes counted by the length field before the extension
RECORD_CRC_FROM = 8  # a record's CRC covers from its offset field to its end
# extension: trace id u64 | partition key length u16 | key | headers (rest)
EXT = struct.Struct("<QH")
EXT_SIZE = EXT.size
MAX_RECORD = 1 << 30
MAX_BATCH = (1 << 32) - 1

_pack_batch = BATCH.pack_into
_pack_u32 = struct.Struct("<I").pack_into
_unpack_batch = BATCH.unpack_from
_unpack_record = RECORD.unpack_from


class OffsetOutOfRange(StorageError):
    """An offset below the log's low watermark was asked for (it was deleted by retention)."""

    def __init__(self, offset: int, low: int, high: int) -> None:
        super().__init__(f"offset {offset} out of range [{low}, {high})")
        self.offset = offset
        self.low = low
        self.high = high


class OffsetMismatch(StorageError):
    """Replicated batches were offered at an offset that is not the log's end (a follower
    appends only at its own end: ``PartitionLog.append_raw``)."""

    def __init__(self, offset: int, end: int) -> None:
        super().__init__(f"batches offered at offset {offset}, but the log ends at {end}")
        self.offset = offset
        self.end = end


class StaleEpoch(StorageError):
    """A replicated batch carries an epoch below the log's last epoch (epochs never go
    back: the log's tail diverges from the leader's and must be truncated first)."""

    def __init__(self, epoch: int, last_epoch: int, offset: int) -> None:
        super().__init__(
            f"batch at offset {offset} is in epoch {epoch}, below the log's last epoch {last_epoch}"
        )
        self.epoch = epoch
        self.last_epoch = last_epoch
        self.offset = offset


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


class Record(NamedTuple):
    """One record read back from a log (an immutable named tuple: cheap to build in bulk)."""

    offset: int
    timestamp: int
    deliver_at: int
    flags: int
    body: bytes
    trace_id: int = 0
    partition_key: bytes = b""
    headers: bytes = b""
    epoch: int = 0


# A frame is the broker's fast-path view of a record: no object, no extension decoding:
# (offset, timestamp, deliver_at, flags, body, extension bytes as stored: b"" when none).
Frame = tuple[int, int, int, int, bytes, bytes]


def extension_bytes(trace_id: int, partition_key: bytes, headers: bytes) -> bytes:
    """A record's extension as stored (b"" when it has none)."""
    if not (trace_id or partition_key or headers):
        return b""
    return EXT.pack(trace_id, len(partition_key)) + partition_key + headers


def parse_extension(ext: bytes) -> tuple[int, bytes, bytes]:
    """(trace id, partition key, headers) of a stored extension (zero and empty for b"")."""
    if not ext:
        return 0, b"", b""
    trace_id, key_len = EXT.unpack_from(ext, 0)
    return trace_id, ext[EXT_SIZE : EXT_SIZE + key_len], ext[EXT_SIZE + key_len :]


_new_record = tuple.__new__


def seal_batch(
    buf: bytearray | memoryview,
    at: int,
    base: int,
    epoch: int,
    count: int,
    length: int,
    records_crc: int,
    max_ts: int,
) -> None:
    """Write a batch header (header CRC included) into ``buf`` at ``at``."""
    _pack_batch(buf, at, BATCH_MAGIC, 0, base, epoch, count, length, records_crc, max_ts)
    with memoryview(buf) as view:
        _pack_u32(buf, at + 4, crc32c(view[at + BATCH_CRC_FROM : at + BATCH_SIZE]))


def batch_header(
    base: int, epoch: int, count: int, length: int, records_crc: int, max_ts: int
) -> bytearray:
    """A fresh batch header as its own buffer."""
    if length > MAX_BATCH:
        raise StorageError(f"batch of {length} bytes exceeds the limit of {MAX_BATCH}")
    head = bytearray(BATCH_SIZE)
    seal_batch(head, 0, base, epoch, count, length, records_crc, max_ts)
    return head


class BatchHead(NamedTuple):
    """A batch header, checked."""

    base: int
    epoch: int
    n_records: int
    length: int  # bytes of records after the header
    records_crc: int
    max_ts: int


def parse_batch_header(buf: Any, pos: int) -> BatchHead | None:
    """The header at ``pos`` if it is whole, has the format-2 magic and its CRC holds."""
    if pos + BATCH_SIZE > len(buf):
        return None
    magic, hcrc, base, epoch, count, length, rcrc, max_ts = _unpack_batch(buf, pos)
    if magic != BATCH_MAGIC:
        return None
    mv = memoryview(buf)
    ok = crc32c(mv[pos + BATCH_CRC_FROM : pos + BATCH_SIZE]) == hcrc
    mv.release()
    if not ok:
        return None
    return BatchHead(base, epoch, count, length, rcrc, max_ts)


def records_crc_ok(buf: Any, pos: int, length: int, expect: int) -> bool:
    """Whether the ``length`` record bytes at ``pos`` have the CRC32C ``expect``."""
    mv = memoryview(buf)
    ok = crc32c(mv[pos : pos + length]) == expect
    mv.release()
    return ok


def walk_batch(buf: Any, pos: int, head: BatchHead, check_crcs: bool = False) -> int:
    """Check the record structure of a batch whose records start at ``pos``; max timestamp.

    Lengths must chain exactly to the batch end and offsets must run from the base. With
    ``check_crcs`` every record's own CRC32C is checked too. Raises CorruptRecord.
    """
    base, count, length = head.base, head.n_records, head.length
    end = pos + length
    if end > len(buf):
        raise CorruptRecord(f"batch at offset {base} runs past the end of the data")
    mv = memoryview(buf)
    max_ts = 0
    off = base
    try:
        for _ in range(count):
            if pos + RECORD_SIZE > end:
                raise CorruptRecord(f"record {off}: header runs past its batch")
            rlen, crc, roff, ts, _da, _fl, ext = _unpack_record(buf, pos)
            nxt = pos + 4 + rlen
            if rlen < RECORD_TAIL + ext or nxt > end:
                raise CorruptRecord(f"record {off}: bad length {rlen}")
            if roff != off:
                raise CorruptRecord(f"record {off}: carries offset {roff}")
            if check_crcs and crc32c(mv[pos + RECORD_CRC_FROM : nxt]) != crc:
                raise CorruptRecord(f"record {off}: CRC32C mismatch")
            if ts > max_ts:
                max_ts = ts
            pos = nxt
            off += 1
    finally:
        mv.release()
    if pos != end:
        raise CorruptRecord(f"batch at offset {base}: {end - pos} stray bytes after its records")
    return max_ts


def scan_records(buf: Any, pos: int, n: int) -> tuple[int, int]:
    """(position after the ``n`` records at ``pos``, their max timestamp); no checks."""
    max_ts = 0
    for _ in range(n):
        rlen, _crc, _off, ts, _da, _fl, _ext = _unpack_record(buf, pos)
        if ts > max_ts:
            max_ts = ts
        pos += 4 + rlen
    return pos, max_ts


def decode_record(buf: Any, pos: int, epoch: int) -> tuple[Record, int]:
    """The record at ``pos`` (its batch already verified) and the position after it."""
    rlen, _crc, off, ts, da, flags, ext_len = _unpack_record(buf, pos)
    end = pos + 4 + rlen
    start = pos + RECORD_SIZE
    if not ext_len:
        body = bytes(buf[start:end])
        return _new_record(Record, (off, ts, da, flags, body, 0, b"", b"", epoch)), end
    trace_id, key_len = EXT.unpack_from(buf, start)
    key_at = start + EXT_SIZE
    body_at = start + ext_len
    key = bytes(buf[key_at : key_at + key_len])
    headers = bytes(buf[key_at + key_len : body_at])
    rec = (off, ts, da, flags, bytes(buf[body_at:end]), trace_id, key, headers, epoch)
    return _new_record(Record, rec), end
