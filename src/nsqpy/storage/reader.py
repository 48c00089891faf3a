"""Reading a partition log: read-ahead buffer, sequential cursor, seek by offset and time.

Owns the read path of ``PartitionLog``: one read buffer filled with ``os.pread`` in
chunks of at least ``READ_AHEAD`` bytes (whole batches), a cached position so a
sequential reader never searches the index again, and record parsing straight from the
buffer with ``struct.unpack_from`` and ``memoryview`` (CRC checked on every record). Runs
on the loop thread only. Imports only the standard library, ``crc32c`` and ``nsqpy.errors``.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right

from crc32c import crc32c

from nsqpy.errors import CorruptRecord
from nsqpy.storage.records import (
    BATCH_SIZE,
    RECORD,
    RECORD_SIZE,
    Frame,
    Record,
    decode_record,
    parse_batch_header,
)
from nsqpy.storage.segment import Segment

READ_AHEAD = 256 * 1024


class LogReader:
    """The read side of one log; shares the log's segment and base lists (mutated in place)."""

    def __init__(self, segments: list[Segment], bases: list[int], logger: logging.Logger) -> None:
        self._segments = segments
        self._bases = bases
        self._logger = logger
        self.segment: Segment | None = None  # the segment the buffer and cursor are on
        self._data = b""
        self._at = 0
        self._off = -1  # offset of the record at _pos (-1: no cached position)
        self._pos = 0
        self._bend = 0
        self._epoch = 0

    def forget(self) -> None:
        self.segment = None
        self._data = b""
        self._off = -1

    def _load(self, seg: Segment, pos: int, n: int) -> None:
        """Make sure bytes [pos, pos + n) of ``seg`` are in the buffer."""
        if self.segment is seg and self._at <= pos and pos + n <= self._at + len(self._data):
            return
        fd = seg.fd if seg.fd is not None else seg.open_fd()
        data = os.pread(fd, max(n, min(READ_AHEAD, seg.size - pos)), pos)
        if len(data) < n:
            self.forget()
            raise CorruptRecord(f"{seg.path}: only {len(data)} of {n} bytes at position {pos}")
        if self.segment is not seg:
            self._off = -1
        self.segment, self._data, self._at = seg, data, pos

    def _header(self, seg: Segment, pos: int) -> tuple[int, int, int, int]:
        self._load(seg, pos, BATCH_SIZE)
        head = parse_batch_header(self._data, pos - self._at)
        if head is None:
            self._logger.error("segment %s: bad batch header at position %d", seg.path, pos)
            raise CorruptRecord(f"{seg.path}: bad batch header at position {pos}")
        return head

    def _position(self, offset: int) -> tuple[Segment, int, int, int] | None:
        """(segment, record position, batch end, epoch) of ``offset`` or the next record."""
        if offset == self._off and self.segment is not None:
            return self.segment, self._pos, self._bend, self._epoch
        i = bisect_right(self._bases, offset) - 1
        seg = self._segments[max(i, 0)]
        if offset >= seg.end:
            if i + 1 >= len(self._segments):
                return None
            seg = self._segments[i + 1]
            self._logger.error("log: offsets %d..%d are missing; reading on from %d",
                               offset, seg.base - 1, seg.base)  # fmt: skip
            offset = seg.base
        _, pos = seg.locate(offset)
        while True:
            base, epoch, count, length = self._header(seg, pos)
            if offset < base + count:
                break
            pos += BATCH_SIZE + length
        bend = pos + BATCH_SIZE + length
        self._load(seg, pos, bend - pos)
        pos += BATCH_SIZE
        data, at, unpack = self._data, self._at, RECORD.unpack_from
        for _ in range(offset - base):
            pos += 4 + unpack(data, pos - at)[0]
        return seg, pos, bend, epoch

    def read(
        self, offset: int, max_count: int, max_bytes: int, frames: bool
    ) -> list[Frame] | list[Record]:
        """Records (or frames) from ``offset`` on, below the flushed end; at least one if any."""
        out: list = []  # type: ignore[type-arg]
        if max_count <= 0:
            return out
        st = self._position(offset)
        if st is None:
            return out
        seg, pos, bend, epoch = st
        left = max_count
        budget = max_bytes
        last = self._segments[-1]
        while left:
            if pos >= bend:
                if pos >= seg.size:
                    if seg is last:
                        break
                    seg = self._segments[bisect_right(self._bases, seg.base)]
                    pos = bend = 0
                    continue
                _, epoch, _, length = self._header(seg, pos)
                bend = pos + BATCH_SIZE + length
                self._load(seg, pos, bend - pos)
                pos += BATCH_SIZE
                continue
            self._load(seg, pos, bend - pos)
            if frames:
                p, left, budget = self._frames(out, pos - self._at, bend - self._at, left, budget)
            else:
                p, left, budget = self._records(
                    out, pos - self._at, bend - self._at, left, budget, epoch
                )
            pos = p + self._at
            if budget < 0:
                break
        if out:
            self._off = (out[-1][0] if frames else out[-1].offset) + 1
            self._pos, self._bend, self._epoch = pos, bend, epoch
        return out

    def _frames(
        self, out: list[Frame], p: int, e: int, left: int, budget: int
    ) -> tuple[int, int, int]:
        """Parse frames from the buffer between p and e; budget < 0 means the byte bound hit."""
        data = self._data
        mv = memoryview(data)
        unpack = RECORD.unpack_from
        append = out.append
        while p < e:
            rlen, crc, off, ts, da, fl, ext = unpack(data, p)
            if rlen > budget and out:
                return p, left, -1
            nxt = p + 4 + rlen
            if crc32c(mv[p + 8 : nxt]) != crc:
                raise self._corrupt(off)
            append((off, ts, da, fl, data[p + RECORD_SIZE + ext : nxt]))
            budget -= rlen
            p = nxt
            left -= 1
            if not left:
                break
        return p, left, budget

    def _records(
        self, out: list[Record], p: int, e: int, left: int, budget: int, epoch: int
    ) -> tuple[int, int, int]:
        data = self._data
        unpack = RECORD.unpack_from
        while p < e:
            rlen = unpack(data, p)[0]
            if rlen > budget and out:
                return p, left, -1
            try:
                rec, p = decode_record(data, p, epoch)
            except CorruptRecord:
                raise self._corrupt(unpack(data, p)[2]) from None
            out.append(rec)
            budget -= rlen
            left -= 1
            if not left:
                break
        return p, left, budget

    def _corrupt(self, offset: int) -> CorruptRecord:
        path = self.segment.path if self.segment is not None else "?"
        self._logger.error("segment %s: record %d failed its CRC32C check", path, offset)
        self.forget()
        return CorruptRecord(f"{path}: record {offset} failed its CRC32C check")

    def offset_for_timestamp(self, ts: int) -> int:
        for seg in self._segments:
            if seg.max_ts < ts or seg.end <= seg.base:
                continue
            off, _ = seg.locate_time(ts)
            while off < seg.end:
                got = self.read(off, 1024, 1 << 30, True)
                if not got:
                    break
                for frame in got:
                    if frame[1] >= ts:  # type: ignore[index]
                        return frame[0]  # type: ignore[index,no-any-return]
                off = got[-1][0] + 1  # type: ignore[index]
        return self._segments[-1].end
