"""Reading a partition log: read-ahead buffer, sequential cursor, raw batches, seeks.

Owns the read path of ``PartitionLog``: one read buffer filled with ``os.pread`` in
chunks of at least ``READ_AHEAD`` bytes (whole batches), a cached position so a
sequential reader never searches the index again, record parsing straight from the
buffer with ``struct.unpack_from`` (a whole batch of same-size plain records with one
cached ``struct.Struct``, any other record by record), and ``read_raw``, which hands out whole batches as
they are on disk after walking only their headers. Every batch's records CRC32C is
checked once per load into the buffer before any of its records is returned (it covers
every record byte, so the per-record CRCs are left to end-to-end checkers); ``read_raw``
checks it when asked. Runs on the loop thread only. Imports only the standard library,
``crc32c`` and ``nsqpy.errors``.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from itertools import repeat
from typing import Any

from crc32c import crc32c

from nsqpy.errors import CorruptRecord
from nsqpy.storage.raw import RawBatch
from nsqpy.storage.records import (
    BATCH,
    BATCH_CRC_FROM,
    BATCH_MAGIC,
    BATCH_SIZE,
    EXT,
    EXT_SIZE,
    RECORD,
    RECORD_SIZE,
    RECORD_TAIL,
    BatchHead,
    Frame,
    Record,
    batch_header,
    parse_batch_header,
    records_crc_ok,
    scan_records,
)
from nsqpy.storage.segment import Segment

READ_AHEAD = 256 * 1024
BULK_MIN = 8  # whole batches of at least this many same-size plain records parse in bulk
BULK_MAX = 512  # and at most this many (a shape's struct grows with the count)
_SHAPES_MAX = 16
_new = tuple.__new__
_U32 = struct.Struct("<I")
_shapes: dict[tuple[int, int], struct.Struct] = {}


def _bulk(out: list[Any], data: bytes, p: int, head: BatchHead, frames: bool) -> bool:
    """Parse a whole batch of same-size records without extensions with one ``unpack``.

    Returns False (having added nothing) for any other batch: those go record by record.
    """
    n = head.n_records
    rlen = _U32.unpack_from(data, p)[0]
    if not BULK_MIN <= n <= BULK_MAX or head.length != n * (rlen + 4) or rlen < RECORD_TAIL:
        return False
    shape = _shapes.get((n, rlen))
    if shape is None:
        if len(_shapes) >= _SHAPES_MAX:
            _shapes.clear()
        shape = _shapes[(n, rlen)] = struct.Struct("<" + f"IIQQQHI{rlen - RECORD_TAIL}s" * n)
    flat = shape.unpack_from(data, p)
    if flat[0::8].count(rlen) != n or flat[6::8].count(0) != n:
        return False
    offs, tss, das, fls, bodies = flat[2::8], flat[3::8], flat[4::8], flat[5::8], flat[7::8]
    if frames:
        out += zip(offs, tss, das, fls, bodies, repeat(b"", n), strict=True)
    else:
        nothing = b""
        fields = zip(offs, tss, das, fls, bodies, repeat(0, n), repeat(nothing, n),
                     repeat(nothing, n), repeat(head.epoch, n), strict=True)  # fmt: skip
        out += map(_new, repeat(Record, n), fields)
    return True


class LogReader:
    """The read side of one log; shares the log's segment and base lists (mutated in place)."""

    def __init__(self, segments: list[Segment], bases: list[int], logger: logging.Logger) -> None:
        self._segments = segments
        self._bases = bases
        self._logger = logger
        self.segment: Segment | None = None  # the segment the buffer is on
        self._data = b""
        self._at = 0
        self._checked: set[int] = set()  # batch positions whose records CRC held in _data
        # sequential cursor: offset -> (segment, record pos, batch pos, batch end, head)
        self._cursor: tuple[int, Segment, int, int, int, BatchHead] | None = None
        self._raw_cursor: tuple[int, Segment, int] | None = None  # offset, segment, batch pos

    def forget(self) -> None:
        self.segment = None
        self._data = b""
        self._checked = set()
        self._cursor = None
        self._raw_cursor = None

    def dropped(self, seg: Segment) -> None:
        """``seg`` was deleted: let go of anything that points into it."""
        cur, raw = self._cursor, self._raw_cursor
        if self.segment is seg or (cur and cur[1] is seg) or (raw and raw[1] is seg):
            self.forget()

    # -- buffer --------------------------------------------------------------------------

    def _load(self, seg: Segment, pos: int, n: int) -> None:
        """Make sure bytes [pos, pos + n) of ``seg`` are in the buffer."""
        if self.segment is seg and self._at <= pos and pos + n <= self._at + len(self._data):
            return
        fd = seg.open_fd()
        data = os.pread(fd, max(n, min(READ_AHEAD, seg.size - pos)), pos)
        if len(data) < n:
            self.forget()
            raise CorruptRecord(f"{seg.path}: only {len(data)} of {n} bytes at position {pos}")
        self.segment, self._data, self._at = seg, data, pos
        self._checked = set()

    def _header(self, seg: Segment, pos: int) -> BatchHead:
        self._load(seg, pos, BATCH_SIZE)
        head = parse_batch_header(self._data, pos - self._at)
        if head is None:
            self._logger.error("segment %s: bad batch header at position %d", seg.path, pos)
            raise CorruptRecord(f"{seg.path}: bad batch header at position {pos}")
        return head

    def _enter(self, seg: Segment, bpos: int, head: BatchHead) -> None:
        """Load the whole batch at ``bpos`` and check its records CRC (once per load)."""
        self._load(seg, bpos, BATCH_SIZE + head.length)
        if bpos in self._checked:
            return
        if not records_crc_ok(self._data, bpos - self._at + BATCH_SIZE, head.length,
                              head.records_crc):  # fmt: skip
            self._logger.error(
                "segment %s: batch at offset %d (position %d) failed its CRC32C check",
                seg.path, head.base, bpos,
            )  # fmt: skip
            self.forget()
            raise CorruptRecord(f"{seg.path}: batch at offset {head.base} failed its CRC32C check")
        self._checked.add(bpos)

    # -- positions -------------------------------------------------------------------

    def _batch_of(self, offset: int) -> tuple[Segment, int, BatchHead] | None:
        """(segment, position, header) of the flushed batch holding ``offset`` or, if that
        record is missing (a gap between segments, logged when the log was opened), the
        next one; None at the flushed end."""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        seg = self._segments[i]
        while offset >= seg.end:  # past its records: on to the next segment, over any gap
            i += 1
            if i >= len(self._segments):
                return None
            seg = self._segments[i]
            offset = max(offset, seg.base)
        _, pos = seg.locate(max(offset, seg.base))
        while True:
            if seg.holes:
                pos = seg.holes.get(pos, pos)
            head = self._header(seg, pos)
            if offset < head.base + head.n_records:
                return seg, pos, head
            pos += BATCH_SIZE + head.length

    def _position(self, offset: int) -> tuple[Segment, int, int, BatchHead] | None:
        """(segment, record position, batch position, header) of ``offset`` or the next."""
        cur = self._cursor
        if cur is not None and cur[0] == offset:
            _, seg, pos, bpos, _bend, head = cur
            self._enter(seg, bpos, head)
            return seg, pos, bpos, head
        found = self._batch_of(offset)
        if found is None:
            return None
        seg, bpos, head = found
        self._enter(seg, bpos, head)
        pos = bpos + BATCH_SIZE
        if offset > head.base:
            pos = self._at + scan_records(self._data, pos - self._at, offset - head.base)[0]
        return seg, pos, bpos, head

    # -- records and frames ----------------------------------------------------------

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
        seg, pos, bpos, head = st
        batch_seg = seg  # the segment (bpos, head) are in
        bend = bpos + BATCH_SIZE + head.length
        left = max_count
        budget = max_bytes
        last = self._segments[-1]
        parse = self._frames if frames else self._records
        while left:
            if pos >= bend:
                if seg.holes:
                    pos = seg.holes.get(pos, pos)  # a quarantined range: its offsets are skipped
                if pos >= seg.size:
                    if seg is last:
                        break
                    seg = self._segments[bisect_right(self._bases, seg.base)]
                    pos = bend = 0
                    continue
                bpos, head = pos, self._header(seg, pos)
                bend = bpos + BATCH_SIZE + head.length
                self._enter(seg, bpos, head)
                batch_seg = seg
                pos += BATCH_SIZE
                continue
            at = self._at
            whole = pos == bpos + BATCH_SIZE and left >= head.n_records and budget >= head.length
            if whole and _bulk(out, self._data, pos - at, head, frames):
                left -= head.n_records
                budget -= head.length - 4 * head.n_records
                pos = bend
                continue
            p, left, budget = parse(out, pos - at, bend - at, left, budget, head.epoch)
            pos = p + at
            if budget < 0:
                break
        if out:
            nxt = (out[-1][0] if frames else out[-1].offset) + 1
            # Kept only while it describes one segment: the loop may have moved on to the
            # next (empty: the end of the log after a gap) without entering a batch there.
            consistent = seg is batch_seg
            self._cursor = (nxt, seg, pos, bpos, bend, head) if consistent else None
        return out

    def _frames(
        self, out: list[Frame], p: int, e: int, left: int, budget: int, _epoch: int
    ) -> tuple[int, int, int]:
        """Parse frames from the buffer between p and e; budget < 0 means the byte bound hit."""
        data = self._data
        unpack = RECORD.unpack_from
        append = out.append
        while p < e:
            rlen, _crc, off, ts, da, fl, ext = unpack(data, p)
            if rlen > budget and out:
                return p, left, -1
            nxt = p + 4 + rlen
            if ext:
                at = p + RECORD_SIZE
                append((off, ts, da, fl, data[at + ext : nxt], data[at : at + ext]))
            else:
                append((off, ts, da, fl, data[p + RECORD_SIZE : nxt], b""))
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
        append = out.append
        while p < e:
            rlen, _crc, off, ts, da, fl, ext = unpack(data, p)
            if rlen > budget and out:
                return p, left, -1
            nxt = p + 4 + rlen
            start = p + RECORD_SIZE
            if ext:
                trace_id, key_len = EXT.unpack_from(data, start)
                key_at = start + EXT_SIZE
                fields = (off, ts, da, fl, data[start + ext : nxt], trace_id,
                          data[key_at : key_at + key_len], data[key_at + key_len : start + ext],
                          epoch)  # fmt: skip
            else:
                fields = (off, ts, da, fl, data[start:nxt], 0, b"", b"", epoch)
            append(_new(Record, fields))
            budget -= rlen
            p = nxt
            left -= 1
            if not left:
                break
        return p, left, budget

    # -- raw batches -----------------------------------------------------------------

    def read_raw(self, offset: int, max_bytes: int, verify: bool) -> RawBatch:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one
        batch), from one segment. A first batch that starts before ``offset`` is resealed
        to start there (a copy of that call's data); other calls are one ``pread``."""
        cur = self._raw_cursor
        if cur is not None and cur[0] == offset and cur[2] < cur[1].size and not cur[1].holes:
            _, seg, bpos = cur
        else:
            found = self._batch_of(offset)
            if found is None:
                return RawBatch(offset, 0, b"")
            seg, bpos, head = found
            offset = max(offset, head.base)
        limit = bpos + (max_bytes if max_bytes > 0 else 1)
        if seg.size <= limit:
            end = seg.size
        else:  # the last indexed batch start within the limit, if past the first batch
            idx = seg.index().idx_pos
            i = bisect_right(idx, limit) - 1
            end = idx[i] if i >= 0 and idx[i] > bpos else self._next_indexed(seg, bpos)
        if seg.holes:  # stop at the next quarantined range (the next call jumps over it)
            end = min([end, *(start for start in seg.holes if start > bpos)])
        fd = seg.open_fd()
        data = os.pread(fd, end - bpos, bpos)
        cut, base, count = self._walk_raw(seg, bpos, data, max_bytes, verify)
        if cut < len(data):
            data = data[:cut]
        offset = max(offset, base)  # (the offset asked for was lost: the data starts later)
        if offset > base:  # the first batch starts before the offset asked for
            data = self._reseal(data, offset - base)
            count -= offset - base
        self._raw_cursor = (offset + count, seg, bpos + cut)
        return RawBatch(offset, count, data)

    @staticmethod
    def _next_indexed(seg: Segment, bpos: int) -> int:
        """The first indexed batch start after ``bpos`` (the segment's end if none)."""
        idx = seg.index().idx_pos
        i = bisect_right(idx, bpos)
        return idx[i] if i < len(idx) else seg.size

    def _walk_raw(
        self, seg: Segment, bpos: int, data: bytes, max_bytes: int, verify: bool
    ) -> tuple[int, int, int]:
        """(bytes of whole batches within max_bytes, first base, records) of ``data``:
        every header's CRC and base offset checked, and the records CRCs with ``verify``."""
        pos = count = 0
        size = len(data)
        first = expect = -1
        unpack = BATCH.unpack_from
        while pos + BATCH_SIZE <= size:
            magic, hcrc, base, _epoch, n, length, rcrc, _ts = unpack(data, pos)
            nxt = pos + BATCH_SIZE + length
            if pos and nxt > max_bytes:  # (a garbled length may pass: checked just below)
                return pos, first, count
            if (
                magic != BATCH_MAGIC
                or crc32c(data[pos + BATCH_CRC_FROM : pos + BATCH_SIZE]) != hcrc
                or nxt > size
                or (base < expect and expect >= 0)
            ):
                break
            if base > expect >= 0:  # lost offsets jumped over (a repaired segment)
                return pos, first, count  # the next call starts at this batch
            if verify and not records_crc_ok(data, pos + BATCH_SIZE, length, rcrc):
                self._logger.error("segment %s: batch at offset %d failed its CRC32C check",
                                   seg.path, base)  # fmt: skip
                raise CorruptRecord(f"{seg.path}: batch at offset {base} failed its CRC32C check")
            if first < 0:
                first = base
            count += n
            expect = base + n
            pos = nxt
        if pos != size or not count:
            self._logger.error("segment %s: bad batch at position %d", seg.path, bpos + pos)
            raise CorruptRecord(f"{seg.path}: bad batch header at position {bpos + pos}")
        return pos, first, count

    @staticmethod
    def _reseal(data: bytes, skip: int) -> bytes:
        """``data`` with its first batch's first ``skip`` records dropped (a new header)."""
        head = parse_batch_header(data, 0)
        assert head is not None  # walked just before
        at, _ = scan_records(data, BATCH_SIZE, skip)
        end = BATCH_SIZE + head.length
        _, max_ts = scan_records(data, at, head.n_records - skip)
        rest = memoryview(data)[at:end]
        new = batch_header(head.base + skip, head.epoch, head.n_records - skip, end - at,
                           crc32c(rest), max_ts)  # fmt: skip
        rest.release()
        return b"".join((new, memoryview(data)[at:]))

    # -- time ------------------------------------------------------------------------

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
