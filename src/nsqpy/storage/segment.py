"""One segment file of a partition log and its sparse index sidecar.

Owns the in-memory view of a segment (first offset, size, next offset, newest timestamp,
the sparse index: offset -> file position and running max timestamp, one entry every
~``index_interval_bytes``, always at a batch start), the CRC scan used by recovery and
index rebuilds, the refusal of format-1 files, the cut point (and resealed batch) of a
truncation, and the sidecar file format. Files are named by their first offset, zero-padded to 20 digits so
they sort. Imports only the standard library, ``crc32c`` and ``nsqpy.errors``; no locks
here (the log owns concurrency).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from crc32c import crc32c

from nsqpy.errors import CorruptRecord, StorageError
from nsqpy.storage.budget import LOADED_INDEXES, OPEN_FILES
from nsqpy.storage.files import write_atomic
from nsqpy.storage.records import (
    BATCH,
    BATCH_MAGIC,
    BATCH_MAGIC_V1,
    BATCH_SIZE,
    BatchHead,
    batch_header,
    parse_batch_header,
    records_crc_ok,
    scan_records,
    walk_batch,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
SCAN_CHUNK = 1 << 20
# magic | version | covered size u64 | next offset u64 | max ts u64 | entries u32 | crc u32
INDEX_HEADER = struct.Struct("<4sIQQQII")
INDEX_MAGIC = b"NQIX"
INDEX_VERSION = 2
_MAGIC_BYTES = struct.pack("<I", BATCH_MAGIC)


def segment_name(base: int) -> str:
    return f"{base:020d}"


@dataclass(slots=True)
class ScanResult:
    """What a CRC scan of a segment found."""

    valid_size: int  # bytes of whole, valid batches from the start
    end: int  # next offset after the last valid record
    max_ts: int
    idx_off: array[int]
    idx_pos: array[int]
    idx_ts: array[int]
    epochs: list[tuple[int, int]]  # (epoch, first offset) at each epoch change in the file
    error: str | None  # why the scan stopped before the file's end (None = whole file valid)
    holes: list[Hole] = field(default_factory=list)  # bad ranges skipped, in file order
    torn: bool = False  # the error is a batch cut short by the file's end (a crash's write)


class Hole(NamedTuple):
    """A corrupt byte range inside a segment, between two valid batches."""

    start: int  # file position of the first bad byte (where a batch should have started)
    end: int  # file position of the next valid batch
    first_missing: int  # the offsets first_missing .. next_offset - 1 are lost
    next_offset: int
    why: str


def _index() -> array[int]:
    return array("Q")


@dataclass(slots=True, eq=False)
class Segment:
    """A segment's state. ``idx_ts[i]`` is the max timestamp of every record before entry i.

    Its descriptor is opened on demand and counts in ``OPEN_FILES`` (closed when the budget
    needs room: ``lock``, the log's, is held meanwhile so a sync in another thread never
    sees it go). A sealed segment's index is loaded from its sidecar when a seek needs it
    and counts in ``LOADED_INDEXES`` (dropped again when that budget needs room)."""

    base: int
    path: Path
    fd: int | None = None
    size: int = 0
    end: int = 0
    max_ts: int = 0
    idx_off: array[int] = field(default_factory=_index)
    idx_pos: array[int] = field(default_factory=_index)
    idx_ts: array[int] = field(default_factory=_index)
    last_index_pos: int = -(1 << 62)
    index_dirty: bool = True
    unsynced: bool = False
    # Corrupt ranges readers jump over: start position -> position of the next valid batch
    # (only when a repair could not be written; see nsqpy.storage.repair).
    holes: dict[int, int] = field(default_factory=dict)
    lock: Any = None  # the owning log's lock (an RLock)
    sealed: bool = False  # no more appends: its index may live in its sidecar only
    interval: int = 4096  # the log's index interval (to rebuild a lost sidecar)

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(INDEX_SUFFIX)

    # -- descriptor ----------------------------------------------------------------

    def open_fd(self) -> int:
        """The segment's descriptor, opened if needed; it becomes the most recently used."""
        fd = self.fd
        if fd is None:
            fd = self.fd = os.open(
                self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644
            )
        elif OPEN_FILES.last is self:  # already the most recent: nothing to reorder
            return fd
        OPEN_FILES.touch(self, self._evict_fd)
        return fd

    def close_fd(self) -> None:
        fd = self.fd
        if fd is not None:
            self.fd = None
            OPEN_FILES.release(self)
            os.close(fd)

    def _evict_fd(self) -> bool:
        lock = self.lock
        if lock is None:
            self.close_fd()
            return True
        with lock:
            self.close_fd()
        return True

    # -- index ---------------------------------------------------------------------

    def add_index(self, offset: int, pos: int, interval: int) -> None:
        """Note a batch starting at ``pos``; index it when ~interval bytes passed since the last."""
        if pos - self.last_index_pos >= interval:
            self.idx_off.append(offset)
            self.idx_pos.append(pos)
            self.idx_ts.append(self.max_ts)
            self.last_index_pos = pos
            self.index_dirty = True

    def index(self) -> Segment:
        """This segment with its index in memory (a sealed one's loaded if it was let go)."""
        if self.sealed:
            if self.index_dirty or self.idx_off or not self.size:
                LOADED_INDEXES.touch(self, self._unload_index)
            else:
                self._reload_index()
        return self

    def _reload_index(self) -> None:
        if not self.load_index(self.size):  # sidecar lost or stale: scan (and save) again
            scan = scan_segment(self.open_fd(), self.base, self.size, self.interval, False)
            self.idx_off, self.idx_pos, self.idx_ts = scan.idx_off, scan.idx_pos, scan.idx_ts
            self.save_index()
        LOADED_INDEXES.touch(self, self._unload_index)

    def _unload_index(self) -> bool:
        """Drop a sealed segment's index from memory (its sidecar keeps it)."""
        if not self.sealed or self.index_dirty:
            return False
        LOADED_INDEXES.release(self)
        self.idx_off, self.idx_pos, self.idx_ts = _index(), _index(), _index()
        return True

    def seal(self) -> None:
        """No more appends: save the sidecar and let the index go from memory."""
        self.sealed = True
        if self.index_dirty:
            self.save_index()
        if not self.holes:  # (a segment with holes keeps no sidecar: its index stays)
            self._unload_index()

    def forget(self) -> None:
        """The segment is gone (deleted, replaced): let go of its descriptor and index."""
        self.close_fd()
        LOADED_INDEXES.release(self)

    def locate(self, offset: int) -> tuple[int, int]:
        """(batch offset, file position) of the last indexed batch at or before ``offset``."""
        if self.sealed:
            self.index()
        i = bisect_right(self.idx_off, offset) - 1
        if i < 0:
            return self.base, 0
        return self.idx_off[i], self.idx_pos[i]

    def locate_time(self, ts: int) -> tuple[int, int]:
        """(offset, position) of the indexed batch to scan from for the first record >= ts."""
        if self.sealed:
            self.index()
        i = bisect_right(self.idx_ts, ts - 1) - 1  # last entry whose predecessors are all < ts
        if i < 0:
            return self.base, 0
        return self.idx_off[i], self.idx_pos[i]

    def adopt(self, scan: ScanResult) -> None:
        self.size = scan.valid_size
        self.end = scan.end
        self.max_ts = scan.max_ts
        self.idx_off, self.idx_pos, self.idx_ts = scan.idx_off, scan.idx_pos, scan.idx_ts
        self.last_index_pos = self.idx_pos[-1] if self.idx_pos else -(1 << 62)
        self.index_dirty = True
        self.holes = {h.start: h.end for h in scan.holes}

    # -- sidecar -------------------------------------------------------------------

    def save_index(self) -> None:
        """Write the sidecar atomically (temp, rename); it is rebuilt on open if lost.

        A segment with holes keeps no sidecar: only a scan finds its holes again."""
        if self.holes:
            self.index_path.unlink(missing_ok=True)
            self.index_dirty = False
            return
        n = len(self.idx_off)
        flat = array("Q", bytes(24 * n))
        flat[0::3], flat[1::3], flat[2::3] = self.idx_off, self.idx_pos, self.idx_ts
        if sys.byteorder != "little":
            flat.byteswap()
        body = flat.tobytes()
        head = INDEX_HEADER.pack(
            INDEX_MAGIC, INDEX_VERSION, self.size, self.end, self.max_ts, n, crc32c(body)
        )
        write_atomic(self.index_path, head + body, durable=False)  # (rebuilt if lost)
        self.index_dirty = False

    def load_index(self, file_size: int) -> bool:
        """Adopt the sidecar if it is intact and covers exactly ``file_size`` bytes."""
        try:
            data = self.index_path.read_bytes()
        except OSError:
            return False
        if len(data) < INDEX_HEADER.size:
            return False
        magic, version, covered, end, max_ts, n, crc = INDEX_HEADER.unpack_from(data)
        body = data[INDEX_HEADER.size :]
        if (magic, version) != (INDEX_MAGIC, INDEX_VERSION) or covered != file_size:
            return False
        if len(body) != 24 * n or crc32c(body) != crc or end < self.base:
            return False
        flat = array("Q", body)
        if sys.byteorder != "little":
            flat.byteswap()
        self.idx_off, self.idx_pos, self.idx_ts = flat[0::3], flat[1::3], flat[2::3]
        self.size, self.end, self.max_ts = covered, end, max_ts
        self.last_index_pos = self.idx_pos[-1] if n else -(1 << 62)
        self.index_dirty = False
        return True


def refuse_old_format(fd: int, path: Path) -> None:
    """Raise StorageError if the segment starts with a format-1 batch (never cut or move it)."""
    head = os.pread(fd, 4, 0)
    if len(head) == 4 and struct.unpack("<I", head)[0] == BATCH_MAGIC_V1:
        raise StorageError(
            f"{path} is in log format 1 (28-byte batch headers); this nsqpy reads format 2 "
            "only. The file was left untouched: drain it with the nsqpy that wrote it."
        )


class _Window:
    """A chunk of a file read with ``pread``, refilled as a scan moves on."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""
        self.at = 0

    def get(self, pos: int, n: int) -> tuple[bytes, int]:
        """A buffer holding bytes [pos, pos + n) (fewer at the file's end) and pos's index."""
        if pos < self.at or pos + n > self.at + len(self.data):
            self.data, self.at = os.pread(self.fd, max(SCAN_CHUNK, n), pos), pos
        return self.data, pos - self.at


def _batch_at(
    win: _Window, pos: int, file_size: int, expect: int, exact: bool
) -> tuple[BatchHead, int] | tuple[None, str]:
    """(header, bytes) of the whole, valid batch at ``pos``, or (None, why it is not).

    Its base must be ``expect`` (``exact``) or at least ``expect`` (resynchronising)."""
    data, i = win.get(pos, BATCH_SIZE)
    head = parse_batch_header(data, i)
    if head is None:
        return None, f"bad batch header at position {pos}"
    if head.n_records == 0 or head.base < expect or (exact and head.base != expect):
        return None, (
            f"batch at position {pos} has base {head.base} count {head.n_records}, "
            f"expected {expect}"
        )
    need = BATCH_SIZE + head.length
    if pos + need > file_size:
        return None, f"torn batch at position {pos} ({file_size - pos} of {need} bytes)"
    data, i = win.get(pos, need)
    if not records_crc_ok(data, i + BATCH_SIZE, head.length, head.records_crc):
        return None, f"batch at position {pos} (offset {head.base}) failed its CRC32C check"
    try:
        if walk_batch(data, i + BATCH_SIZE, head) != head.max_ts:
            raise CorruptRecord(f"batch at offset {head.base}: max timestamp mismatch")
    except CorruptRecord as exc:
        return None, f"at position {pos}: {exc}"
    return head, need


def _torn(win: _Window, pos: int, file_size: int) -> bool:
    """Whether the batch at ``pos`` is cut short by the end of the file (a write a crash
    interrupted), rather than damaged."""
    if file_size - pos < BATCH_SIZE:
        return True
    data, i = win.get(pos, BATCH_SIZE)
    head = parse_batch_header(data, i)
    return head is not None and pos + BATCH_SIZE + head.length > file_size


def _resync(win: _Window, bad: int, file_size: int, expect: int) -> int | None:
    """The position of the first whole, valid batch after the bad one at ``bad`` (None if
    there is none: a torn or garbled tail). Where the bad batch's header still holds, the
    position right after it is tried first; then every batch magic further on."""
    data, i = win.get(bad, BATCH_SIZE)
    head = parse_batch_header(data, i)
    if head is not None:
        after = bad + BATCH_SIZE + head.length
        if after < file_size and _batch_at(win, after, file_size, expect, False)[0] is not None:
            return after
    pos = bad + 1
    while pos + BATCH_SIZE <= file_size:
        chunk = os.pread(win.fd, SCAN_CHUNK, pos)
        i = chunk.find(_MAGIC_BYTES)
        while i >= 0:
            if _batch_at(win, pos + i, file_size, expect, False)[0] is not None:
                return pos + i
            i = chunk.find(_MAGIC_BYTES, i + 1)
        if len(chunk) < SCAN_CHUNK:
            break
        pos += len(chunk) - len(_MAGIC_BYTES) + 1  # a magic may straddle two chunks
    return None


def scan_segment(
    fd: int, base: int, file_size: int, interval: int, resync: bool = True
) -> ScanResult:
    """Walk every batch of a segment file: header CRC, base offset, length, records CRC,
    then each record's length and offset (the records CRC already vouches for their bytes).

    A bad batch followed by a valid one (``resync``) is a hole: its bytes are skipped, the
    offsets it held are missing, and the scan goes on. A bad batch with nothing valid after
    it ends the scan with ``error`` (a torn or garbled tail)."""
    res = ScanResult(0, base, 0, _index(), _index(), _index(), [], None)
    seg = Segment(base, Path())
    win = _Window(fd)
    pos = 0
    expect = base
    last_epoch = -1
    while pos < file_size:
        # A valid batch past the expected offset is a repaired segment's jump over offsets
        # that were lost (nsqpy.storage.repair): they are absent, and the scan goes on.
        head, found = _batch_at(win, pos, file_size, expect, False)
        if head is None:
            after = _resync(win, pos, file_size, expect) if resync else None
            if after is None:
                res.error = str(found)
                res.torn = _torn(win, pos, file_size)
                break
            data, i = win.get(after, BATCH_SIZE)
            next_base = BATCH.unpack_from(data, i)[2]
            res.holes.append(Hole(pos, after, expect, next_base, str(found)))
            pos, expect = after, next_base
            continue
        assert isinstance(found, int)
        seg.add_index(head.base, pos, interval)
        if head.max_ts > seg.max_ts:
            seg.max_ts = head.max_ts
        if head.epoch != last_epoch:
            res.epochs.append((head.epoch, head.base))
            last_epoch = head.epoch
        pos += found
        expect = head.base + head.n_records
    res.valid_size = pos
    res.end = expect
    res.max_ts = seg.max_ts
    res.idx_off, res.idx_pos, res.idx_ts = seg.idx_off, seg.idx_pos, seg.idx_ts
    return res


def cut_position(seg: Segment, fd: int, offset: int) -> int:
    """Where to cut so the segment ends just before ``offset``; reseals a split batch."""
    _, pos = seg.locate(offset)
    while True:
        start, pos = pos, seg.holes.get(pos, pos)
        head = parse_batch_header(os.pread(fd, BATCH_SIZE, pos), 0)
        if head is None:
            raise CorruptRecord(f"{seg.path}: bad batch header at {pos} while truncating")
        if offset < head.base + head.n_records:
            break
        pos += BATCH_SIZE + head.length
    if offset <= head.base:
        return start  # a hole just before this batch goes with it
    data = os.pread(fd, BATCH_SIZE + head.length, pos)
    keep = offset - head.base
    end, max_ts = scan_records(data, BATCH_SIZE, keep)
    records = memoryview(data)[BATCH_SIZE:end]
    new = batch_header(head.base, head.epoch, keep, end - BATCH_SIZE, crc32c(records), max_ts)
    records.release()
    os.pwrite(fd, new, pos)
    return pos + end
