"""Raw batches: whole on-disk batches handed out as bytes, and the reference parser for them.

Owns ``RawBatch``, what ``PartitionLog.read_raw`` returns for replication and the HTTP
log-read API: the bytes of consecutive whole batches exactly as the log stores them
(batch header, then records; layout in ``nsqpy.storage.log``), with the first offset and
the record count. The server only walks batch headers to cut this; the receiver parses
the records and checks the CRCs (``RawBatch.records`` is the reference implementation
and what tests use). Imports only the standard library, ``crc32c`` and ``nsqpy.errors``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from nsqpy.errors import CorruptRecord
from nsqpy.storage.records import (
    BATCH_SIZE,
    BatchHead,
    Record,
    decode_record,
    parse_batch_header,
    records_crc_ok,
    walk_batch,
)


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
