"""Raw batches: whole on-disk batches handed out as bytes, and the reference parser for them.

Owns ``RawBatch``, what ``PartitionLog.read_raw`` returns for replication and the HTTP
log-read API: the bytes of consecutive whole batches exactly as the log stores them
(batch header, then records; layout in ``nsqpy.storage.log``), with the first offset and
the record count. The server only walks batch headers to cut this; the receiver parses
the records and checks the CRCs (``RawBatch.records`` is the reference implementation
and what tests use). Also ``check_raw``, the follower's check of such bytes before
``PartitionLog.append_raw`` takes them (two C calls per batch, no loop over records).
Imports only the standard library, ``crc32c`` and ``nsqpy.errors``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from nsqpy.errors import CorruptRecord
from nsqpy.storage.records import (
    BATCH,
    BATCH_CRC_FROM,
    BATCH_MAGIC,
    BATCH_SIZE,
    BatchHead,
    Record,
    StaleEpoch,
    decode_record,
    parse_batch_header,
    records_crc_ok,
    walk_batch,
)

# (position, end position, base offset, records, epoch, max timestamp) of a checked batch
RawInfo = tuple[int, int, int, int, int, int]


@dataclass(slots=True)
class RawBatch:
    """Consecutive whole batches of one segment, as stored.

    ``offset`` is the first record's offset (the offset asked for, or the next one that
    exists if records were missing), ``count`` the number of records and ``data`` their
    batches, each a 40-byte header and its records. Empty (count 0, data b"") at the end.
    """

    offset: int
    count: int
    data: bytes

    @property
    def next_offset(self) -> int:
        return self.offset + self.count

    def batches(self) -> Iterator[tuple[BatchHead, int]]:
        """(header, position of its records in ``data``) for each batch; headers checked."""
        data = self.data
        pos = 0
        while pos < len(data):
            head = parse_batch_header(data, pos)
            if head is None:
                raise CorruptRecord(f"raw batch: bad batch header at byte {pos}")
            yield head, pos + BATCH_SIZE
            pos += BATCH_SIZE + head.length
        if pos != len(data):
            raise CorruptRecord(f"raw batch: last batch runs {pos - len(data)} bytes past the data")

    def records(self, check: bool = True) -> list[Record]:
        """Every record, with its batch's epoch; with ``check`` every CRC is verified:
        header CRCs, each batch's records CRC, each record's own CRC and its offset."""
        out: list[Record] = []
        expect = self.offset
        for head, at in self.batches():
            if head.base != expect:
                raise CorruptRecord(f"raw batch: batch starts at {head.base}, expected {expect}")
            if check:
                if not records_crc_ok(self.data, at, head.length, head.records_crc):
                    raise CorruptRecord(f"raw batch: batch at offset {head.base} failed its CRC32C")
                walk_batch(self.data, at, head, check_crcs=True)
            pos = at
            for _ in range(head.n_records):
                rec, pos = decode_record(self.data, pos, head.epoch)
                out.append(rec)
            expect = head.base + head.n_records
        if expect != self.offset + self.count:
            raise CorruptRecord(
                f"raw batch: holds {expect - self.offset} records, says {self.count}"
            )
        return out


def check_raw(data: bytes, start_offset: int, last_epoch: int) -> list[RawInfo]:
    """Each whole batch of ``data`` (what ``read_raw`` hands out) as ``RawInfo``, checked:
    its header (magic, CRC32C), its records CRC32C (one C call over the batch's records),
    that it holds records, that offsets chain from ``start_offset`` with no jump, and that
    epochs never go below ``last_epoch`` nor back along ``data``.

    Raises CorruptRecord naming the byte position and offset, or StaleEpoch. The records'
    own structure is not walked: the records CRC vouches for the bytes the leader wrote.
    """
    out: list[RawInfo] = []
    size = len(data)
    pos = 0
    expect = start_offset
    unpack = BATCH.unpack_from
    with memoryview(data) as view:
        while pos < size:
            if pos + BATCH_SIZE > size:
                raise CorruptRecord(
                    f"raw data: {size - pos} stray bytes at byte {pos} (offset {expect})"
                )
            magic, hcrc, base, epoch, n, length, rcrc, max_ts = unpack(data, pos)
            if (
                magic != BATCH_MAGIC
                or crc32c(view[pos + BATCH_CRC_FROM : pos + BATCH_SIZE]) != hcrc
            ):
                raise CorruptRecord(f"raw data: bad batch header at byte {pos} (offset {expect})")
            if base != expect or not n:
                raise CorruptRecord(
                    f"raw data: batch at byte {pos} has base {base} count {n}, expected {expect}"
                )
            end = pos + BATCH_SIZE + length
            if end > size:
                raise CorruptRecord(f"raw data: batch at offset {base} runs past the data")
            if crc32c(view[pos + BATCH_SIZE : end]) != rcrc:
                raise CorruptRecord(f"raw data: batch at offset {base} failed its CRC32C check")
            if epoch < last_epoch:
                raise StaleEpoch(epoch, last_epoch, base)
            out.append((pos, end, base, n, epoch, max_ts))
            last_epoch = epoch
            expect = base + n
            pos = end
    return out
